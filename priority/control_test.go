package priority_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/testsignal"
	"github.com/streamq/streamq/priority"
)

const ctlInterval = 100 * time.Millisecond

// TestWorker_CancelAndProgress cancels a running priority job: its handler,
// which recorded progress, sees ErrCancelled within about a second; the job
// is dead-lettered as cancelled, not retried; the registry, trail, counters
// and the worker's heartbeat are written.
func TestWorker_CancelAndProgress(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	k := core.Of(e.q).Keys
	t.Cleanup(func() { e.rdb.HDel(context.Background(), rdb.Registry(streamq.DefaultKeyPrefix), e.q.Name()) })
	id, err := e.pq.Push(ctx, priority.Job{Priority: 3, Payload: []byte("long")})
	if err != nil {
		t.Fatal(err)
	}
	if kind, _ := e.rdb.HGet(ctx, rdb.Registry(streamq.DefaultKeyPrefix), e.q.Name()).Result(); kind != rdb.KindStream && kind != rdb.KindPriority {
		t.Fatalf("registry kind %q after a push", kind)
	}
	var calls atomic.Int64
	started := make(chan string, 1)
	causes := make(chan error, 1)
	w := e.newWorker(t, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		calls.Add(1)
		if err := streamq.SetProgress(ctx, 10, "started"); err != nil {
			t.Errorf("SetProgress: %v", err)
		}
		started <- m.ID
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(10 * time.Second):
			causes <- nil
			return nil
		}
	}), priority.WorkerConfig{ControlInterval: ctlInterval})
	run(t, w)
	if got := recv(t, started, "the job to start"); got != id {
		t.Fatalf("JobID %q, want %q", got, id)
	}
	if kind, _ := e.rdb.HGet(ctx, rdb.Registry(streamq.DefaultKeyPrefix), e.q.Name()).Result(); kind != rdb.KindPriority {
		t.Fatalf("registry kind %q after the worker started, want priority", kind)
	}
	asked := time.Now()
	if err := e.rdb.HSet(ctx, k.Cancel, id, asked.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	cause := recv(t, causes, "the handler's context to be cancelled")
	if !errors.Is(cause, streamq.ErrCancelled) {
		t.Fatalf("cause %v, want ErrCancelled", cause)
	}
	if d := time.Since(asked); d > time.Second {
		t.Fatalf("cancelled after %s, want within about a second", d)
	}
	var dls []streamq.DeadLetter
	redistest.WaitFor(t, waitTimeout, "the dead letter", func() bool {
		dls = deadLetters(t, e.q)
		return len(dls) == 1
	})
	if dls[0].Reason != streamq.ReasonCancelled || dls[0].Attempts != 1 {
		t.Fatalf("dead letter %+v, want reason cancelled after 1 attempt", dls[0])
	}
	if at, _ := e.rdb.HGet(ctx, k.Trail, id).Result(); at != rdb.TrailDead+dls[0].ID {
		t.Fatalf("trail %q, want x:%s", at, dls[0].ID)
	}
	if n, _ := e.rdb.HLen(ctx, k.Cancel).Result(); n != 0 {
		t.Fatalf("%d cancel requests left", n)
	}
	if b, _ := e.rdb.Get(ctx, k.Progress(id)).Result(); b == "" {
		t.Fatal("no progress recorded")
	}
	if _, err := e.rdb.ZScore(ctx, k.Workers, w.Name()).Result(); err != nil {
		t.Fatalf("worker heartbeat: %v", err)
	}
	h, _ := e.rdb.HGetAll(ctx, k.Stats(rdb.Minute(asked))).Result()
	h2, _ := e.rdb.HGetAll(ctx, k.Stats(rdb.Minute(time.Now()))).Result()
	if h["failed"] != "1" && h2["failed"] != "1" {
		t.Fatalf("failed counters %v %v, want 1", h, h2)
	}
	e.waitStats(t, priority.Stats{})
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", calls.Load())
	}
}

// TestWorker_Pause: a worker started while its queue is paused, with jobs
// ready, starts none of them (its first pop is refused, before its control
// loop read the flag), and takes them after the resume.
func TestWorker_Pause(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	k := core.Of(e.q).Keys
	var ran atomic.Int64
	w := e.newWorker(t, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		ran.Add(1)
		return nil
	}), priority.WorkerConfig{ControlInterval: ctlInterval, Block: 50 * time.Millisecond})
	if err := e.rdb.Set(ctx, k.Paused, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 20
	prios := make([]int, n)
	e.push(t, prios...)
	sig := &testsignal.Signals{Paused: testsignal.New[struct{}]()}
	redistest.Background(t, "Worker.Run", waitTimeout, sig.Run(w.Run))
	sig.Paused.Wait(t, waitTimeout, "the worker's fetch loop to stop for the pause")
	if !w.Health().Paused {
		t.Error("the fetch loop stopped for the pause, but Health does not report it")
	}
	time.Sleep(5 * ctlInterval) // asserting that nothing happens takes a window
	if got := ran.Load(); got != 0 {
		t.Fatalf("%d jobs ran while paused", got)
	}
	if err := e.rdb.Del(ctx, k.Paused).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, waitTimeout, "the jobs to run after the resume", func() bool { return ran.Load() == n })
	if w.Health().Paused {
		t.Fatal("still paused after the resume")
	}
	redistest.WaitFor(t, waitTimeout, "the processed counter", func() bool {
		var sum int64
		for m := rdb.Minute(time.Now().Add(-time.Minute)); m <= rdb.Minute(time.Now()); m++ {
			v, _ := e.rdb.HGet(ctx, k.Stats(m), "processed").Result()
			p, _ := strconv.ParseInt(v, 10, 64)
			sum += p
		}
		return sum == n
	})
}
