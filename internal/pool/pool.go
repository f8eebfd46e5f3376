// Package pool is the job-running machinery shared by the stream consumer
// (package streamq) and the priority worker (package priority): a bounded
// set of handler goroutines, a registry of the jobs a run owns, the
// keep-alive of their claims, jobs that must run alone, the graceful drain,
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
	"time"

	"golang.org/x/sync/semaphore"
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
}

// Job is a job a pool owns: running, waiting to run alone, or finished and
// waiting for its settlement to be written.
type Job[T any] struct {
	Key string
	Val T
	// Ctx is the job's context: detached from the run's cancellation (so a
	// job can drain after a shutdown began), cancelled with Config.LostCause
	// when its claim was lost or Config.ShutdownCause after the drain
	// deadline.
	Ctx    context.Context
	cancel context.CancelCauseFunc
	// settling is set (under Pool.mu) once the handler returned (or will not
	// run): a lost claim is then no longer a reason to cancel it, and its
	// claim need not be refreshed.
	settling bool
}

// Pool runs jobs of one run on at most Concurrency goroutines.
type Pool[T any] struct {
	cfg  Config
	sem  *semaphore.Weighted
	wg   sync.WaitGroup
	base context.Context

	mu       sync.Mutex
	jobs     map[string]*Job[T]
	stopping bool
}

// New returns a pool whose jobs' contexts derive from ctx without its
// cancellation. Such a parent has no Done channel, so job contexts do not
// register with a shared parent: [Pool.Drain] cancels them one by one.
func New[T any](ctx context.Context, cfg Config) *Pool[T] {
	return &Pool[T]{
		cfg:  cfg,
		sem:  semaphore.NewWeighted(int64(cfg.Concurrency)),
		base: context.WithoutCancel(ctx),
		jobs: make(map[string]*Job[T]),
	}
}

// Register records a job the run owns, so that [Pool.KeepAlive] refreshes
// its claim and [Pool.Owns] reports it.
func (p *Pool[T]) Register(key string, v T) *Job[T] {
	ctx, cancel := context.WithCancelCause(p.base)
	j := &Job[T]{Key: key, Val: v, Ctx: ctx, cancel: cancel}
	p.mu.Lock()
	p.jobs[key] = j
	if p.stopping {
		cancel(p.cfg.ShutdownCause)
	}
	p.mu.Unlock()
	return j
}

// Unregister forgets a job and releases its context.
func (p *Pool[T]) Unregister(j *Job[T]) {
	p.mu.Lock()
	if p.jobs[j.Key] == j {
		delete(p.jobs, j.Key)
	}
	p.mu.Unlock()
	j.cancel(nil)
}

// Settle marks a job whose handler has returned (or will not run).
func (p *Pool[T]) Settle(j *Job[T]) {
	p.mu.Lock()
	j.settling = true
	p.mu.Unlock()
}

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
// error if ctx ended first. The caller releases what it does not use.
func (p *Pool[T]) Slots(ctx context.Context, most int64, full bool, want int64, gather time.Duration) (int64, error) {
	if err := p.sem.Acquire(ctx, 1); err != nil {
		return 0, err
	}
	n := int64(1)
	for n < most && p.sem.TryAcquire(1) {
		n++
	}
	if full && n < want {
		wctx, cancel := context.WithTimeout(ctx, gather)
		if p.sem.Acquire(wctx, want-n) == nil {
			n = want
		}
		cancel()
		for n < most && p.sem.TryAcquire(1) {
			n++
		}
	}
	return n, nil
}

// Release returns n unused slots.
func (p *Pool[T]) Release(n int64) {
	if n > 0 {
		p.sem.Release(n)
	}
}

// Launch runs work(j) in a new goroutine. The caller holds weight slots for
// it, which are released when work returns; if work returns false the job
// is unregistered then too (return true to keep it registered until its
// settlement is written, and unregister it then).
func (p *Pool[T]) Launch(j *Job[T], weight int64, work func(*Job[T]) (keep bool)) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.sem.Release(weight)
		if !work(j) {
			p.Unregister(j)
		}
	}()
}

// RunAlone launches each job only once no other job of the pool runs, and
// lets nothing else start while it runs: it takes every slot (the semaphore
// is FIFO, so fetches queue behind it and other work is slowed, not
// starved). It is for a job whose earlier runs died with their worker: a
// neighbour may have crashed it, so its last attempt must not have one. The
// jobs must be registered (their claims stay fresh while they wait). A job
// whose claim was lost meanwhile is dropped. If ctx ends first, the jobs not
// started go to handBack (which must unregister them) and RunAlone reports
// false.
func (p *Pool[T]) RunAlone(ctx context.Context, jobs []*Job[T], work func(*Job[T]) bool, handBack func(*Job[T])) bool {
	all := int64(p.cfg.Concurrency)
	for i, j := range jobs {
		if err := p.sem.Acquire(ctx, all); err != nil {
			for _, j := range jobs[i:] {
				handBack(j)
			}
			return false
		}
		if errors.Is(context.Cause(j.Ctx), p.cfg.LostCause) {
			p.sem.Release(all)
			p.Unregister(j)
			continue
		}
		p.Launch(j, all, work)
	}
	return true
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
		if !j.settling {
			n++
			j.cancel(p.cfg.ShutdownCause)
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
			running := j != nil && !j.settling
			p.mu.Unlock()
			if running {
				onLost(j)
				j.cancel(p.cfg.LostCause)
			}
		}
	}
}
