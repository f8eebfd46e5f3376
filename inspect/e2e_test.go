package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/testsignal"
)

const control = 100 * time.Millisecond // the consumers' ControlInterval in these tests

func waitState(t *testing.T, q *inspect.Queue, id string, want inspect.State) *inspect.Job {
	t.Helper()
	var j *inspect.Job
	redistest.WaitFor(t, 10*time.Second, fmt.Sprintf("job %s to be %s", id, want), func() bool {
		var err error
		j, err = q.Job(context.Background(), id)
		return err == nil && j.State == want
	})
	return j
}

// A running job is cancelled: its handler sees ErrCancelled as the cause,
// the job becomes a cancelled dead letter (found by its stable ID, with
// its progress), which can then be deleted.
func TestQueue_CancelEndToEnd(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	cause := make(chan error, 1)
	h := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		if err := streamq.SetProgress(ctx, 50, "half way"); err != nil {
			return err
		}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	c, err := streamq.NewConsumer(e.q, h, &streamq.ConsumerConfig{Block: 10 * time.Millisecond, ControlInterval: control})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "consumer", 10*time.Second, c.Run)
	id := e.enqueue(t, "long")
	j := waitState(t, e.iq, id, inspect.StateRunning)
	redistest.WaitFor(t, 10*time.Second, "progress", func() bool {
		j, err = e.iq.Job(ctx, id)
		return err == nil && j.Progress != nil
	})
	if j.Progress.Percent != 50 || j.Progress.Message != "half way" || j.Owner == "" {
		t.Errorf("running job %+v, progress %+v", j, j.Progress)
	}
	if err := e.iq.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, streamq.ErrCancelled) {
			t.Errorf("handler's cause %v, want ErrCancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled")
	}
	j = waitState(t, e.iq, id, inspect.StateCancelled)
	if j.ID != id || j.Reason != "cancelled" || j.Progress == nil {
		t.Errorf("cancelled job %+v", j)
	}
	var se *inspect.StateError
	if err := e.iq.Cancel(ctx, id); !errors.As(err, &se) || se.State != inspect.StateCancelled {
		t.Errorf("Cancel(cancelled) = %v", err)
	}
	if err := e.iq.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.iq.Job(ctx, id); !errors.Is(err, inspect.ErrJobNotFound) {
		// The progress key outlives the job for its retention; a job that
		// is gone must not be reported from it alone.
		t.Errorf("Job after Delete: %v, want ErrJobNotFound", err)
	}
}

// A job is followed by its stable ID through retries, the dead-letter
// stream and a requeue, with its error history; a finished job shows its
// result.
func TestQueue_JobByStableID(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	h := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		if string(m.Payload) == "ok" {
			return streamq.SetResult(ctx, []byte("42"))
		}
		return fmt.Errorf("attempt %d failed", m.Attempt)
	})
	c, err := streamq.NewConsumer(e.q, h, &streamq.ConsumerConfig{
		Block: 10 * time.Millisecond, MaxDeliveries: 3, ControlInterval: control,
		Backoff: func(int) time.Duration { return time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "consumer", 10*time.Second, c.Run)
	ok := e.enqueue(t, "ok")
	bad := e.enqueue(t, "bad")
	j := waitState(t, e.iq, ok, inspect.StateDone)
	if string(j.Result) != "42" {
		t.Errorf("done job %+v: result %q, want 42", j, j.Result)
	}
	j = waitState(t, e.iq, bad, inspect.StateDead)
	if j.ID != bad || j.Attempt != 3 || len(j.Errors) != 3 || j.Errors[2].Error != "attempt 3 failed" || j.Errors[0].Attempt != 1 {
		t.Errorf("dead job %+v", j)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	n, err := e.iq.RequeueDead(ctx, inspect.DeadFilter{IDs: []string{bad}}, nil)
	if err != nil || n != 1 {
		t.Fatalf("RequeueDead(%s) = %d, %v", bad, n, err)
	}
	j = waitState(t, e.iq, bad, inspect.StateWaiting)
	if j.ID != bad || j.EntryID == bad || len(j.Errors) != 3 {
		t.Errorf("requeued job %+v: want stable ID %s, a new entry, the error history", j, bad)
	}
}

// Pausing a queue while a backlog drains: no job is taken once the pause
// has settled (the running ones finish), and Resume drains the rest.
func TestQueue_PauseWhileDraining(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	const n = 300
	for i := range n {
		e.enqueue(t, fmt.Sprint("job-", i))
	}
	var done atomic.Int64
	h := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		time.Sleep(2 * time.Millisecond) // a job that takes a while
		done.Add(1)
		return nil
	})
	c, err := streamq.NewConsumer(e.q, h, &streamq.ConsumerConfig{Concurrency: 2, Block: 10 * time.Millisecond, ControlInterval: control})
	if err != nil {
		t.Fatal(err)
	}
	sig := &testsignal.Signals{Paused: testsignal.New[struct{}]()}
	redistest.Background(t, "consumer", 10*time.Second, sig.Run(c.Run))
	redistest.WaitFor(t, 10*time.Second, "the drain to start", func() bool { return done.Load() >= 10 })
	if err := e.iq.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	// The consumer reports the pause as soon as it sees it, but a fetch
	// may still be on its way: the pause has settled once the fetch loop
	// stopped and the jobs it fetched before have finished.
	sig.Paused.Wait(t, 10*time.Second, "the consumer's fetch loop to stop for the pause")
	if !c.Health().Paused {
		t.Error("the fetch loop stopped for the pause, but Health does not report it")
	}
	// Jobs a read returned after the pause do not start: they stay pending
	// (the overview counts them as running) until the resume.
	redistest.WaitFor(t, 10*time.Second, "running jobs to finish", func() bool { return c.Health().Jobs == 0 })
	settled := done.Load()
	// Watch for three control intervals: nothing may be taken.
	deadline := time.Now().Add(3 * control)
	for time.Now().Before(deadline) {
		o, err := e.iq.Overview(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c.Health().Jobs != 0 || done.Load() != settled || !o.Paused {
			t.Fatalf("paused queue: %d held, %d done (%d when the pause settled)", c.Health().Jobs, done.Load(), settled)
		}
		time.Sleep(10 * time.Millisecond) // observation interval, not synchronisation
	}
	if settled >= n {
		t.Fatalf("the backlog drained before the pause (%d jobs)", settled)
	}
	t.Logf("paused after %d of %d jobs", settled, n)
	if err := e.iq.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 20*time.Second, "the backlog to drain after Resume", func() bool { return done.Load() == n })
}

// A delayed job is found by the ID Enqueue returned after it was moved into
// the stream and after it ran.
func TestQueue_DelayedJobKeepsItsID(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	id := e.enqueue(t, "soon", streamq.ProcessIn(50*time.Millisecond))
	if j, err := e.iq.Job(ctx, id); err != nil || j.State != inspect.StateDelayed || j.ID != id {
		t.Fatalf("Job(%s) = %+v, %v", id, j, err)
	}
	release := make(chan struct{})
	h := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		if m.ID != id {
			t.Errorf("Message.ID %q, want %q", m.ID, id)
		}
		<-release
		return streamq.SetResult(ctx, []byte("sent"))
	})
	c, err := streamq.NewConsumer(e.q, h, &streamq.ConsumerConfig{Block: 10 * time.Millisecond, ControlInterval: control})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "consumer", 10*time.Second, c.Run)
	j := waitState(t, e.iq, id, inspect.StateRunning)
	if j.EntryID == id || j.ID != id {
		t.Errorf("running copy %+v", j)
	}
	close(release)
	j = waitState(t, e.iq, id, inspect.StateDone)
	if string(j.Result) != "sent" {
		t.Errorf("done job %+v", j)
	}
}

// Cancel races the end of jobs: each job ends either done (with its
// result) or cancelled (a dead letter, not retried), runs once, and a
// Cancel that came too late says the job is done.
func TestQueue_CancelRacesFinish(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.enqueue(t, fmt.Sprint(i))
	}
	r := &runs{n: map[string]int{}}
	h := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		r.add(m.ID)
		i, _ := strconv.Atoi(string(m.Payload))
		select {
		case <-time.After(time.Duration(i%8) * 30 * time.Millisecond): // 0 to 210 ms
			return streamq.SetResult(ctx, []byte("ok"))
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	c, err := streamq.NewConsumer(e.q, h, &streamq.ConsumerConfig{Concurrency: 8, Block: 10 * time.Millisecond, ControlInterval: control})
	if err != nil {
		t.Fatal(err)
	}
	cons := redistest.Background(t, "consumer", 10*time.Second, c.Run)
	requested := map[string]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for len(requested) < n && time.Now().Before(deadline) {
		for _, id := range ids {
			if requested[id] {
				continue
			}
			err := e.iq.Cancel(ctx, id)
			var se *inspect.StateError
			switch {
			case err == nil:
				requested[id] = true
			case errors.As(err, &se) && se.State == inspect.StateWaiting:
			case errors.As(err, &se) && se.State == inspect.StateDone:
				requested[id] = true // finished first
			default:
				t.Fatalf("Cancel(%s): %v", id, err)
			}
		}
		time.Sleep(2 * time.Millisecond) // the pace of this polling loop
	}
	redistest.WaitFor(t, 20*time.Second, "every job to end", func() bool {
		o, err := e.iq.Overview(ctx)
		return err == nil && o.Waiting == 0 && o.Running == 0 && o.Delayed == 0 && o.Retrying == 0
	})
	if err := cons.Stop(); err != nil {
		t.Fatal(err)
	}
	var done, cancelled int
	for _, id := range ids {
		j, err := e.iq.Job(ctx, id)
		if err != nil {
			t.Fatalf("Job(%s): %v", id, err)
		}
		switch {
		case j.State == inspect.StateDone && string(j.Result) == "ok":
			done++
		case j.State == inspect.StateCancelled && j.Result == nil:
			cancelled++
		default:
			t.Errorf("job %s ended %s with result %q", id, j.State, j.Result)
		}
		if got := r.get(id); got != 1 {
			t.Errorf("job %s ran %d times", id, got)
		}
	}
	o, _ := e.iq.Overview(ctx)
	if int(o.Cancelled) != cancelled || o.Dead != 0 {
		t.Errorf("%d cancelled dead letters, %d other dead letters; want %d and 0", o.Cancelled, o.Dead, cancelled)
	}
	t.Logf("%d done, %d cancelled", done, cancelled)
}
