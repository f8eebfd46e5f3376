package inspect_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

// setupCompleted returns a queue whose consumers keep completed jobs as
// cfg says (nil: they keep none).
func setupCompleted(t *testing.T, cfg *streamq.QueueConfig) *env {
	t.Helper()
	e := setup(t, nil)
	if cfg != nil {
		c := *cfg
		c.KeyPrefix = e.prefix
		var err error
		if e.q, err = streamq.NewQueue(e.c, e.name, &c); err != nil {
			t.Fatal(err)
		}
		if e.p, err = streamq.NewProducer(e.q, nil); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// runAll runs a consumer of e's queue with h until cond holds.
func (e *env) runAll(t *testing.T, h streamq.HandlerFunc, what string, cond func() bool) {
	t.Helper()
	cons, err := streamq.NewConsumer(e.q, h, &streamq.ConsumerConfig{Block: 10 * time.Millisecond, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "consumer", 20*time.Second, cons.Run)
	redistest.WaitFor(t, 15*time.Second, what, cond)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// listAll pages through the completed jobs limit at a time.
func listAll(t *testing.T, q *inspect.Queue, limit int) []inspect.Job {
	t.Helper()
	var all []inspect.Job
	cursor := ""
	for range 100 {
		p, err := q.Jobs(context.Background(), inspect.ListOptions{State: inspect.StateCompleted, Limit: limit, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Jobs...)
		if cursor = p.Cursor; cursor == "" {
			return all
		}
	}
	t.Fatal("more than 100 pages")
	return nil
}

func TestQueue_CompletedJobs(t *testing.T) {
	t.Parallel()
	e := setupCompleted(t, &streamq.QueueConfig{CompletedRetention: time.Hour})
	ctx := context.Background()
	var ok []string
	for _, p := range []string{"ok-1", "ok-2", "flaky", "ok-4"} {
		ok = append(ok, e.enqueue(t, p, streamq.WithKind("mail")))
	}
	dead := e.enqueue(t, "bad")
	cancelled := e.enqueue(t, "cancel")
	started := make(chan struct{})
	h := func(ctx context.Context, m *streamq.Message) error {
		switch string(m.Payload) {
		case "bad":
			return streamq.Permanent(errors.New("boom"))
		case "flaky":
			if m.Attempt == 1 {
				return streamq.RetryAfter(time.Millisecond, errors.New("once"))
			}
		case "cancel":
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	cons, err := streamq.NewConsumer(e.q, streamq.HandlerFunc(h), &streamq.ConsumerConfig{Block: 10 * time.Millisecond, Concurrency: 4, SchedulerInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "consumer", 20*time.Second, cons.Run)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the job to cancel did not start")
	}
	if err := e.iq.Cancel(ctx, cancelled); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 15*time.Second, "every job settled", func() bool {
		o, err := e.iq.Overview(ctx)
		return err == nil && o.Completed == 4 && o.Dead == 1 && o.Cancelled == 1 && o.Running == 0 && o.Delayed+o.Retrying == 0
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}

	all := listAll(t, e.iq, 0)
	var ids []string
	for i, j := range all {
		ids = append(ids, j.ID)
		if j.State != inspect.StateCompleted || j.Queue != e.name || j.Kind != "mail" {
			t.Errorf("job %s: state %s, queue %q, kind %q", j.ID, j.State, j.Queue, j.Kind)
		}
		if j.FinishedAt.IsZero() || j.StartedAt.After(j.FinishedAt) || j.EnqueuedAt.After(j.StartedAt.Add(time.Second)) {
			t.Errorf("job %s: enqueued %v, started %v, finished %v", j.ID, j.EnqueuedAt, j.StartedAt, j.FinishedAt)
		}
		if i > 0 && all[i-1].FinishedAt.Before(j.FinishedAt) {
			t.Errorf("job %s finished after the one listed before it: want newest first", j.ID)
		}
		if string(j.Payload) == "" || j.PayloadSize != len(j.Payload) {
			t.Errorf("job %s: payload %q, size %d", j.ID, j.Payload, j.PayloadSize)
		}
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	want := slices.Clone(ok)
	slices.Sort(want)
	if !slices.Equal(sorted, want) {
		t.Fatalf("completed %v, want the succeeded jobs %v (not the dead %s or the cancelled %s)", ids, ok, dead, cancelled)
	}
	if paged := listAll(t, e.iq, 1); !slices.EqualFunc(paged, all, func(a, b inspect.Job) bool { return a.ID == b.ID }) {
		t.Errorf("pages of one list %v, want %v", paged, ids)
	}

	j, err := e.iq.Job(ctx, ok[2]) // the retried one: found under its stable ID
	if err != nil {
		t.Fatal(err)
	}
	if j.State != inspect.StateCompleted || j.Attempt != 2 || string(j.Payload) != "flaky" || j.FinishedAt.IsZero() {
		t.Errorf("Job(%s) = state %s, attempt %d, payload %q, finished %v; want completed on attempt 2", ok[2], j.State, j.Attempt, j.Payload, j.FinishedAt)
	}
	for id, st := range map[string]inspect.State{dead: inspect.StateDead, cancelled: inspect.StateCancelled} {
		if j, err := e.iq.Job(ctx, id); err != nil || j.State != st {
			t.Errorf("Job(%s) = %+v, %v; want %s", id, j, err, st)
		}
	}

	ret, err := e.iq.CompletedRetention(ctx)
	if err != nil || ret != (inspect.CompletedRetention{Retention: time.Hour, Max: streamq.DefaultCompletedMax}) {
		t.Errorf("CompletedRetention = %+v, %v", ret, err)
	}
	for _, o := range []inspect.ListOptions{
		{State: inspect.StateCompleted, Cursor: "zzz"},
		{State: inspect.StateCompleted, Header: map[string]string{"a": "b"}},
	} {
		if _, err := e.iq.Jobs(ctx, o); err == nil {
			t.Errorf("Jobs(%+v) succeeded", o)
		} else if o.Cursor != "" && !errors.Is(err, inspect.ErrInvalidCursor) {
			t.Errorf("Jobs(cursor %q) = %v, want ErrInvalidCursor", o.Cursor, err)
		}
	}
}

func TestQueue_CompletedJobsCapped(t *testing.T) {
	t.Parallel()
	e := setupCompleted(t, &streamq.QueueConfig{CompletedRetention: time.Hour, CompletedMax: 2})
	ctx := context.Background()
	for range 5 {
		e.enqueue(t, "x")
	}
	e.runAll(t, func(context.Context, *streamq.Message) error { return nil }, "every job done", func() bool {
		s, err := e.q.Stats(ctx)
		return err == nil && s.Pending == 0 && s.Lag == 0
	})
	if all := listAll(t, e.iq, 0); len(all) != 2 {
		t.Fatalf("%d completed jobs listed, want the cap (2)", len(all))
	}
	if o, err := e.iq.Overview(ctx); err != nil || o.Completed != 2 {
		t.Fatalf("Overview = %+v, %v; want 2 completed", o, err)
	}
}

// A queue that keeps no completed jobs writes no record and lists none.
func TestQueue_CompletedJobsOff(t *testing.T) {
	t.Parallel()
	e := setupCompleted(t, nil)
	ctx := context.Background()
	id := e.enqueue(t, "x")
	e.runAll(t, func(context.Context, *streamq.Message) error { return nil }, "the job done", func() bool {
		s, err := e.q.Stats(ctx)
		return err == nil && s.Pending == 0 && s.Lag == 0
	})
	for _, k := range redistest.ScanKeys(t, e.c, e.prefix+":*") {
		if strings.Contains(k, "completed") || strings.HasSuffix(k, ":cr") {
			t.Errorf("key %s written", k)
		}
	}
	if all := listAll(t, e.iq, 0); len(all) != 0 {
		t.Errorf("listed %v", all)
	}
	if j, err := e.iq.Job(ctx, id); err != nil || j.State != inspect.StateDone {
		t.Errorf("Job = %+v, %v; want done", j, err)
	}
	if ret, err := e.iq.CompletedRetention(ctx); err != nil || ret.Retention != 0 {
		t.Errorf("CompletedRetention = %+v, %v", ret, err)
	}
}
