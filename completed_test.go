package streamq_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
)

func TestNewQueue_CompletedConfig(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	for _, tc := range []struct {
		name string
		cfg  streamq.QueueConfig
		want string // part of the error, "" for none
	}{
		{"off", streamq.QueueConfig{}, ""},
		{"on with the default cap", streamq.QueueConfig{CompletedRetention: time.Hour}, ""},
		{"on without a cap", streamq.QueueConfig{CompletedRetention: time.Hour, CompletedMax: -1}, ""},
		{"negative retention", streamq.QueueConfig{CompletedRetention: -time.Second}, "CompletedRetention"},
		{"below a millisecond", streamq.QueueConfig{CompletedRetention: time.Microsecond}, "at least 1ms"},
		{"cap without retention", streamq.QueueConfig{CompletedMax: 5}, "without CompletedRetention"},
		{"negative cap", streamq.QueueConfig{CompletedRetention: time.Hour, CompletedMax: -2}, "CompletedMax"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := streamq.NewQueue(c, "q", &tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("NewQueue: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("NewQueue = %v, want an error about %q", err, tc.want)
			}
		})
	}
}

// scriptCalls records the scripts (by name) and the XACK commands a client
// sends.
type scriptCalls struct {
	mu    sync.Mutex
	names map[string]string // SHA -> name
	seen  map[string]int
}

func newScriptCalls(c *redis.Client) *scriptCalls {
	s := &scriptCalls{names: map[string]string{}, seen: map[string]int{}}
	for name, sc := range rdb.Scripts() {
		s.names[sc.Hash()] = name
	}
	c.AddHook(redistest.AfterEach(func(cmd redis.Cmder) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch args := cmd.Args(); cmd.Name() {
		case "evalsha", "eval":
			sha, _ := args[1].(string)
			s.seen[s.names[sha]]++
		case "xack":
			s.seen["XACK"]++
		}
	}))
	return s
}

func (s *scriptCalls) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[name]
}

// A consumer of a queue that keeps no completed jobs acknowledges with the
// plain XACK, as before the feature; one that keeps them with the one
// script that records them.
func TestConsumer_CompletedAck(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[on]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := redistest.NewClient(t)
			calls := newScriptCalls(c)
			prefix := "t-" + redistest.Name(t)
			redistest.DeleteKeysAtCleanup(t, c, prefix+":*")
			cfg := &streamq.QueueConfig{KeyPrefix: prefix}
			if on {
				cfg.CompletedRetention = time.Hour
			}
			q, err := streamq.NewQueue(c, "jobs", cfg)
			if err != nil {
				t.Fatal(err)
			}
			p, err := streamq.NewProducer(q, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for range 3 {
				if _, err := p.Enqueue(ctx, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			cons, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }), &streamq.ConsumerConfig{Block: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			r := redistest.Background(t, "consumer", 10*time.Second, cons.Run)
			redistest.WaitFor(t, 10*time.Second, "the jobs done", func() bool {
				s, err := q.Stats(ctx)
				return err == nil && s.Pending == 0 && s.Lag == 0 && s.Length == 3
			})
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
			k := core.Of(q).Keys
			n := c.ZCard(ctx, k.Completed()).Val()
			if on {
				if calls.count("ack_completed") == 0 || calls.count("XACK") != 0 || n != 3 {
					t.Errorf("ack_completed ran %d times, XACK %d; %d records, want the script only and 3", calls.count("ack_completed"), calls.count("XACK"), n)
				}
				return
			}
			if calls.count("XACK") == 0 || calls.count("ack_completed")+calls.count("ack")+calls.count("record_completed") != 0 {
				t.Errorf("XACK sent %d times, scripts ack_completed %d, ack %d: want the plain XACK only", calls.count("XACK"), calls.count("ack_completed"), calls.count("ack"))
			}
			for _, key := range redistest.ScanKeys(t, c, k.Pattern()) {
				if strings.Contains(key, "completed") || key == k.CompletedSettings() {
					t.Errorf("key %s written", key)
				}
			}
		})
	}
}
