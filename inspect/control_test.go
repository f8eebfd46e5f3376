package inspect_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
)

func stateOf(t *testing.T, f *fixture, id string) inspect.State {
	t.Helper()
	j, err := f.iq.Job(context.Background(), id)
	if errors.Is(err, inspect.ErrJobNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return j.State
}

func first(t *testing.T, q *inspect.Queue, st inspect.State) inspect.Job {
	t.Helper()
	p, err := q.Jobs(context.Background(), inspect.ListOptions{State: st, Limit: 1})
	if err != nil || len(p.Jobs) != 1 {
		t.Fatalf("first %s job: %v, %v", st, p, err)
	}
	return p.Jobs[0]
}

func TestQueue_Delete(t *testing.T) {
	t.Parallel()
	f := setupStates(t)
	ctx := context.Background()
	retry := first(t, f.iq, inspect.StateRetrying)
	dead := first(t, f.iq, inspect.StateDead)
	for _, id := range []string{f.waiting[1], f.delayed, retry.EntryID, "x:" + dead.EntryID, "x:" + f.cancelled} {
		if err := f.iq.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%s): %v", id, err)
		}
		if err := f.iq.Delete(ctx, id); !errors.Is(err, inspect.ErrJobNotFound) {
			t.Errorf("Delete(%s) again: %v, want ErrJobNotFound", id, err)
		}
	}
	o, err := f.iq.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o.Waiting != 2 || o.Delayed != 0 || o.Retrying != 0 || o.Dead != 0 || o.Cancelled != 0 || o.Running != 1 {
		t.Errorf("after deletes: %+v", o)
	}
	var se *inspect.StateError
	err = f.iq.Delete(ctx, f.running)
	if !errors.As(err, &se) || se.State != inspect.StateRunning || se.Error() != "inspect: job "+f.running+" is running: cannot delete; cancel it first" {
		t.Errorf("Delete(running) = %v", err)
	}
	if err := f.iq.Delete(ctx, f.done); !errors.As(err, &se) || se.State != inspect.StateDone {
		t.Errorf("Delete(done) = %v", err)
	}
}

func TestQueue_DeleteReleasesUniqueKey(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	for _, opts := range [][]streamq.EnqueueOption{
		{streamq.Unique("k1", time.Hour)},
		{streamq.Unique("k2", time.Hour), streamq.ProcessIn(time.Hour)},
	} {
		id := e.enqueue(t, "x", opts...)
		if err := e.iq.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		id2, err := e.p.Enqueue(ctx, []byte("y"), opts...)
		if err != nil || id2 == id {
			t.Errorf("enqueue after delete: %s, %v: the unique key was not released", id2, err)
		}
	}
}

func TestQueue_RunNow(t *testing.T) {
	t.Parallel()
	f := setupStates(t)
	ctx := context.Background()
	retry := first(t, f.iq, inspect.StateRetrying)
	if retry.ID != f.retrying {
		t.Errorf("retrying copy's stable ID %s, want %s", retry.ID, f.retrying)
	}
	for _, id := range []string{f.delayed, retry.ID} {
		if err := f.iq.RunNow(ctx, id); err != nil {
			t.Fatalf("RunNow(%s): %v", id, err)
		}
		if st := stateOf(t, f, id); st != inspect.StateWaiting {
			t.Errorf("after RunNow(%s) the job is %q, want waiting (found by its stable ID)", id, st)
		}
	}
	p, _ := f.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting})
	if got := payloads(p); !slices.Equal(got, []string{"alpha-1", "beta-2", "alpha-3", "later", "retry"}) {
		t.Errorf("waiting after RunNow: %q", got)
	}
	var se *inspect.StateError
	if err := f.iq.RunNow(ctx, f.waiting[0]); !errors.As(err, &se) || se.State != inspect.StateWaiting {
		t.Errorf("RunNow(waiting) = %v", err)
	}
}

func TestQueue_Cancel(t *testing.T) {
	t.Parallel()
	f := setupStates(t)
	ctx := context.Background()
	if err := f.iq.Cancel(ctx, f.running); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.c.HExists(ctx, f.key("cancel"), f.running).Result(); err != nil || !ok {
		t.Errorf("no cancel request for %s: %v", f.running, err)
	}
	var se *inspect.StateError
	for id, st := range map[string]inspect.State{f.waiting[0]: inspect.StateWaiting, f.done: inspect.StateDone, f.delayed: inspect.StateDelayed} {
		if err := f.iq.Cancel(ctx, id); !errors.As(err, &se) || se.State != st {
			t.Errorf("Cancel(%s) = %v, want a StateError for %s", id, err, st)
		}
	}
	if err := f.iq.Cancel(ctx, "9-9"); !errors.Is(err, inspect.ErrJobNotFound) {
		t.Errorf("Cancel(unknown) = %v", err)
	}
}

func TestQueue_DeadByFilter(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	for range 150 {
		e.addDead(t, "a", "permanent", "database is down")
	}
	for range 30 {
		e.addDead(t, "b", "max_deliveries", "timeout")
	}
	e.addDead(t, "c", "cancelled", "context canceled")
	count := func(f inspect.DeadFilter) int {
		n, err := e.iq.CountDead(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(inspect.DeadFilter{}); n != 181 {
		t.Errorf("CountDead() = %d, want 181", n)
	}
	if n := count(inspect.DeadFilter{Error: "database"}); n != 150 {
		t.Errorf("CountDead(error database) = %d, want 150", n)
	}
	if n := count(inspect.DeadFilter{Until: time.Now().Add(-time.Hour)}); n != 0 {
		t.Errorf("CountDead(until an hour ago) = %d, want 0", n)
	}
	var calls []int
	n, err := e.iq.RequeueDead(ctx, inspect.DeadFilter{Reason: "permanent"}, func(done int) { calls = append(calls, done) })
	if err != nil || n != 150 {
		t.Fatalf("RequeueDead = %d, %v; want 150", n, err)
	}
	if len(calls) < 2 || calls[len(calls)-1] != 150 {
		t.Errorf("progress calls %v: want batches of at most 100 ending at 150", calls)
	}
	if s, _ := e.q.Stats(ctx); s.Length != 150 {
		t.Errorf("stream length %d after requeue, want 150", s.Length)
	}
	n, err = e.iq.PurgeDead(ctx, inspect.DeadFilter{Reason: "max_deliveries"}, nil)
	if err != nil || n != 30 {
		t.Fatalf("PurgeDead = %d, %v; want 30", n, err)
	}
	c := first(t, e.iq, inspect.StateCancelled)
	if n, err := e.iq.PurgeDead(ctx, inspect.DeadFilter{IDs: []string{c.EntryID}}, nil); err != nil || n != 1 {
		t.Errorf("PurgeDead(IDs) = %d, %v", n, err)
	}
	if n := count(inspect.DeadFilter{}); n != 0 {
		t.Errorf("%d dead letters left", n)
	}
}

func TestQueue_Throughput(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	now := time.Now().Unix() / 60
	if err := e.c.HSet(ctx, e.key("stats:"+itoa(now-1)), "processed", 7, "failed", 2).Err(); err != nil {
		t.Fatal(err)
	}
	ps, err := e.iq.Throughput(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 || ps[1].Processed != 7 || ps[1].Failed != 2 || ps[2].Processed != 0 || ps[1].At.Unix() != (now-1)*60 {
		t.Errorf("throughput %+v", ps)
	}
	if _, err := e.iq.Throughput(ctx, 121); err == nil {
		t.Error("121 minutes accepted")
	}
}

func TestQueue_Consumers(t *testing.T) {
	t.Parallel()
	f := setupStates(t)
	ctx := context.Background()
	cs, err := f.iq.Consumers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(cs, func(c inspect.Consumer) bool { return c.Name == "ghost" })
	if i < 0 || cs[i].Pending != 1 || cs[i].Kind != "consumer" {
		t.Fatalf("consumers %+v: want ghost with 1 pending", cs)
	}
	gone, err := f.iq.PruneConsumers(ctx, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(gone, "ghost") || len(gone) != len(cs)-1 {
		t.Errorf("pruned %v of %+v: want every consumer but ghost, which holds a job", gone, cs)
	}
}

func TestQueue_CountDeadBounded(t *testing.T) {
	t.Parallel()
	e := setup(t, &inspect.Options{ScanLimit: 40})
	for range 100 {
		e.addDead(t, "a", "permanent", "boom")
	}
	n, err := e.iq.CountDead(context.Background(), inspect.DeadFilter{})
	if err != nil || n != 40 {
		t.Errorf("CountDead = %d, %v; want 40 (ScanLimit)", n, err)
	}
	// Requeue and purge walk every letter, in batches.
	n, err = e.iq.PurgeDead(context.Background(), inspect.DeadFilter{}, nil)
	if err != nil || n != 100 {
		t.Errorf("PurgeDead = %d, %v; want 100", n, err)
	}
}

func TestQueue_WriteBehindAndLevels(t *testing.T) {
	t.Parallel()
	f := setupStates(t)
	ctx := context.Background()
	s, err := f.iq.WriteBehind(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Unpersisted != 4 || s.Dead != 2 || s.Retrying != 2 || s.OldestAge <= 0 || s.LastError == "" {
		t.Errorf("write-behind status %+v", s)
	}
	if lv, err := f.iq.Levels(ctx); err != nil || len(lv) != 0 {
		t.Errorf("levels of a stream queue: %v, %v", lv, err)
	}
}
