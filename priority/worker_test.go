package priority_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/faultproxy"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
)

// TestWorker_TenThousandInPriorityOrder pushes 10,000 jobs with random
// priorities while no worker runs, then runs them with one worker of
// concurrency 1 and checks the whole order: higher priority first, push
// order among equal priorities.
func TestWorker_TenThousandInPriorityOrder(t *testing.T) {
	t.Parallel()
	const n = 10_000
	e := setupClient(t, redistest.NewIsolatedClient(t), nil) // a backlog of 10,000
	rng := rand.New(rand.NewPCG(rand.Uint64(), 7))
	jobs := make([]priority.Job, n)
	prios := make([]int, n)
	for i := range jobs {
		switch rng.IntN(50) {
		case 0:
			prios[i] = priority.MaxPriority
		case 1:
			prios[i] = priority.MinPriority
		default:
			prios[i] = rng.IntN(21) - 10 // many equal priorities: FIFO matters
		}
		jobs[i] = priority.Job{Priority: prios[i], Payload: []byte(strconv.Itoa(i))}
	}
	// Pushed in several calls, as producers would.
	for start := 0; start < n; start += 1500 {
		if _, err := e.pq.PushBatch(context.Background(), jobs[start:min(start+1500, n)]); err != nil {
			t.Fatal(err)
		}
	}
	if s := e.stats(t); s.Ready != n {
		t.Fatalf("%d jobs ready, want %d", s.Ready, n)
	}

	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	slices.SortStableFunc(want, func(a, b int) int { return prios[b] - prios[a] })

	got := drainOrder(t, e, n, priority.WorkerConfig{})
	bad := 0
	for i, g := range got {
		if g != strconv.Itoa(want[i]) {
			if bad++; bad <= 10 {
				gi, _ := strconv.Atoi(g)
				t.Errorf("position %d: job %s (priority %d), want job %d (priority %d)", i, g, prios[gi], want[i], prios[want[i]])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d jobs out of order", bad, n)
	}
	e.waitStats(t, priority.Stats{})
}

// TestWorker_Postpone: a job postponed more often than MaxDeliveries allows
// attempts is neither charged nor dead-lettered, and runs once it stops
// postponing.
func TestWorker_Postpone(t *testing.T) {
	t.Parallel()
	const postpones = 4
	e := setup(t, nil)
	e.push(t, 1)
	var n atomic.Int64
	last := make(chan *streamq.Message, 1)
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		if n.Add(1) <= postpones {
			return streamq.Postpone(time.Millisecond, errors.New("rate limited"))
		}
		last <- msg
		return nil
	})
	var postponed atomic.Int64
	w := e.newWorker(t, h, priority.WorkerConfig{MaxDeliveries: 2, OnEvent: func(_ context.Context, ev streamq.Event) {
		if ev.Kind == streamq.EventPostponed {
			postponed.Add(1)
		}
	}})
	stop := run(t, w)
	m := recv(t, last, "the job after its postpones")
	if m.Attempt != 1 || m.LastError != "" {
		t.Errorf("after %d postpones: attempt=%d last error=%q; want an uncharged job", postpones, m.Attempt, m.LastError)
	}
	e.waitStats(t, priority.Stats{})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := w.Stats(); s.Processed != 1 || s.Postponed != postpones || s.Failed != 0 || s.DeadLettered != 0 {
		t.Errorf("stats %+v, want 1 processed, %d postponed, nothing failed or dead-lettered", s, postpones)
	}
	if postponed.Load() != postpones {
		t.Errorf("%d EventPostponed, want %d", postponed.Load(), postpones)
	}
}

func TestWorker_Retry(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.push(t, 3)
	type try struct {
		attempt int
		lastErr string
	}
	tries := make(chan try, 10)
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		tries <- try{msg.Attempt, msg.LastError}
		if msg.Attempt < 3 {
			return errors.New("flaky " + strconv.Itoa(msg.Attempt))
		}
		return nil
	})
	var events sync.Map
	w := e.newWorker(t, h, priority.WorkerConfig{
		OnEvent: func(_ context.Context, ev streamq.Event) {
			if ev.Kind == streamq.EventRetried {
				n, _ := events.LoadOrStore(ev.ID, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
		},
	})
	stop := run(t, w)
	want := []try{{1, ""}, {2, "flaky 1"}, {3, "flaky 2"}}
	for i, wt := range want {
		if got := recv(t, tries, "attempt "+strconv.Itoa(i+1)); got != wt {
			t.Errorf("attempt %d: %+v, want %+v", i+1, got, wt)
		}
	}
	e.waitStats(t, priority.Stats{})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := w.Stats(); s.Processed != 1 || s.Failed != 2 || s.Retried != 2 || s.DeadLettered != 0 {
		t.Errorf("stats %+v, want 1 processed, 2 failed, 2 retried", s)
	}
	count := 0
	events.Range(func(_, v any) bool { count += int(v.(*atomic.Int64).Load()); return true })
	if count != 2 {
		t.Errorf("%d EventRetried, want 2", count)
	}
}

func TestWorker_RetryKeepsPriority(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.push(t, 1, 9, 5) // payloads 0, 1, 2
	order := make(chan string, 10)
	failed := false
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		order <- string(msg.Payload)
		if string(msg.Payload) == "1" && !failed {
			failed = true // concurrency 1: no race
			return streamq.RetryAfter(0, errors.New("once"))
		}
		return nil
	})
	run(t, e.newWorker(t, h, priority.WorkerConfig{Concurrency: 1}))
	var got []string
	for range 4 {
		got = append(got, recv(t, order, "a run"))
	}
	// The retry is due at once and goes back ahead of the lower priorities.
	if s := strings.Join(got, " "); s != "1 1 2 0" {
		t.Errorf("runs %q, want %q", s, "1 1 2 0")
	}
}

func TestWorker_DeadLetter_MaxDeliveries(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ids := e.push(t, 4)
	var runs atomic.Int64
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		runs.Add(1)
		return errors.New("always fails")
	})
	dead := make(chan streamq.Event, 1)
	w := e.newWorker(t, h, priority.WorkerConfig{
		MaxDeliveries: 3,
		OnEvent: func(_ context.Context, ev streamq.Event) {
			if ev.Kind == streamq.EventDeadLettered {
				dead <- ev
			}
		},
	})
	stop := run(t, w)
	ev := recv(t, dead, "the dead letter")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if ev.ID != ids[0] || ev.Reason != streamq.ReasonMaxDeliveries || ev.Queue != e.q.Name() {
		t.Errorf("event %+v, want job %s dead-lettered for max deliveries", ev, ids[0])
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("%d runs, want 3 (MaxDeliveries)", n)
	}
	dls := deadLetters(t, e.q)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters in the queue's dead-letter stream, want 1", len(dls))
	}
	dl := dls[0]
	if dl.OriginalID != ids[0] || dl.Reason != streamq.ReasonMaxDeliveries || dl.Attempts != 3 ||
		dl.Error != "always fails" || string(dl.Payload) != "0" || dl.Headers[priority.HeaderPriority] != "4" {
		t.Errorf("dead letter %+v, want job %s, 3 attempts, the error, payload and priority header", dl, ids[0])
	}
	if s := e.stats(t); s != (priority.Stats{}) {
		t.Errorf("priority set %+v after the dead letter, want empty", s)
	}
	if s := w.Stats(); s.DeadLettered != 1 || s.Failed != 3 || s.Retried != 2 {
		t.Errorf("stats %+v, want 1 dead-lettered, 3 failed, 2 retried", s)
	}
}

// TestWorker_DeadLetter_RequeueAndForward dead-letters a job permanently,
// requeues it with the queue's DeadLetters (into the stream), and checks that
// a consumer running Forward brings it back into the priority set at its
// priority, where it runs again.
func TestWorker_DeadLetter_RequeueAndForward(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.push(t, 8)
	var fail atomic.Bool
	fail.Store(true)
	ran := make(chan *streamq.Message, 4)
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		ran <- msg
		if fail.Load() {
			return streamq.Permanent(errors.New("bad input"))
		}
		return nil
	})
	w := e.newWorker(t, h, priority.WorkerConfig{})
	run(t, w)
	recv(t, ran, "the first run")
	redistest.WaitFor(t, waitTimeout, "the job dead-lettered", func() bool { return w.Stats().DeadLettered == 1 })
	dls := deadLetters(t, e.q)
	if len(dls) != 1 || dls[0].Reason != streamq.ReasonPermanent || dls[0].Attempts != 1 || !strings.Contains(dls[0].Error, "bad input") {
		t.Fatalf("dead letters %+v, want one with reason permanent after 1 attempt", dls)
	}

	fail.Store(false)
	runConsumer(t, e.q, priority.Forward(e.pq), &streamq.ConsumerConfig{Block: 50 * time.Millisecond})
	if _, err := e.q.DeadLetters().Requeue(context.Background(), dls[0].ID); err != nil {
		t.Fatal(err)
	}
	msg := recv(t, ran, "the requeued job")
	if p, _ := priority.Of(msg); p != 8 || string(msg.Payload) != "0" || msg.Attempt != 1 {
		t.Errorf("requeued job: priority %d payload %q attempt %d, want priority 8, payload 0, attempt 1", p, msg.Payload, msg.Attempt)
	}
}

func TestWorker_Panic(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.push(t, 0)
	last := make(chan string, 2)
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		if msg.Attempt == 1 {
			panic("boom")
		}
		last <- msg.LastError
		return nil
	})
	w := e.newWorker(t, h, priority.WorkerConfig{})
	run(t, w)
	if got := recv(t, last, "the retry after the panic"); got != "panic: boom" {
		t.Errorf("last error %q, want %q", got, "panic: boom")
	}
	redistest.WaitFor(t, waitTimeout, "the job processed", func() bool { return w.Stats().Processed == 1 })
	if s := w.Stats(); s.Failed != 1 || s.Retried != 1 {
		t.Errorf("stats %+v, want the panic counted as 1 failure and retried", s)
	}
}

func TestWorker_PanicError(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.push(t, 0)
	got := make(chan error, 1)
	w := e.newWorker(t, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { panic(errors.New("nil map")) }),
		priority.WorkerConfig{
			MaxDeliveries: 1,
			OnEvent: func(_ context.Context, ev streamq.Event) {
				if ev.Kind == streamq.EventDeadLettered {
					got <- ev.Err
				}
			},
		})
	run(t, w)
	err := recv(t, got, "the dead letter")
	pe, ok := errors.AsType[*streamq.PanicError](err)
	if !ok || len(pe.Stack) == 0 || pe.Error() != "panic: nil map" {
		t.Errorf("error %v, want a *streamq.PanicError with a stack", err)
	}
}

func TestWorker_JobTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.push(t, 0)
	causes := make(chan error, 2)
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		if msg.Attempt > 1 {
			return nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	w := e.newWorker(t, h, priority.WorkerConfig{JobTimeout: 20 * time.Millisecond})
	run(t, w)
	if got := recv(t, causes, "the job's context to end"); !errors.Is(got, streamq.ErrJobTimeout) {
		t.Errorf("cause %v, want ErrJobTimeout", got)
	}
	redistest.WaitFor(t, waitTimeout, "the retried job processed", func() bool { return w.Stats().Processed == 1 })
	if s := w.Stats(); s.Failed != 1 || s.Retried != 1 {
		t.Errorf("stats %+v, want the timeout counted as a failure and retried", s)
	}
}

func TestWorker_Middleware(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.push(t, 0)
	var mu sync.Mutex
	var trace []string
	mw := func(name string) streamq.Middleware {
		return func(next streamq.Handler) streamq.Handler {
			return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
				mu.Lock()
				trace = append(trace, name)
				mu.Unlock()
				return next.Handle(ctx, msg)
			})
		}
	}
	done := make(chan struct{})
	h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		mu.Lock()
		trace = append(trace, "handler")
		mu.Unlock()
		close(done)
		return nil
	})
	run(t, e.newWorker(t, h, priority.WorkerConfig{Middleware: []streamq.Middleware{mw("outer"), mw("inner")}}))
	recv(t, done, "the handler")
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(trace, " "); got != "outer inner handler" {
		t.Errorf("trace %q, want %q", got, "outer inner handler")
	}
}

// TestWorker_Shutdown_HandsBackUncharged cancels Run while a handler runs
// past ShutdownTimeout: the handler's context ends with ErrShutdown, Run
// returns after the handler returned, and the job is back in the ready set
// without an attempt charged.
func TestWorker_Shutdown_HandsBackUncharged(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ids := e.push(t, 2)
	started := make(chan struct{})
	var returned atomic.Bool
	causes := make(chan error, 1)
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		returned.Store(true)
		return context.Cause(ctx)
	})
	w := e.newWorker(t, h, priority.WorkerConfig{ShutdownTimeout: 20 * time.Millisecond})
	stop := run(t, w)
	recv(t, started, "the handler to start")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !returned.Load() {
		t.Error("Run returned before the handler did")
	}
	if got := <-causes; !errors.Is(got, streamq.ErrShutdown) {
		t.Errorf("cause %v, want ErrShutdown", got)
	}
	if s := e.stats(t); s != (priority.Stats{Ready: 1}) {
		t.Errorf("priority set %+v after shutdown, want the job ready again", s)
	}
	if s := w.Stats(); s.Retried != 1 || s.Failed != 1 {
		t.Errorf("stats %+v, want the job handed back once", s)
	}
	ch := make(chan *streamq.Message, 1)
	run(t, e.newWorker(t, recorder(ch), priority.WorkerConfig{}))
	msg := recv(t, ch, "the job to run again")
	if msg.ID != ids[0] || msg.Attempt != 1 {
		t.Errorf("rerun: ID %s attempt %d, want ID %s on attempt 1 (the shutdown is not charged)", msg.ID, msg.Attempt, ids[0])
	}
}

// TestWorker_Shutdown_Drains cancels Run while handlers run: they finish
// within ShutdownTimeout with their contexts intact, and their jobs are
// finished before Run returns.
func TestWorker_Shutdown_Drains(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.push(t, 1, 1, 1)
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	var errs atomic.Int64
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		started <- struct{}{}
		<-release
		if ctx.Err() != nil {
			errs.Add(1)
		}
		return nil
	})
	w := e.newWorker(t, h, priority.WorkerConfig{Concurrency: 3, ShutdownTimeout: time.Minute})
	stop := run(t, w)
	for range 3 {
		recv(t, started, "3 handlers to start")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// Run must wait for the handlers, and their contexts must stay alive.
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) while handlers were running", err)
	default:
	}
	close(release)
	if err := recv(t, stopped, "Run to return"); err != nil {
		t.Fatal(err)
	}
	if n := errs.Load(); n != 0 {
		t.Errorf("%d handlers saw their context cancelled during the drain", n)
	}
	if s := e.stats(t); s != (priority.Stats{}) {
		t.Errorf("priority set %+v after the drain, want every job finished", s)
	}
	if s := w.Stats(); s.Processed != 3 {
		t.Errorf("stats %+v, want 3 processed", s)
	}
}

// cmdHook observes a client's commands: XREADs on the notify stream, and pop
// and reap scripts (told apart by their keys).
type cmdHook struct {
	ready, leases, delayed string
	xreads                 atomic.Int64
	pops, reaps            atomic.Int64
	waiting                chan struct{} // one per XREAD, dropped when full
}

func (h *cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		switch {
		case cmd.Name() == "xread":
			h.xreads.Add(1)
			select {
			case h.waiting <- struct{}{}:
			default:
			}
		case len(args) > 4 && (cmd.Name() == "evalsha" || cmd.Name() == "eval"):
			if args[3] == h.ready && args[4] == h.leases {
				h.pops.Add(1)
			} else if args[3] == h.leases && args[4] == h.delayed {
				h.reaps.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}

func (h *cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestWorker_WakeUpWithoutPolling starts a worker on an empty queue with a
// one-minute Block, checks that it waits in one XREAD without popping again
// while its reaper runs (time passes), and that a job pushed then starts at
// once: without the wake-up it would wait for the Block to end. Then a
// cancelled Run returns at once too.
func TestWorker_WakeUpWithoutPolling(t *testing.T) {
	t.Parallel()
	hook := &cmdHook{waiting: make(chan struct{}, 16)}
	rdb := redistest.NewClient(t)
	rdb.AddHook(hook)
	e := setupClient(t, rdb, nil)
	hook.ready, hook.leases, hook.delayed = core.Of(e.q).Keys.Priority().Ready, core.Of(e.q).Keys.Priority().Leases, core.Of(e.q).Keys.Priority().Delayed

	ch := make(chan *streamq.Message, 1)
	// ControlInterval a minute too: a wait ends at the pause check's
	// interval (1 s by default), which the 20 reaps below outlast on a
	// loaded machine, and the worker then reads again (a second XREAD).
	w := e.newWorker(t, recorder(ch), priority.WorkerConfig{Block: time.Minute, ControlInterval: time.Minute, ReapInterval: 10 * time.Millisecond})
	stop := run(t, w)
	recv(t, hook.waiting, "the worker to wait for work")
	popsBefore := hook.pops.Load()
	// Let the reaper run 20 times (about 200 ms) as a clock: no pop and no
	// second XREAD may happen meanwhile.
	reaps := hook.reaps.Load()
	redistest.WaitFor(t, waitTimeout, "the reaper to run 20 times", func() bool { return hook.reaps.Load() >= reaps+20 })
	if p, x := hook.pops.Load(), hook.xreads.Load(); p != popsBefore || x != 1 {
		t.Errorf("while idle: %d pops after the first %d, %d XREADs; want no pop and one XREAD (no polling)", p-popsBefore, popsBefore, x)
	}

	// Block is a minute: only the wake-up can start the job within 20 s.
	pushed := time.Now()
	e.push(t, 1)
	select {
	case <-ch:
		t.Logf("job started %s after the push", time.Since(pushed).Round(time.Microsecond))
	case <-time.After(20 * time.Second):
		t.Fatal("a job pushed while the worker waited did not start within 20s: the wake-up was missed")
	}

	// The worker waits again; a cancelled Run must not wait out the Block.
	recv(t, hook.waiting, "the worker to wait again")
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of cancel while waiting for work with a one-minute Block")
	}
}

// TestWorker_WakeUpManyPushes pushes jobs one at a time from another
// goroutine while workers wait, and checks that every one runs: no wake-up is
// ever missed between an empty pop and the wait.
func TestWorker_WakeUpManyPushes(t *testing.T) {
	t.Parallel()
	const n = 300
	e := setup(t, nil)
	ch := make(chan *streamq.Message, n)
	for range 3 {
		run(t, e.newWorker(t, recorder(ch), priority.WorkerConfig{Block: time.Minute, Concurrency: 2}))
	}
	go func() {
		for i := range n {
			if _, err := e.pq.Push(context.Background(), priority.Job{Priority: i % 3, Payload: []byte(strconv.Itoa(i))}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	seen := make(map[string]bool, n)
	for range n {
		seen[string(recv(t, ch, "every pushed job to run (Block is a minute, so only wake-ups start them)").Payload)] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct jobs ran, want %d", len(seen), n)
	}
}

func TestWorker_Concurrency(t *testing.T) {
	t.Parallel()
	const conc, n = 4, 40
	e := setup(t, nil)
	prios := make([]int, n)
	e.push(t, prios...)
	var running, peak atomic.Int64
	gate := make(chan struct{})
	started := make(chan struct{}, n)
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		c := running.Add(1)
		for {
			p := peak.Load()
			if c <= p || peak.CompareAndSwap(p, c) {
				break
			}
		}
		started <- struct{}{}
		<-gate
		running.Add(-1)
		return nil
	})
	w := e.newWorker(t, h, priority.WorkerConfig{Concurrency: conc})
	run(t, w)
	for range conc {
		recv(t, started, "the first handlers")
	}
	// All slots are busy: nothing more may be leased.
	if s := e.stats(t); s.Leased != conc || s.Ready != n-conc {
		t.Errorf("with every slot busy: %+v, want %d leased and the rest ready (never more leased than free slots)", s, conc)
	}
	close(gate)
	redistest.WaitFor(t, waitTimeout, "every job processed", func() bool { return w.Stats().Processed == n })
	if p := peak.Load(); p != conc {
		t.Errorf("peak of %d handlers at once, want %d", p, conc)
	}
}

// TestWorker_KeepAliveExtendsLease runs a job for several lease periods and
// checks that its lease is extended, so it is neither returned to the ready
// set nor cancelled.
//
// The lease is 1.5 s (a keep-alive every 375 ms): with 300 ms, a pause of
// the test process longer than 225 ms (the race detector, a loaded CI
// machine) let the lease expire and the worker's own reaper take the job
// back, and the lease was never extended twice over (a CI failure).
func TestWorker_KeepAliveExtendsLease(t *testing.T) {
	t.Parallel()
	const lease = 1500 * time.Millisecond
	e := setup(t, nil)
	e.push(t, 0)
	started := make(chan struct{})
	release := make(chan struct{})
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		close(started)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	w := e.newWorker(t, h, priority.WorkerConfig{Lease: lease, ReapInterval: 5 * time.Millisecond})
	run(t, w)
	recv(t, started, "the job to start")
	ctx := context.Background()
	first, err := e.rdb.ZRangeWithScores(ctx, core.Of(e.q).Keys.Priority().Leases, 0, -1).Result()
	if err != nil || len(first) != 1 {
		t.Fatalf("leases %v, %v; want one", first, err)
	}
	// Wait until the lease was extended past two lease periods beyond its
	// first deadline: the job has then run for more than two leases.
	redistest.WaitFor(t, waitTimeout, "the lease to be extended two periods over", func() bool {
		sc, err := e.rdb.ZScore(ctx, core.Of(e.q).Keys.Priority().Leases, first[0].Member.(string)).Result()
		return err == nil && sc > first[0].Score+float64(2*lease.Milliseconds())
	})
	close(release)
	redistest.WaitFor(t, waitTimeout, "the job processed", func() bool { return w.Stats().Processed == 1 })
	if s := w.Stats(); s.Reclaimed != 0 || s.ClaimsLost != 0 || s.Failed != 0 {
		t.Errorf("stats %+v, want the long job neither expired nor cancelled", s)
	}
	e.waitStats(t, priority.Stats{})
}

// TestWorker_ClaimLost removes a running job's lease, as the reaper of
// another worker does once a lease has expired: the worker's keep-alive
// notices and cancels the handler with ErrClaimLost.
func TestWorker_ClaimLost(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ids := e.push(t, 0)
	started := make(chan struct{})
	causes := make(chan error, 1)
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	lost := make(chan string, 1)
	w := e.newWorker(t, h, priority.WorkerConfig{
		Lease: 40 * time.Millisecond,
		OnEvent: func(_ context.Context, ev streamq.Event) {
			if ev.Kind == streamq.EventClaimLost {
				lost <- ev.ID
			}
		},
	})
	run(t, w)
	recv(t, started, "the job to start")
	if err := e.rdb.Del(context.Background(), core.Of(e.q).Keys.Priority().Leases).Err(); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, causes, "the handler to be cancelled"); !errors.Is(got, streamq.ErrClaimLost) {
		t.Errorf("cause %v, want ErrClaimLost", got)
	}
	if id := recv(t, lost, "EventClaimLost"); id != ids[0] {
		t.Errorf("EventClaimLost for %s, want %s", id, ids[0])
	}
	if s := w.Stats(); s.ClaimsLost != 1 {
		t.Errorf("stats %+v, want 1 claim lost", s)
	}
}

func TestWorker_Run_Twice(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ch := make(chan *streamq.Message, 1)
	w := e.newWorker(t, recorder(ch), priority.WorkerConfig{})
	stop := run(t, w)
	e.push(t, 0)
	recv(t, ch, "a job, so Run runs")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(cancelled); !errors.Is(err, streamq.ErrRunning) {
		t.Errorf("second Run: %v, want ErrRunning", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestNewWorker_Validation(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	h := recorder(make(chan *streamq.Message))
	full := []priority.Band{{Min: 10, Max: priority.MaxPriority, Weight: 6}, {Min: 1, Max: 9, Weight: 3}, {Min: priority.MinPriority, Max: 0, Weight: 1}}
	tests := []struct {
		name string
		cfg  priority.WorkerConfig
		want string // in the error
	}{
		{"negative concurrency", priority.WorkerConfig{Concurrency: -1}, "Concurrency: -1 is negative"},
		{"negative lease", priority.WorkerConfig{Lease: -time.Second}, "Lease: -1s is negative"},
		{"short lease", priority.WorkerConfig{Lease: time.Millisecond}, "use at least 20ms"},
		{"short block", priority.WorkerConfig{Block: time.Microsecond}, "block forever"},
		{"negative block", priority.WorkerConfig{Block: -1}, "Block: -1ns is negative"},
		{"negative job timeout", priority.WorkerConfig{JobTimeout: -2}, "or -1 to disable"},
		{"negative shutdown", priority.WorkerConfig{ShutdownTimeout: -time.Second}, "ShutdownTimeout"},
		{"negative reap interval", priority.WorkerConfig{ReapInterval: -5}, "ReapInterval"},
		{"control interval below 100ms", priority.WorkerConfig{ControlInterval: 10 * time.Millisecond}, "ControlInterval"},
		{"negative max result bytes", priority.WorkerConfig{MaxResultBytes: -3}, "MaxResultBytes"},
		{"negative max deliveries", priority.WorkerConfig{MaxDeliveries: -1}, "MaxDeliveries"},
		{"nil middleware", priority.WorkerConfig{Middleware: []streamq.Middleware{nil}}, "Middleware[0]: is nil"},
		{"name with bar", priority.WorkerConfig{Name: "a|b"}, "other than '{', '}' and '|'"},
		{"name with space", priority.WorkerConfig{Name: "a b"}, "without spaces"},
		{"band gap", priority.WorkerConfig{Bands: []priority.Band{full[0], full[2]}}, "no band holds priorities 1 to 9"},
		{"band overlap", priority.WorkerConfig{Bands: []priority.Band{full[0], {Min: 1, Max: 10, Weight: 3}, full[2]}}, "overlaps"},
		{"band below", priority.WorkerConfig{Bands: []priority.Band{full[0], full[1]}}, "Min: priority.MinPriority"},
		{"band above", priority.WorkerConfig{Bands: []priority.Band{full[1], full[2]}}, "Max: priority.MaxPriority"},
		{"band weight", priority.WorkerConfig{Bands: []priority.Band{{Min: priority.MinPriority, Max: priority.MaxPriority}}}, "use a weight from 1 to 1000"},
		{"band reversed", priority.WorkerConfig{Bands: []priority.Band{{Min: 5, Max: 1, Weight: 1}}}, "swap them"},
		{"band range", priority.WorkerConfig{Bands: []priority.Band{{Min: priority.MinPriority - 1, Max: 1, Weight: 1}}}, "out of range"},
		{"too many bands", priority.WorkerConfig{Bands: make([]priority.Band, priority.MaxBands+1)}, "at most 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := priority.NewWorker(e.pq, h, &tt.cfg)
			var ce *streamq.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want a *streamq.ConfigError mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := priority.NewWorker(nil, h, nil); err == nil {
		t.Error("nil queue accepted")
	}
	if _, err := priority.NewWorker(e.pq, nil, nil); err == nil {
		t.Error("nil handler accepted")
	}
	cfg := &priority.WorkerConfig{Bands: full, JobTimeout: -1, ReapInterval: -1}
	if _, err := priority.NewWorker(e.pq, h, cfg); err != nil {
		t.Errorf("valid config: %v", err)
	}
	if cfg.Name != "" || cfg.Concurrency != 0 || cfg.Lease != 0 {
		t.Errorf("NewWorker changed the caller's config: %+v", cfg)
	}
}

// TestWorker_LostPopReplyRunsOnce: the reply of a pop is lost after Redis
// leased the jobs (the proxy cuts the connection once the script ran), and
// go-redis sends the pop again with the same token prefix. The script
// returns the jobs the first call leased instead of leasing others, so each
// job runs once, as attempt 1, none stays leased until its lease expires
// (Lease defaults to 30 s), and no job runs twice.
func TestWorker_LostPopReplyRunsOnce(t *testing.T) {
	t.Parallel()
	const bound = 10 * time.Second // far less than the default Lease
	ctx := context.Background()
	direct := redistest.NewClient(t)
	proxy, viaProxy := redistest.NewProxiedClient(t)
	e := setupClient(t, viaProxy, nil)

	// Six jobs wait; the worker pops two at a time, and the reply of its
	// first pop is lost. The script is loaded first, so that the dropped
	// EVALSHA is the one that runs it (not a NOSCRIPT error).
	e.push(t, 0, 0, 0, 0, 0, 0)
	pop := rdb.Scripts()["priority_pop"]
	if err := pop.Load(ctx, direct).Err(); err != nil {
		t.Fatal(err)
	}
	dropped := proxy.DropReply(faultproxy.Command("EVALSHA", pop.Hash()))

	var mu sync.Mutex
	attempts := map[string][]int{} // payload -> attempt of each run
	h := streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		mu.Lock()
		attempts[string(msg.Payload)] = append(attempts[string(msg.Payload)], msg.Attempt)
		mu.Unlock()
		return nil
	})
	w := e.newWorker(t, h, priority.WorkerConfig{Concurrency: 2}) // Lease: the default
	begin := time.Now()
	stop := run(t, w)
	recv(t, dropped, "the reply of a pop to be dropped")
	redistest.WaitFor(t, bound, "every job handled and nothing leased", func() bool {
		s, err := e.pq.Stats(ctx)
		return err == nil && s == (priority.Stats{}) && w.Stats().Processed >= 6
	})
	took := time.Since(begin)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	for i := range 6 {
		if got := attempts[strconv.Itoa(i)]; !slices.Equal(got, []int{1}) {
			t.Errorf("job %d ran as attempts %v, want once as attempt 1", i, got)
		}
	}
	if len(attempts) != 6 {
		t.Errorf("ran %d distinct jobs, want 6: %v", len(attempts), attempts)
	}
	if s := w.Stats(); s.Processed != 6 || s.Reclaimed != 0 || s.DeadLettered != 0 {
		t.Errorf("worker stats %+v: want 6 processed, no lease expired, nothing dead-lettered", s)
	}
	if dls := deadLetters(t, e.q); len(dls) != 0 {
		t.Errorf("%d dead letters, want none", len(dls))
	}
	if proxy.Dropped() != 1 {
		t.Errorf("%d replies dropped, want 1", proxy.Dropped())
	}
	t.Logf("the jobs of the lost pop and the others were handled within %s (Lease %s)", took.Round(time.Millisecond), priority.DefaultLease)
}
