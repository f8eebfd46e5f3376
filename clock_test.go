package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
)

// skew is how far the clocks of the skewed processes are off.
const skew = 30 * time.Second

// skewedQueue opens the queue called name as a process whose clock is off
// by d would: its own client and a clock moved by d.
func skewedQueue(t *testing.T, name string, d time.Duration) *streamq.Queue {
	t.Helper()
	q, err := streamq.NewQueue(redistest.NewClient(t), name, nil)
	if err != nil {
		t.Fatal(err)
	}
	streamq.SkewClock(q, d)
	return q
}

// serverTime returns the Redis server's clock.
func serverTime(t *testing.T, c *redis.Client) time.Time {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestClock_Skew: with a producer and consumers whose clocks are 30 s
// ahead or behind, a delayed job runs no earlier than its delay after it
// was stored, and a retry no earlier than its backoff after the attempt
// failed, all measured on the Redis server's clock. Each consumer of a
// pair runs the scheduler of delayed jobs; either may promote a job the
// other wrote.
func TestClock_Skew(t *testing.T) {
	t.Parallel()
	const (
		delay   = 1500 * time.Millisecond
		backoff = 1200 * time.Millisecond
	)
	for _, d := range []time.Duration{skew, -skew} {
		t.Run(fmt.Sprintf("producer %+v", d), func(t *testing.T) {
			t.Parallel()
			_, q, _ := promoteSetup(t, nil)
			pq := skewedQueue(t, q.Name(), d)
			sp, err := streamq.NewProducer(pq, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := redistest.NewClient(t)

			type start struct {
				payload string
				attempt int
				at      time.Time // the server's time
			}
			var (
				mu     sync.Mutex
				failed time.Time // the server's time when the first attempt of "retry" failed
			)
			starts := make(chan start, 16)
			h := func(ctx context.Context, m *streamq.Message) error {
				now, err := c.Time(ctx).Result()
				if err != nil {
					return err // retried: the test then sees a later start
				}
				starts <- start{payload: string(m.Payload), attempt: m.Attempt, at: now}
				if string(m.Payload) == "retry" && m.Attempt == 1 {
					mu.Lock()
					defer mu.Unlock()
					if failed, err = c.Time(ctx).Result(); err != nil {
						return err
					}
					return streamq.RetryAfter(backoff, errors.New("first attempt fails"))
				}
				return nil
			}
			for _, cd := range []time.Duration{skew, -skew} {
				ctlConsumer(t, skewedQueue(t, q.Name(), cd), h, streamq.ConsumerConfig{SchedulerInterval: 10 * time.Millisecond})
			}

			stored := serverTime(t, c)
			if _, err := sp.Enqueue(context.Background(), []byte("delayed"), streamq.ProcessIn(delay)); err != nil {
				t.Fatal(err)
			}
			if _, err := sp.Enqueue(context.Background(), []byte("retry")); err != nil {
				t.Fatal(err)
			}
			timeout := time.After(15 * time.Second)
			for seen := 0; seen < 3; seen++ {
				var s start
				select {
				case s = <-starts:
				case <-timeout:
					t.Fatalf("only %d of 3 starts within 15 s", seen)
				}
				switch {
				case s.payload == "delayed":
					if early := stored.Add(delay).Sub(s.at); early > 0 {
						t.Errorf("the delayed job started %v early (stored at %v, started at %v by the server's clock)", early, stored, s.at)
					}
				case s.payload == "retry" && s.attempt == 2:
					mu.Lock()
					f := failed
					mu.Unlock()
					if early := f.Add(backoff).Sub(s.at); early > 0 {
						t.Errorf("the retry started %v before its backoff ended (failed at %v, started at %v by the server's clock)", early, f, s.at)
					}
				case s.payload == "retry" && s.attempt == 1:
				default:
					t.Errorf("unexpected start %+v", s)
				}
			}
		})
	}
}
