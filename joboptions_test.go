package streamq_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
)

// TestJobOptions_MaxAttemptsOverridesQueue: a job with MaxAttempts(2) on a
// consumer allowing 10 is dead-lettered after its second failure; one with
// MaxAttempts(4) on a consumer allowing 1 is retried up to 4 times.
func TestJobOptions_MaxAttemptsOverridesQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		queue, perJob int
	}{{"lower", 10, 2}, {"higher", 1, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, q, p := typedSetup(t)
			ctx := context.Background()
			if _, err := p.Enqueue(ctx, []byte("x"), streamq.MaxAttempts(tc.perJob)); err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int32
			dead := make(chan streamq.Event, 1)
			typedConsumer(t, q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
				runs.Add(1)
				return errors.New("fails")
			}), tc.queue, func(_ context.Context, e streamq.Event) {
				if e.Kind == streamq.EventDeadLettered {
					dead <- e
				}
			})
			e := recv(t, dead, 10*time.Second, "the dead letter")
			if e.Reason != streamq.ReasonMaxDeliveries || int(runs.Load()) != tc.perJob || e.Message.Attempt != tc.perJob {
				t.Errorf("dead letter %q after %d runs (attempt %d), want after %d", e.Reason, runs.Load(), e.Message.Attempt, tc.perJob)
			}
		})
	}
}

// TestJobOptions_TimeoutOverridesQueue: a job's Timeout bounds its handler
// in place of the consumer's JobTimeout (5 minutes here).
func TestJobOptions_TimeoutOverridesQueue(t *testing.T) {
	t.Parallel()
	_, q, p := typedSetup(t)
	ctx := context.Background()
	if _, err := p.Enqueue(ctx, []byte("x"), streamq.Timeout(150*time.Millisecond), streamq.MaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	type result struct {
		left  time.Duration
		cause error
		took  time.Duration
	}
	out := make(chan result, 1)
	typedConsumer(t, q, streamq.HandlerFunc(func(ctx context.Context, _ *streamq.Message) error {
		start := time.Now()
		dl, _ := ctx.Deadline()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
		out <- result{dl.Sub(start), context.Cause(ctx), time.Since(start)}
		return ctx.Err()
	}), 5, nil)
	r := recv(t, out, 15*time.Second, "the handler's end")
	if r.left <= 0 || r.left > 150*time.Millisecond || !errors.Is(r.cause, streamq.ErrJobTimeout) || r.took > 5*time.Second {
		t.Errorf("deadline in %s, cause %v, cancelled after %s: want within 150ms, ErrJobTimeout", r.left, r.cause, r.took)
	}
}

// TestJobOptions_Deadline: a job whose deadline passes while it waits is
// dead-lettered with reason deadline without running; a running job's
// context ends at its deadline.
func TestJobOptions_Deadline(t *testing.T) {
	t.Parallel()
	_, q, p := typedSetup(t)
	ctx := context.Background()
	if _, err := p.Enqueue(ctx, []byte("late"), streamq.Deadline(time.Now().Add(100*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	// The deadline passes before any consumer runs (by Redis's clock too:
	// the queue's clock says when it has).
	waitClock(t, q, time.Now().Add(150*time.Millisecond))
	running := time.Now().Add(3 * time.Second)
	if _, err := p.Enqueue(ctx, []byte("running"), streamq.Deadline(running)); err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, 2)
	deadlines := make(chan time.Time, 2)
	dead := make(chan streamq.Event, 2)
	typedConsumer(t, q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		ran <- string(m.Payload)
		dl, _ := ctx.Deadline()
		deadlines <- dl
		return nil
	}), 5, func(_ context.Context, e streamq.Event) {
		if e.Kind == streamq.EventDeadLettered {
			dead <- e
		}
	})
	e := recv(t, dead, 10*time.Second, "the late job's dead letter")
	if e.Reason != streamq.ReasonDeadline || string(e.Message.Payload) != "late" || !strings.Contains(e.Err.Error(), "deadline") {
		t.Errorf("dead letter: reason %q, payload %q, err %v", e.Reason, e.Message.Payload, e.Err)
	}
	if got := recv(t, ran, 10*time.Second, "the running job"); got != "running" {
		t.Errorf("ran %q: the late job ran", got)
	}
	if dl := recv(t, deadlines, time.Second, "its deadline"); !dl.Equal(time.UnixMilli(running.UnixMilli())) {
		t.Errorf("handler deadline %s, want the job's %s", dl, running)
	}
}

// waitClock waits until the queue's clock (Redis TIME) is past t.
func waitClock(t *testing.T, q *streamq.Queue, at time.Time) {
	t.Helper()
	redistest.WaitFor(t, 5*time.Second, "the queue's clock to pass "+at.String(), func() bool { return core.Of(q).DB.Now().After(at) })
}

// TestJobOptions_ResultRetention: a job's ResultRetention sets the TTL of
// its result in place of the consumer's.
func TestJobOptions_ResultRetention(t *testing.T) {
	t.Parallel()
	c, q, p := typedSetup(t)
	ctx := context.Background()
	id, err := p.Enqueue(ctx, []byte("x"), streamq.ResultRetention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	typedConsumer(t, q, streamq.HandlerFunc(func(ctx context.Context, _ *streamq.Message) error {
		done <- streamq.SetResult(ctx, []byte("42"))
		return nil
	}), 5, nil)
	if err := recv(t, done, 10*time.Second, "SetResult"); err != nil {
		t.Fatal(err)
	}
	ttl := c.PTTL(ctx, core.Of(q).Keys.Result(id)).Val()
	if ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("result TTL %s, want the job's hour (the consumer's default is %s)", ttl, streamq.DefaultResultRetention)
	}
}
