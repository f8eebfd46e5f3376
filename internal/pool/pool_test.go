package pool

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Register records one job the run owns, as RegisterAll does for a fetch's
// jobs.
func (p *Pool[T]) Register(key string, v T) *Job[T] {
	j := p.NewJob(key, v)
	p.RegisterAll([]*Job[T]{j})
	return j
}

var (
	errShutdown = errors.New("shutdown")
	errLost     = errors.New("lost")
	errTimeout  = errors.New("timeout")
)

// wait bounds every wait in these tests.
const wait = 10 * time.Second

// noWork is the work of pools whose jobs must not run.
func noWork(t *testing.T) func(*Job[int]) bool {
	return func(*Job[int]) bool { t.Error("a job ran"); return false }
}

func newPool(t *testing.T, conc int, work func(*Job[int]) bool) *Pool[int] {
	t.Helper()
	p := New(context.Background(), Config{
		Concurrency: conc, ShutdownTimeout: wait, ShutdownCause: errShutdown, LostCause: errLost,
	}, work)
	t.Cleanup(p.Close)
	return p
}

// recv waits for a value on ch or fails the test.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func TestPool_Slots(t *testing.T) {
	t.Parallel()
	p := newPool(t, 8, noWork(t))
	ctx := context.Background()
	n, err := p.Slots(ctx, 8, false, 0, 0)
	if err != nil || n != 8 {
		t.Fatalf("Slots on an idle pool = %d, %v; want all 8", n, err)
	}
	p.Release(5)
	if n, _ := p.Slots(ctx, 8, false, 0, 0); n != 5 {
		t.Errorf("Slots with 5 free = %d, want 5", n)
	}
	p.Release(8)
	if n, _ := p.Slots(ctx, 3, false, 0, 0); n != 3 {
		t.Errorf("Slots capped by most = %d, want 3", n)
	}
	p.Release(3)

	// After a full fetch with one slot free, Slots waits for want.
	held, _ := p.Slots(ctx, 7, false, 0, 0)
	go func() {
		time.Sleep(time.Millisecond) // let Slots start waiting; not a synchronisation
		p.Release(3)
	}()
	if n, _ := p.Slots(ctx, 8, true, 4, wait); n != 4 {
		t.Errorf("Slots gathering for 4 = %d, want 4", n)
	}
	p.Release(held - 3 + 4)

	// A cancelled context ends the wait for the first slot.
	all, _ := p.Slots(ctx, 8, false, 0, 0)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if n, err := p.Slots(cctx, 8, false, 0, 0); err == nil || n != 0 {
		t.Errorf("Slots with a cancelled context = %d, %v; want 0 and an error", n, err)
	}
	p.Release(all)
}

func TestPool_LaunchUnregisters(t *testing.T) {
	t.Parallel()
	done := make(chan string, 2)
	p := newPool(t, 2, func(j *Job[int]) bool { done <- j.Key; return j.Val == 1 })
	n, _ := p.Slots(context.Background(), 2, false, 0, 0)
	keep := p.Register("keep", 1)
	drop := p.Register("drop", 2)
	p.Launch(keep, 1, time.Now())
	p.Launch(drop, 1, time.Now())
	recv(t, done, "a job")
	recv(t, done, "a job")
	p.Drain(func(int) { t.Error("drain timed out") })
	if !p.Owns("keep") || p.Owns("drop") || p.Len() != 1 {
		t.Errorf("owns keep=%v drop=%v len=%d; want only the kept job", p.Owns("keep"), p.Owns("drop"), p.Len())
	}
	if n2, _ := p.Slots(context.Background(), 2, false, 0, 0); n2 != n {
		t.Errorf("%d slots free after both jobs, want %d", n2, n)
	}
	p.Unregister(keep)
	if keep.Err() == nil {
		t.Error("Unregister did not release the job's context")
	}
}

// TestPool_AcquireAll checks that taking every slot waits for the running
// jobs, that nothing else starts while the job launched with them runs, and
// that a fetch queued behind it goes first afterwards (FIFO).
func TestPool_AcquireAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var running atomic.Int64
	var maxWithAlone atomic.Int64
	release := make(chan struct{})
	started := make(chan string, 10)
	work := func(j *Job[int]) bool {
		n := running.Add(1)
		defer running.Add(-1)
		if j.Val == 1 { // alone
			maxWithAlone.Store(max(maxWithAlone.Load(), n))
		}
		started <- j.Key
		<-release
		return false
	}
	p := newPool(t, 4, work)
	// Two normal jobs run.
	n, _ := p.Slots(ctx, 2, false, 0, 0)
	p.Launch(p.Register("a", 0), 1, time.Now())
	p.Launch(p.Register("b", 0), 1, time.Now())
	recv(t, started, "job a or b")
	recv(t, started, "job a or b")
	if n != 2 {
		t.Fatalf("took %d slots, want 2", n)
	}

	// The fetch loop, the one taker of slots, takes all of them for the
	// alone job: it waits for the normal jobs to end.
	alone := p.Register("alone", 1)
	acquired := make(chan error, 1)
	go func() { acquired <- p.AcquireAll(ctx) }()
	release <- struct{}{}
	if !p.Lost(alone) && len(acquired) != 0 {
		t.Fatal("AcquireAll returned while a job ran")
	}
	release <- struct{}{}
	if err := recv(t, acquired, "AcquireAll"); err != nil {
		t.Fatal(err)
	}
	p.Launch(alone, 4, time.Now())
	if got := recv(t, started, "the alone job"); got != "alone" {
		t.Fatalf("%q started, want the alone job", got)
	}
	// Its next fetch waits until the alone job ended.
	fetched := make(chan int64, 1)
	go func() {
		n, _ := p.Slots(ctx, 1, false, 0, 0)
		fetched <- n
	}()
	select {
	case <-fetched:
		t.Error("a fetch got a slot while the alone job ran")
	case <-time.After(20 * time.Millisecond):
	}
	release <- struct{}{}
	p.Release(recv(t, fetched, "the fetch after the alone job"))
	p.Drain(func(int) { t.Error("drain timed out") })
	if m := maxWithAlone.Load(); m != 1 {
		t.Errorf("%d jobs ran while the alone job ran, want only it", m)
	}
}

// TestPool_WaitHeld checks that WaitHeld returns once jobs were
// unregistered down to n, and when its context ends.
func TestPool_WaitHeld(t *testing.T) {
	t.Parallel()
	p := newPool(t, 2, noWork(t))
	a, b := p.Register("a", 0), p.Register("b", 0)
	if err := p.WaitHeld(context.Background(), 2); err != nil {
		t.Fatalf("WaitHeld(2) with 2 held: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- p.WaitHeld(context.Background(), 0) }()
	p.Unregister(a)
	select {
	case err := <-done:
		t.Fatalf("WaitHeld(0) returned %v with one job held", err)
	case <-time.After(20 * time.Millisecond):
	}
	p.UnregisterAll([]*Job[int]{b})
	if err := recv(t, done, "WaitHeld(0)"); err != nil {
		t.Fatal(err)
	}
	p.Register("c", 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.WaitHeld(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitHeld with a cancelled context = %v", err)
	}
	lost := p.Register("lost", 0)
	lost.cancelWith(errLost) // as KeepAlive does when the claim is gone
	if !p.Lost(lost) || p.Lost(p.Register("kept", 0)) {
		t.Error("Lost does not report the lost claim")
	}
}

func TestPool_DrainCancelsAfterTimeout(t *testing.T) {
	t.Parallel()
	causes := make(chan error, 2)
	p := New(context.Background(), Config{Concurrency: 2, ShutdownTimeout: 20 * time.Millisecond, ShutdownCause: errShutdown, LostCause: errLost},
		func(j *Job[int]) bool {
			<-j.Done()
			causes <- context.Cause(j)
			return false
		})
	t.Cleanup(p.Close)
	n, _ := p.Slots(context.Background(), 2, false, 0, 0)
	for _, k := range []string{"a", "b"} {
		p.Launch(p.Register(k, 0), 1, time.Now())
	}
	timedOut := -1
	p.Drain(func(running int) { timedOut = running })
	if timedOut != 2 {
		t.Errorf("onTimeout got %d running jobs, want 2", timedOut)
	}
	for range n {
		if c := recv(t, causes, "a cancelled job"); !errors.Is(c, errShutdown) {
			t.Errorf("job cancelled with %v, want the shutdown cause", c)
		}
	}
	late := p.Register("late", 0)
	if !errors.Is(context.Cause(late), errShutdown) {
		t.Errorf("a job registered after the drain deadline has cause %v, want the shutdown cause", context.Cause(late))
	}
	p.Unregister(late)
}

func TestPool_KeepAlive(t *testing.T) {
	t.Parallel()
	p := newPool(t, 4, noWork(t))
	running := p.Register("running", 0)
	settled := p.Register("settled", 0)
	p.Settle(settled)
	touched := make(chan []string, 1)
	lostJobs := make(chan string, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var once sync.Once
	var ticks atomic.Int64
	go func() {
		defer close(done)
		p.KeepAlive(ctx, time.Millisecond, wait,
			func(_ context.Context, keys []string) ([]string, error) {
				ticks.Add(1)
				once.Do(func() {
					slices.Sort(keys)
					touched <- slices.Clone(keys)
				})
				return []string{"running", "settled"}, nil
			},
			func(j *Job[int]) { lostJobs <- j.Key },
			func(err error) { t.Errorf("touch error: %v", err) })
	}()
	if keys := recv(t, touched, "a touch"); !slices.Equal(keys, []string{"running", "settled"}) {
		t.Errorf("touched %v, want every registered job", keys)
	}
	if k := recv(t, lostJobs, "the lost running job"); k != "running" {
		t.Errorf("onLost(%q), want the running job", k)
	}
	<-running.Done()
	if !errors.Is(context.Cause(running), errLost) {
		t.Errorf("running job cancelled with %v, want the lost cause", context.Cause(running))
	}
	// Its handler has not returned yet: later touches that report the same
	// claim lost must not report it again.
	after := ticks.Load()
	deadline := time.Now().Add(wait)
	for ticks.Load() < after+5 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if ticks.Load() < after+5 {
		t.Fatalf("only %d touches after the loss within %s", ticks.Load()-after, wait)
	}
	cancel()
	<-done
	if settled.Err() != nil {
		t.Error("a settled job was cancelled for a lost claim")
	}
	select {
	case k := <-lostJobs:
		t.Errorf("onLost(%q) called again after the first loss was reported", k)
	default:
	}
	p.Unregister(running)
	p.Unregister(settled)
}

func TestBatcher(t *testing.T) {
	t.Parallel()
	in := NewBatcher[int](100, 10)
	for i := range 25 {
		in.Add(i)
	}
	in.Close()
	var batches [][]int
	in.Run(10, time.Hour, func(b []int) { batches = append(batches, slices.Clone(b)) })
	var all []int
	for _, b := range batches {
		if len(b) > 10 {
			t.Errorf("batch of %d, want at most 10", len(b))
		}
		all = append(all, b...)
	}
	if len(batches) != 3 || len(all) != 25 || !slices.IsSorted(all) {
		t.Errorf("batches %v; want 25 items in order in 3 batches", batches)
	}

	// A lone item is flushed after the linger, without waiting for want.
	in2 := NewBatcher[int](10, 5)
	flushed, stop := runBatcher(t, in2, time.Millisecond)
	in2.Add(7)
	if b := recv(t, flushed, "a lingering batch"); !slices.Equal(b, []int{7}) {
		t.Errorf("flushed %v, want [7]", b)
	}
	stop()
}

// TestBatcher_WantEndsLinger checks that a batch that reaches want items,
// counting the one it started with, is flushed at once, not after the
// linger.
func TestBatcher_WantEndsLinger(t *testing.T) {
	t.Parallel()
	b := NewBatcher[int](10, 3)
	flushed, stop := runBatcher(t, b, time.Hour)
	var got []int
	b.Add(0)
	// Let the flusher take the first item, so that two more complete its
	// batch: the queue alone never holds want items.
	deadline := time.Now().Add(wait)
	for len(b.in) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the flusher never took the first item")
		}
		runtime.Gosched()
	}
	b.Add(1)
	b.Add(2)
	for len(got) < 3 {
		got = append(got, recv(t, flushed, "a batch of want items")...)
	}
	if !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("flushed %v, want [0 1 2]", got)
	}
	stop()
}

// runBatcher runs b with linger until the returned stop, sending each
// batch it flushes on the returned channel.
func runBatcher(t *testing.T, b *Batcher[int], linger time.Duration) (<-chan []int, func()) {
	t.Helper()
	flushed := make(chan []int, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Run(10, linger, func(batch []int) { flushed <- slices.Clone(batch) })
	}()
	return flushed, func() { b.Close(); <-done }
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	var b Backoff
	for i := range 20 {
		ceil := b.Peek()
		d := b.Next()
		if d < ceil/2 || d > ceil || ceil > 5*time.Second {
			t.Fatalf("delay %d: %s, ceiling %s; want between half the ceiling and the ceiling (at most 5s)", i, d, ceil)
		}
	}
	b.Reset()
	if b.Peek() != 50*time.Millisecond {
		t.Errorf("after Reset the ceiling is %s, want 50ms", b.Peek())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.Wait(ctx) {
		t.Error("Wait with a cancelled context reported true")
	}
}

// TestJob_Timeout checks the job's context when JobTimeout ends its run: the
// deadline is reported, Err is DeadlineExceeded, the cause is the timeout
// cause, and contexts derived from it are cancelled too.
func TestJob_Timeout(t *testing.T) {
	t.Parallel()
	const timeout = 30 * time.Millisecond
	type seen struct {
		deadline   time.Time
		ok         bool
		err, cause error
		childCause error
	}
	got := make(chan seen, 1)
	p := New(context.Background(), Config{
		Concurrency: 1, ShutdownTimeout: wait, ShutdownCause: errShutdown, LostCause: errLost,
		JobTimeout: timeout, TimeoutCause: errTimeout,
	}, func(j *Job[int]) bool {
		var s seen
		s.deadline, s.ok = j.Deadline()
		child, cancel := context.WithCancel(j)
		defer cancel()
		select {
		case <-child.Done():
		case <-time.After(wait):
		}
		s.err, s.cause, s.childCause = j.Err(), context.Cause(j), context.Cause(child)
		got <- s
		return false
	})
	t.Cleanup(p.Close)
	j := p.Register("slow", 0)
	if _, ok := j.Deadline(); ok {
		t.Error("a job that has not started reports a deadline")
	}
	n, _ := p.Slots(context.Background(), 1, false, 0, 0)
	start := time.Now()
	p.Launch(j, n, time.Now())
	s := recv(t, got, "the timed-out job")
	p.Drain(func(int) { t.Error("drain timed out") })
	if !s.ok || s.deadline.Before(start.Add(timeout)) || s.deadline.After(time.Now()) {
		t.Errorf("deadline %v (ok %v), want about %s after the start", s.deadline, s.ok, timeout)
	}
	if !errors.Is(s.err, context.DeadlineExceeded) || !errors.Is(s.cause, errTimeout) || !errors.Is(s.childCause, errTimeout) {
		t.Errorf("err %v, cause %v, child's cause %v; want DeadlineExceeded and the timeout cause", s.err, s.cause, s.childCause)
	}
}

// TestPool_ReusesGoroutines runs many jobs one after another and checks that
// they share a bounded number of handler goroutines.
func TestPool_ReusesGoroutines(t *testing.T) {
	t.Parallel()
	done := make(chan struct{}, 1)
	p := newPool(t, 4, func(*Job[int]) bool { done <- struct{}{}; return false })
	for i := range 200 {
		n, err := p.Slots(context.Background(), 1, false, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		p.Launch(p.Register(strconv.Itoa(i), i), n, time.Now())
		recv(t, done, "a job")
	}
	p.Drain(func(int) { t.Error("drain timed out") })
	p.mu.Lock()
	started := p.nwork
	p.mu.Unlock()
	if started > 8 {
		t.Errorf("%d handler goroutines started for 200 jobs run one at a time, want at most 2×Concurrency = 8", started)
	}
}

// TestJob_LazyContext checks the job's context before and after its
// cancelable context exists: not cancelled, Cause nil; cancelled before
// anyone asked, then Done is closed and Cause reports the cause; a handler
// waiting on Done before the cancel sees it; values of the parent pass
// through.
func TestJob_LazyContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	p := New(context.WithValue(context.Background(), key{}, "v"), Config{Concurrency: 1, LostCause: errLost}, noWork(t))
	t.Cleanup(p.Close)

	quiet := p.Register("quiet", 0)
	if quiet.Err() != nil || context.Cause(quiet) != nil || quiet.Value(key{}) != "v" {
		t.Errorf("fresh job: err %v cause %v value %v", quiet.Err(), context.Cause(quiet), quiet.Value(key{}))
	}
	if quiet.inner.Load() != nil {
		t.Error("the cancelable context was made before anyone needed it")
	}
	quiet.cancelWith(errLost)
	if !errors.Is(quiet.Err(), context.Canceled) || !errors.Is(context.Cause(quiet), errLost) || quiet.Value(key{}) != "v" {
		t.Errorf("cancelled before use: err %v cause %v value %v", quiet.Err(), context.Cause(quiet), quiet.Value(key{}))
	}
	select {
	case <-quiet.Done():
	default:
		t.Error("Done of a job cancelled before use is not closed")
	}

	waiter := p.Register("waiter", 0)
	child, cancel := context.WithCancel(waiter) // asks for Done
	defer cancel()
	done := make(chan error, 1)
	go func() { <-child.Done(); done <- context.Cause(child) }()
	waiter.cancelWith(errShutdown)
	if err := recv(t, done, "the derived context's cancel"); !errors.Is(err, errShutdown) {
		t.Errorf("derived context's cause %v, want the shutdown cause", err)
	}
	waiter.cancelWith(errLost) // the first cause stays
	if !errors.Is(context.Cause(waiter), errShutdown) {
		t.Errorf("cause after a second cancel: %v, want the first", context.Cause(waiter))
	}
}

// TestJob_DetachedParent checks the job context's parent: the run's
// cancellation does not reach it (context.Cause sees none), and a look-up
// of a key nobody set, which middleware makes for every job (spans,
// metrics), allocates nothing. Not parallel: testing.AllocsPerRun
// refuses to run beside parallel tests.
func TestJob_DetachedParent(t *testing.T) {
	type key struct{}
	type missing struct{}
	runCtx, cancelRun := context.WithCancelCause(context.WithValue(context.Background(), key{}, "v"))
	p := New(runCtx, Config{Concurrency: 1, LostCause: errLost}, noWork(t))
	t.Cleanup(p.Close)
	j := p.Register("job", 0)
	cancelRun(errShutdown)

	if j.Err() != nil || context.Cause(j) != nil {
		t.Errorf("job under a cancelled run: err %v cause %v, want none", j.Err(), context.Cause(j))
	}
	if got := j.Value(key{}); got != "v" {
		t.Errorf("value of the run's context: %v, want v", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = j.Value(missing{}) }); n != 0 {
		t.Errorf("a look-up of a missing key allocates %v times, want 0", n)
	}
	child, cancel := context.WithCancel(j)
	defer cancel()
	if child.Err() != nil || context.Cause(child) != nil {
		t.Errorf("derived context under a cancelled run: err %v cause %v, want none", child.Err(), context.Cause(child))
	}
}
