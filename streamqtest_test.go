package streamq_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/streamqtest"
)

// TestWorker_AgreesWithConsumer runs each handler once through a real
// Consumer on Redis and once through a streamqtest.Worker with the same
// configuration, and requires the same verdict, and what the verdict says
// to be what Redis holds afterwards (the retried copy in the delayed set,
// due when the verdict says, or the dead letter with its reason).
func TestWorker_AgreesWithConsumer(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		attempt int
		handle  func(context.Context, *streamq.Message) error
	}{
		{"ack", 1, func(context.Context, *streamq.Message) error { return nil }},
		{"fail", 1, func(context.Context, *streamq.Message) error { return errBoom }},
		{"fail at the last attempt", 2, func(context.Context, *streamq.Message) error { return errBoom }},
		{"permanent", 1, func(context.Context, *streamq.Message) error { return streamq.Permanent(errBoom) }},
		{"retry after", 1, func(context.Context, *streamq.Message) error { return streamq.RetryAfter(time.Hour, errBoom) }},
		{"postpone at the last attempt", 2, func(context.Context, *streamq.Message) error { return streamq.Postpone(time.Hour, errBoom) }},
		{"panic", 1, func(context.Context, *streamq.Message) error { panic(errBoom) }},
		{"attempts used up", 3, func(context.Context, *streamq.Message) error { return nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := streamq.ConsumerConfig{
				MaxDeliveries: 2,
				Backoff:       func(n int) time.Duration { return time.Duration(n) * time.Hour },
				Block:         20 * time.Millisecond,
				Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
			}
			res, err := streamqtest.NewWorker(t, streamq.HandlerFunc(tc.handle), &cfg).
				Work(t.Context(), &streamqtest.Job{Payload: []byte("p"), Attempt: tc.attempt})
			if err != nil {
				t.Fatal(err)
			}
			got := consume(t, tc.handle, cfg, tc.attempt)
			if got.Outcome != res.Outcome || got.RetryIn != res.RetryIn || got.Reason != res.Reason {
				t.Fatalf("consumer: %+v, worker: %+v", got, res)
			}
		})
	}
}

// consume runs handle once in a consumer for a job at attempt, checks that
// Redis holds what the consumer's event said, and returns the verdict (Err
// left out).
func consume(t *testing.T, handle func(context.Context, *streamq.Message) error, cfg streamq.ConsumerConfig, attempt int) streamqtest.Result {
	t.Helper()
	ctx := t.Context()
	r := streamqtest.NewRedis(t)
	q := r.NewQueue("agree", nil)
	// A job written the way a retry writes it: attempt-1 charged attempts.
	fields := []string{"v", "1", "payload", "p", "attempt", strconv.Itoa(attempt - 1)}
	if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: r.KeyPrefix + ":{agree}:stream", Values: fields}).Err(); err != nil {
		t.Fatal(err)
	}
	events := make(chan streamq.Event, 1)
	cfg.OnEvent = func(_ context.Context, e streamq.Event) { events <- e }
	cfg.SchedulerInterval = -1 // retries stay in the delayed set
	settled := make(chan struct{}, 1)
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		defer func() { settled <- struct{}{} }()
		return handle(ctx, msg)
	}), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	select {
	case <-settled:
	case e := <-events: // dead-lettered without running
		events <- e
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer did not run the job within 10s")
	}
	stop() // Run settles what finished before it returns
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var e streamq.Event
	select {
	case e = <-events:
	default:
		streamqtest.RequireEnqueuedN(ctx, t, q, 0)
		if c.Stats().Processed != 1 {
			t.Fatalf("no event and %+v", c.Stats())
		}
		return streamqtest.Result{Outcome: streamqtest.Acked}
	}
	switch e.Kind {
	case streamq.EventRetried, streamq.EventPostponed:
		next := attempt
		if e.Kind == streamq.EventPostponed {
			next-- // not charged
		}
		streamqtest.RequireEnqueued(ctx, t, q, streamqtest.Want{
			Payload: []byte("p"), DueAt: time.Now().Add(e.Delay), DueWithin: 10 * time.Second,
			Match: func(j streamqtest.EnqueuedJob) bool { return j.Attempt == next },
		})
		if e.Kind == streamq.EventPostponed {
			return streamqtest.Result{Outcome: streamqtest.Postponed, RetryIn: e.Delay}
		}
		return streamqtest.Result{Outcome: streamqtest.Retried, RetryIn: e.Delay}
	case streamq.EventDeadLettered:
		dls, _, err := q.DeadLetters().List(ctx, "", 10)
		if err != nil || len(dls) != 1 || dls[0].Reason != e.Reason {
			t.Fatalf("dead letters %+v, %v; want one with reason %s", dls, err, e.Reason)
		}
		return streamqtest.Result{Outcome: streamqtest.DeadLettered, Reason: e.Reason}
	}
	t.Fatalf("unexpected event %+v", e)
	return streamqtest.Result{}
}
