// Package pool is the job-running machinery of the engine: a bounded set of
// handler goroutines, a registry of the jobs a run owns, the keep-alive of
// their claims, slots for jobs that must run alone, the graceful drain,
// batching with a short linger, and the pacing of retries of failed Redis
// calls.
//
// What a job is, where it comes from and how it is settled stays with the
// caller; the pool only knows a job by its key (a stream entry ID, a lease)
// and a value of the caller's type.
package pool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a [Pool].
type Config struct {
	// Concurrency is the number of handler slots (> 0).
	Concurrency int
	// ShutdownTimeout bounds [Pool.Drain].
	ShutdownTimeout time.Duration
	// ShutdownCause cancels the contexts of the jobs still running when
	// ShutdownTimeout has passed.
	ShutdownCause error
	// LostCause cancels the context of a job whose claim was lost.
	LostCause error
	// JobTimeout bounds one run of a job (0: none): its context then reports
	// the deadline, is cancelled with TimeoutCause, and its Err is
	// context.DeadlineExceeded. The deadline is enforced by one sweeper per
	// pool rather than a timer per job, within max(JobTimeout/64, 10 ms)
	// (and at most 1 s).
	JobTimeout   time.Duration
	TimeoutCause error
}

// Job is a job a pool owns: running, waiting to run alone, or finished and
// waiting for its settlement to be written.
//
// A *Job is the context of its run: detached from the run's cancellation (so
// a job can drain after a shutdown began), cancelled with Config.LostCause
// when its claim was lost, Config.ShutdownCause after the drain deadline and
// Config.TimeoutCause after JobTimeout; [context.Cause] reports which. Being
// its own context saves a context and a timer per job, and its cancelable
// context is only made when something asks for it (Done, Value, a derived
// context, a cancellation): a handler that never looks at its context
// costs no context at all.
type Job[T any] struct {
	Key string
	Val T

	shared   *jobShared   // the pool's, the same for every job
	deadline atomic.Int64 // Unix ns, set when the job is launched if JobTimeout > 0, or by SetDeadline

	inner  atomic.Pointer[context.Context] // the cancelable context, once made
	cancel context.CancelCauseFunc
	cause  error      // the first cancellation's cause; set before inner is made too
	mu     sync.Mutex // guards making inner and cause
	done   atomic.Bool
	// settling is set once the handler returned (or will not run): a lost
	// claim is then no longer a reason to cancel it.
	settling atomic.Bool
}

// jobShared is what every job of a pool shares, kept once per pool rather
// than in every job.
type jobShared struct {
	base    context.Context // the pool's detached parent
	timeout error           // Config.TimeoutCause
}

// ctx returns the job's cancelable context, making it on first use (already
// cancelled if the job was).
func (j *Job[T]) ctx() context.Context {
	if c := j.inner.Load(); c != nil {
		return *c
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if c := j.inner.Load(); c != nil {
		return *c
	}
	c, cancel := context.WithCancelCause(j.shared.base)
	if j.done.Load() {
		cancel(j.cause)
	}
	j.cancel = cancel
	j.inner.Store(&c)
	return c
}

// cancelWith cancels the job's context with cause, if it is not cancelled
// yet. A nil cause releases it (as after the settlement).
func (j *Job[T]) cancelWith(cause error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.done.Load() {
		return
	}
	j.cause = cause
	if cause == nil {
		j.cause = context.Canceled
	}
	j.done.Store(true)
	if j.cancel != nil {
		j.cancel(cause)
	}
}

// Deadline reports when JobTimeout (or the job's own deadline, see
// [Pool.SetDeadline]) ends the job's run, if it has started and one is set.
func (j *Job[T]) Deadline() (time.Time, bool) {
	ns := j.deadline.Load()
	if ns == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// Done is closed when the job's context is cancelled.
func (j *Job[T]) Done() <-chan struct{} { return j.ctx().Done() }

// Err is nil until the job's context is cancelled, then
// context.DeadlineExceeded if JobTimeout ended it, else context.Canceled.
func (j *Job[T]) Err() error {
	if !j.done.Load() {
		return nil
	}
	if t := j.shared.timeout; t != nil && errors.Is(j.Cause(), t) {
		return context.DeadlineExceeded
	}
	return context.Canceled
}

// Cause returns why the job's context was cancelled (nil if it was not).
func (j *Job[T]) Cause() error {
	if !j.done.Load() {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.cause
}

// ValKey is the context key under which a job's context answers with a
// pointer to its Val (a *T), so that code handed the context can reach the
// job.
type ValKey struct{}

// Value returns the value of the run's context for key: &j.Val for
// [ValKey]. Until the job is cancelled or its context was made, the
// detached parent answers other keys, which also tells context.Cause that
// the job is not cancelled.
func (j *Job[T]) Value(key any) any {
	if _, ok := key.(ValKey); ok {
		return &j.Val
	}
	if c := j.inner.Load(); c != nil {
		return (*c).Value(key)
	}
	if j.done.Load() {
		return j.ctx().Value(key)
	}
	return j.shared.base.Value(key)
}

// task is one launched job for a handler goroutine.
type task[T any] struct {
	j      *Job[T]
	weight int64
}

// Pool runs jobs of one run on at most Concurrency goroutines at a time.
// Handler goroutines are kept between jobs (a new goroutine per job costs
// its creation and the growth of its stack every time); [Pool.Close] ends
// them.
type Pool[T any] struct {
	cfg    Config
	work   func(*Job[T]) (keep bool)
	slots  *slots
	wg     sync.WaitGroup // launched jobs
	shared jobShared

	tasks   chan task[T]
	closed  chan struct{}
	workers sync.WaitGroup // handler goroutines
	nwork   int            // handler goroutines started; guarded by mu
	sweep   sync.Once
	// tick is the shortest sweep interval a job's own deadline asked for
	// (ns; 0: none, see SetDeadline); retick wakes the sweeper to apply it.
	tick   atomic.Int64
	retick chan struct{}

	mu       sync.Mutex
	jobs     map[string]*Job[T]
	stopping bool
	// shrunk is closed (and replaced) when jobs are unregistered while
	// someone waits in WaitHeld.
	shrunk  chan struct{}
	waiters int
}

// New returns a pool that runs work for every launched job. If work
// returns false the job is unregistered when it returns (return true to keep
// it registered until its settlement is written, and unregister it then).
// Jobs' contexts derive from ctx without its cancellation. Such a parent has
// no Done channel, so job contexts do not register with a shared parent:
// [Pool.Drain] cancels them one by one.
func New[T any](ctx context.Context, cfg Config, work func(*Job[T]) (keep bool)) *Pool[T] {
	return &Pool[T]{
		cfg:    cfg,
		work:   work,
		slots:  newSlots(int64(cfg.Concurrency)),
		shared: jobShared{base: detach(ctx), timeout: cfg.TimeoutCause},
		tasks:  make(chan task[T]),
		closed: make(chan struct{}),
		retick: make(chan struct{}, 1),
		jobs:   make(map[string]*Job[T]),
	}
}

// detachedKey marks the pool's detached parent context (see detach).
type detachedKey struct{}

// detach returns ctx without its cancellation, as context.WithoutCancel
// does, wrapped in a value context. A look-up of a key on a
// context.WithoutCancel value itself allocates (its Value method passes
// the receiver on as an interface), and every job context without a
// cancelable context of its own asks its parent: span and metric look-ups
// by middleware cost an allocation each. Through a value context the
// look-up walks the chain without one; context.Cause still sees no
// cancellation above it.
func detach(ctx context.Context) context.Context {
	return context.WithValue(context.WithoutCancel(ctx), detachedKey{}, nil)
}

// NewJob returns a job of the pool, not registered yet (see RegisterAll).
func (p *Pool[T]) NewJob(key string, v T) *Job[T] {
	return &Job[T]{Key: key, Val: v, shared: &p.shared}
}

// RegisterAll registers jobs made by NewJob under one lock.
func (p *Pool[T]) RegisterAll(jobs []*Job[T]) {
	p.mu.Lock()
	for _, j := range jobs {
		p.jobs[j.Key] = j
	}
	stopping := p.stopping
	p.mu.Unlock()
	if stopping {
		for _, j := range jobs {
			j.cancelWith(p.cfg.ShutdownCause)
		}
	}
}

// Unregister forgets a job and releases its context.
func (p *Pool[T]) Unregister(j *Job[T]) {
	p.mu.Lock()
	if p.jobs[j.Key] == j {
		delete(p.jobs, j.Key)
	}
	p.wakeLocked()
	p.mu.Unlock()
	j.cancelWith(nil)
}

// UnregisterAll forgets jobs and releases their contexts, under one lock.
func (p *Pool[T]) UnregisterAll(jobs []*Job[T]) {
	p.mu.Lock()
	for _, j := range jobs {
		if p.jobs[j.Key] == j {
			delete(p.jobs, j.Key)
		}
	}
	p.wakeLocked()
	p.mu.Unlock()
	for _, j := range jobs {
		j.cancelWith(nil)
	}
}

// Settle marks a job whose handler has returned (or will not run).
func (p *Pool[T]) Settle(j *Job[T]) { j.settling.Store(true) }

// Owns reports whether the job with key is registered.
func (p *Pool[T]) Owns(key string) bool {
	p.mu.Lock()
	_, ok := p.jobs[key]
	p.mu.Unlock()
	return ok
}

// Len returns the number of registered jobs.
func (p *Pool[T]) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.jobs)
}

// Slots takes handler slots for one fetch: it waits for one, takes up to
// most that are free, and if the previous fetch came back full (a backlog is
// likely) and fewer than want are free, waits up to gather for want, so that
// a busy pool fetches in batches rather than one or two jobs at a time. It
// never takes more than can be started at once. It returns 0 and ctx's
// error if ctx ended first. The caller releases what it does not use. Only
// one goroutine takes slots (Slots, AcquireAll).
func (p *Pool[T]) Slots(ctx context.Context, most int64, full bool, want int64, gather time.Duration) (int64, error) {
	if err := p.slots.take(ctx, 1); err != nil {
		return 0, err
	}
	n := 1 + p.slots.takeFree(most-1)
	if full && n < want {
		if p.slots.takeWithin(ctx, want-n, gather) {
			n = want
		}
		n += p.slots.takeFree(most - n)
	}
	return n, nil
}

// Release returns n unused slots.
func (p *Pool[T]) Release(n int64) {
	if n > 0 {
		p.slots.give(n)
	}
}

// Launch runs the pool's work for j on a handler goroutine. The caller holds
// weight slots for it, which are released when work returns. JobTimeout
// counts from start, a clock reading of the caller (the jobs of one fetch
// share one). Idle handler goroutines are reused; at most 2×Concurrency are
// ever started (at most Concurrency run jobs at once, the others are
// between jobs).
func (p *Pool[T]) Launch(j *Job[T], weight int64, start time.Time) {
	p.wg.Add(1)
	if p.cfg.JobTimeout > 0 {
		j.deadline.Store(start.Add(p.cfg.JobTimeout).UnixNano())
	}
	t := task[T]{j: j, weight: weight}
	select {
	case p.tasks <- t: // an idle handler goroutine takes it
		return
	default:
	}
	p.mu.Lock()
	spawn := p.nwork < 2*p.cfg.Concurrency
	if spawn {
		p.nwork++
	}
	p.mu.Unlock()
	if !spawn {
		// Every goroutine is busy or about to be idle (at most Concurrency
		// run jobs; the others have just released their slot): wait for one.
		p.tasks <- t
		return
	}
	if p.cfg.JobTimeout > 0 {
		p.startSweeper()
	}
	p.workers.Add(1)
	go p.worker(t)
}

// startSweeper starts the sweeper once.
func (p *Pool[T]) startSweeper() { p.sweep.Do(func() { p.workers.Add(1); go p.sweeper() }) }

// SetDeadline sets when the run of the launched job j ends, in place of
// JobTimeout's deadline (a job's own timeout or deadline): its context
// reports it and is cancelled with TimeoutCause once it passed, within
// max(d/64, 10ms) and at most 1s, d being how long the run may take. Call
// it from the job's work before the handler runs.
func (p *Pool[T]) SetDeadline(j *Job[T], deadline time.Time, d time.Duration) {
	j.deadline.Store(deadline.UnixNano())
	tick := int64(sweepTick(d))
	for {
		cur := p.tick.Load()
		if cur != 0 && cur <= tick {
			break
		}
		if p.tick.CompareAndSwap(cur, tick) {
			select {
			case p.retick <- struct{}{}:
			default:
			}
			break
		}
	}
	p.startSweeper()
}

// sweepTick is the sweep interval for runs that may take d.
func sweepTick(d time.Duration) time.Duration {
	return min(max(d/64, 10*time.Millisecond), time.Second)
}

// sweepEvery returns the sweeper's interval: that of JobTimeout, or the
// shortest one a job's own deadline asked for.
func (p *Pool[T]) sweepEvery() time.Duration {
	every := time.Second
	if p.cfg.JobTimeout > 0 {
		every = sweepTick(p.cfg.JobTimeout)
	}
	if t := time.Duration(p.tick.Load()); t > 0 {
		every = min(every, t)
	}
	return every
}

// worker runs tasks until the pool is closed. It waits on the task channel
// alone (a plain receive costs less than a select, once per job); Close
// closes that channel.
func (p *Pool[T]) worker(t task[T]) {
	defer p.workers.Done()
	for ok := true; ok; t, ok = <-p.tasks {
		p.run(t)
	}
}

// run runs one task.
func (p *Pool[T]) run(t task[T]) {
	defer p.wg.Done()
	defer p.Release(t.weight)
	if !p.work(t.j) {
		p.Unregister(t.j)
	}
}

// sweeper cancels the jobs that ran past their deadline, until the pool is
// closed.
func (p *Pool[T]) sweeper() {
	defer p.workers.Done()
	every := p.sweepEvery()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.closed:
			return
		case <-p.retick:
			if e := p.sweepEvery(); e != every {
				every = e
				t.Reset(e)
			}
		case now := <-t.C:
			p.mu.Lock()
			for _, j := range p.jobs {
				if dl := j.deadline.Load(); dl != 0 && !j.settling.Load() && now.UnixNano() >= dl {
					j.cancelWith(p.cfg.TimeoutCause)
				}
			}
			p.mu.Unlock()
		}
	}
}

// Close ends the pool's goroutines once [Pool.Drain] has returned. Nothing
// may be launched after it.
func (p *Pool[T]) Close() {
	close(p.closed)
	close(p.tasks)
	p.workers.Wait()
}

// AcquireAll takes every handler slot, waiting until no job of the pool
// runs; nothing else starts until they are released (fetches come from the
// same goroutine, so they wait behind it: other work is slowed, not
// starved). It is for a job that must run alone: launch it with weight
// Concurrency. It returns ctx's error if ctx ended first.
func (p *Pool[T]) AcquireAll(ctx context.Context) error {
	return p.slots.take(ctx, int64(p.cfg.Concurrency))
}

// WaitHeld waits until at most n jobs are registered (for example: every
// job but those waiting to run alone has been settled), or ctx ends.
func (p *Pool[T]) WaitHeld(ctx context.Context, n int) error {
	for {
		p.mu.Lock()
		if len(p.jobs) <= n {
			p.mu.Unlock()
			return nil
		}
		if p.shrunk == nil {
			p.shrunk = make(chan struct{})
		}
		ch := p.shrunk
		p.waiters++
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		p.mu.Lock()
		p.waiters--
		p.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// wakeLocked wakes WaitHeld callers; p.mu is held.
func (p *Pool[T]) wakeLocked() {
	if p.waiters > 0 && p.shrunk != nil {
		close(p.shrunk)
		p.shrunk = nil
	}
}

// Each calls fn for every registered job, with the pool locked: fn must be
// quick and must not call back into the pool, except [Pool.Cancel].
func (p *Pool[T]) Each(fn func(*Job[T])) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, j := range p.jobs {
		fn(j)
	}
}

// Cancel cancels the context of a job whose handler has not returned yet
// with cause. It reports whether it did.
func (p *Pool[T]) Cancel(j *Job[T], cause error) bool {
	if j.settling.Load() || j.done.Load() {
		return false
	}
	j.cancelWith(cause)
	return true
}

// Lost reports whether the job's claim was lost (its context was cancelled
// with Config.LostCause).
func (p *Pool[T]) Lost(j *Job[T]) bool {
	return errors.Is(j.Cause(), p.cfg.LostCause)
}

// Drain waits for every launched goroutine to return. Once ShutdownTimeout
// has passed it cancels the running jobs with Config.ShutdownCause (and any
// registered later), calls onTimeout with their number, and goes on
// waiting: it never returns while a handler may still run.
func (p *Pool[T]) Drain(onTimeout func(running int)) {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	t := time.NewTimer(p.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	p.mu.Lock()
	p.stopping = true
	n := 0
	for _, j := range p.jobs {
		if !j.settling.Load() {
			n++
			j.cancelWith(p.cfg.ShutdownCause)
		}
	}
	p.mu.Unlock()
	onTimeout(n)
	<-done
}

// KeepAlive refreshes the claims of every registered job (running, waiting
// to run alone, or finished and waiting for its settlement to be written:
// its claim must not go stale before that), every interval, until ctx ends. touch refreshes the claims
// of keys and returns those it no longer holds; it gets a context bounded by
// timeout. A running job whose claim was lost is cancelled with
// Config.LostCause after onLost was called for it. onErr is called when
// touch fails (the next tick tries again).
func (p *Pool[T]) KeepAlive(ctx context.Context, interval, timeout time.Duration,
	touch func(ctx context.Context, keys []string) ([]string, error), onLost func(*Job[T]), onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var keys []string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		keys = keys[:0]
		p.mu.Lock()
		for k := range p.jobs {
			keys = append(keys, k)
		}
		p.mu.Unlock()
		if len(keys) == 0 {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, timeout)
		lost, err := touch(tctx, keys)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				onErr(err)
			}
			continue
		}
		for _, k := range lost {
			p.mu.Lock()
			j := p.jobs[k]
			// A job whose loss was reported already (its handler has not
			// returned yet) is not reported again.
			running := j != nil && !j.settling.Load() && !p.Lost(j)
			p.mu.Unlock()
			if running {
				onLost(j)
				j.cancelWith(p.cfg.LostCause)
			}
		}
	}
}
