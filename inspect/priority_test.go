package inspect_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
)

func TestQueue_Priority(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	register(t, e.c, e.prefix, e.name, "priority")
	pq, err := priority.NewQueue(e.q, nil)
	if err != nil {
		t.Fatal(err)
	}
	push := func(p int, payload string) string {
		id, err := pq.Push(ctx, priority.Job{Priority: p, Payload: []byte(payload)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	retry := push(9, "retry") // runs first and fails
	block := push(8, "block") // then holds the worker's only slot
	release := make(chan struct{})
	h := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		switch string(m.Payload) {
		case "block":
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		case "retry":
			return streamq.RetryAfter(time.Hour, errors.New("flaky"))
		}
		return nil
	})
	w, err := priority.NewWorker(pq, h, &priority.WorkerConfig{Name: "w1", Concurrency: 1, Block: 10 * time.Millisecond, ControlInterval: control})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "worker", 10*time.Second, w.Run)
	defer func() {
		close(release)
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	}()
	iq, err := e.in.Queue(ctx, e.name)
	if err != nil || iq.Kind() != inspect.KindPriority {
		t.Fatalf("Queue: %v, %v", iq, err)
	}
	redistest.WaitFor(t, 10*time.Second, "a running and a retrying job", func() bool {
		o, err := iq.Overview(ctx)
		return err == nil && o.Running == 1 && o.Retrying == 1
	})
	low, mid := push(1, "low"), push(5, "mid")
	push(5, "mid2")
	levels, err := iq.Levels(ctx)
	if err != nil || !slices.Equal(levels, []inspect.Level{{Priority: 5, Count: 2}, {Priority: 1, Count: 1}}) {
		t.Errorf("levels %+v, %v", levels, err)
	}
	p, err := iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting})
	if err != nil || !slices.Equal(payloads(p), []string{"mid", "mid2", "low"}) || p.Jobs[0].Priority != 5 {
		t.Fatalf("waiting %+v, %v", p, err)
	}
	for id, want := range map[string]inspect.State{block: inspect.StateRunning, retry: inspect.StateRetrying, low: inspect.StateWaiting} {
		j, err := iq.Job(ctx, id)
		if err != nil || j.State != want {
			t.Errorf("Job(%s) = %+v, %v; want %s", id, j, err, want)
		}
	}
	run := first(t, iq, inspect.StateRunning)
	if run.Owner != "w1" || string(run.Payload) != "block" {
		t.Errorf("running job %+v", run)
	}
	if err := iq.Delete(ctx, mid); err != nil {
		t.Error(err)
	}
	var se *inspect.StateError
	if err := iq.Delete(ctx, block); !errors.As(err, &se) || se.State != inspect.StateRunning {
		t.Errorf("Delete(running) = %v", err)
	}
	if err := iq.RunNow(ctx, retry); err != nil {
		t.Error(err)
	}
	if j, err := iq.Job(ctx, retry); err != nil || j.State != inspect.StateWaiting {
		t.Errorf("after RunNow: %+v, %v", j, err)
	}
	o, err := iq.Overview(ctx)
	if err != nil || o.Waiting != 3 || o.Running != 1 || o.Retrying != 0 || o.OldestWaiting <= 0 {
		t.Errorf("overview %+v, %v", o, err)
	}
	cs, err := iq.Consumers(ctx)
	if err != nil || len(cs) != 1 || cs[0].Name != "w1" || cs[0].Kind != "worker" || cs[0].Pending != 1 {
		t.Errorf("workers %+v, %v", cs, err)
	}
	// Last, as the worker then takes the waiting jobs.
	if err := iq.Cancel(ctx, block); err != nil {
		t.Fatal(err)
	}
	if j := waitState(t, iq, block, inspect.StateCancelled); j.ID != block || string(j.Payload) != "block" {
		t.Errorf("cancelled job %+v", j)
	}
}
