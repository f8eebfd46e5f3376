package streamq

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/engine"
)

// MaxQueueWeight is the largest [WorkerQueue.Weight].
const MaxQueueWeight = 1000

// WorkerConfig configures a [Worker]. Queues must hold at least one queue;
// every other field's zero value is valid and documents its default.
type WorkerConfig struct {
	// Queues are the queues the worker runs, each with its handler and
	// settings. In strict mode their order is their priority: the first is
	// the most urgent. Required.
	Queues []WorkerQueue

	// Concurrency is the most jobs the worker runs at once, over all its
	// queues: one budget of handler slots that the queues share. Defaults
	// to DefaultConcurrency.
	Concurrency int

	// Strict orders the queues by their place in Queues: a queue's job
	// starts only when no queue before it has a job waiting (as far as the
	// worker can tell: every queue before it found no more jobs than it
	// took at its latest look, or holds as many as its limit). Queues
	// after it may starve while it is busy. Defaults to false: weighted,
	// see WorkerQueue.Weight.
	Strict bool
}

// WorkerQueue is one queue of a [Worker].
type WorkerQueue struct {
	// Source is the queue with its handler and settings (MaxDeliveries,
	// timeouts, middleware, OnEvent, Logger): a [*Consumer], or a
	// *priority.Worker. Its Concurrency, if its config set one, is the
	// queue's limit within the worker: at most that many of its jobs run at
	// once, and it must not be above WorkerConfig.Concurrency. Left zero,
	// the queue may take the whole budget. The worker runs the source:
	// while it does, the source's own Run returns [ErrRunning]. Required.
	Source Source

	// Weight is the queue's share of the budget in weighted mode: while
	// several queues have jobs waiting and every slot is taken, the slots
	// that free up go to them in proportion to their weights (asynq's
	// {"critical": 6, "default": 3, "low": 1} is three queues of weights 6,
	// 3 and 1). A queue with jobs waiting is never starved: it gets its
	// share however busy the others are. A queue that had nothing to do
	// gets no credit for the idle time. From 1 to MaxQueueWeight; it must
	// be 0 in strict mode. Defaults to 1.
	Weight int
}

// Source is a queue with its handler and settings that a [Worker] runs: a
// [*Consumer] or a *priority.Worker. Other packages cannot implement it.
type Source interface {
	// Health reports the state of the source's run.
	Health() Health
	sourceState
}

// sourceState is what a Worker needs of a source (internal/core).
type sourceState = core.ConsumerHolder

// Worker runs the jobs of several queues, stream queues and priority
// queues alike, with one budget of handler slots, per-queue limits, and
// weighted or strict order between the queues. Create it with [NewWorker]
// and start it with [Worker.Run].
//
// Every queue keeps the rules of its source (a [Consumer] or a priority
// worker): retries, dead letters, timeouts, exact attempts, takeover of
// abandoned jobs, pause and cancel. The worker never reads more jobs than
// it can start at once, so no job waits in a local buffer, and a job read
// is a job started.
type Worker struct {
	queues  []workerQueue
	size    int
	running atomic.Bool
}

// workerQueue is one queue of a Worker: its source and the engine that
// runs it within the worker's budget.
type workerQueue struct {
	src    *core.Consumer
	member *engine.Member
	runner engine.Runner
}

// NewWorker returns a worker of cfg's queues. It copies cfg, applies
// defaults and validates it; it never changes cfg.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	c := cfg
	c.Queues = append([]WorkerQueue(nil), cfg.Queues...)
	switch {
	case c.Concurrency == 0:
		c.Concurrency = DefaultConcurrency
	case c.Concurrency < 0:
		return nil, configErr("WorkerConfig.Concurrency", "%d is negative: use a positive number of handler goroutines, or 0 for %d", c.Concurrency, DefaultConcurrency)
	}
	if len(c.Queues) == 0 {
		return nil, configErr("WorkerConfig.Queues", "is empty: add a WorkerQueue for every queue to run, with a *streamq.Consumer or *priority.Worker as its Source")
	}
	share := engine.NewShare(c.Concurrency, c.Strict)
	w := &Worker{size: c.Concurrency}
	seen := make(map[string]int, len(c.Queues))
	for i, wq := range c.Queues {
		field := fmt.Sprintf("WorkerConfig.Queues[%d]", i)
		if wq.Source == nil || reflect.ValueOf(wq.Source).IsNil() {
			return nil, configErr(field+".Source", "is nil: pass a *streamq.Consumer or a *priority.Worker")
		}
		switch {
		case c.Strict && wq.Weight != 0:
			return nil, configErr(field+".Weight", "is %d, but a strict worker orders queues by their place in Queues: remove the weight, or Strict for weighted order", wq.Weight)
		case wq.Weight == 0:
			wq.Weight = 1
		case wq.Weight < 0 || wq.Weight > MaxQueueWeight:
			return nil, configErr(field+".Weight", "%d is out of range: use a weight from 1 to %d, or 0 for 1", wq.Weight, MaxQueueWeight)
		}
		src := core.OfConsumer(wq.Source)
		if j, dup := seen[src.Reads]; dup {
			return nil, configErr(field+".Source", "runs the %s like Queues[%d]: a worker runs each queue once; raise that source's Concurrency instead", src.Reads, j)
		}
		seen[src.Reads] = i
		limit := c.Concurrency
		if src.SetConcurrency {
			if src.Concurrency > c.Concurrency {
				return nil, configErr(field+".Source", "has Concurrency %d, above the worker's Concurrency %d, which bounds every queue: lower it, or raise WorkerConfig.Concurrency", src.Concurrency, c.Concurrency)
			}
			limit = src.Concurrency
		}
		m := share.Member(wq.Weight, limit)
		w.queues = append(w.queues, workerQueue{src: src, member: m, runner: src.Engine.Gated(m, limit)})
	}
	return w, nil
}

// Run runs the jobs of every queue until ctx is cancelled, then shuts every
// queue down as its source's Run does (see [Consumer.Run]): reading stops
// at once, running handlers finish within their ShutdownTimeout, and Run
// returns only after every handler goroutine returned. If one queue's run
// ends with an error that retrying cannot fix, the others are shut down the
// same way and Run returns that error. A Worker runs at most once at a
// time, and a source runs in at most one place: Run returns [ErrRunning]
// otherwise.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer w.running.Store(false)
	for i, q := range w.queues {
		if !q.src.Run.Claim() {
			for _, p := range w.queues[:i] {
				p.src.Run.Unclaim()
			}
			return fmt.Errorf("streamq: Queues[%d] (%s) is running elsewhere: %w", i, q.src.Reads, ErrRunning)
		}
	}
	defer func() {
		for _, q := range w.queues {
			q.src.Run.Unclaim()
		}
	}()
	for _, q := range w.queues {
		// Every queue counts as busy until its first read, so that a
		// strict worker's lower queues wait for the higher ones' first
		// look, whichever engine starts first.
		q.member.Join()
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, q := range w.queues {
		g.Go(func() error { return q.runner.Run(gctx, q.src.Backend()) })
	}
	return g.Wait()
}

// Stats returns the sum of the counters of the worker's queues since their
// sources were created (each source's own Stats has its queue's).
func (w *Worker) Stats() ConsumerStats {
	var s ConsumerStats
	for _, q := range w.queues {
		s.add(ConsumerStats(q.src.Run.Mon.Stats()))
	}
	return s
}

// add adds t's counters to s.
func (s *ConsumerStats) add(t ConsumerStats) {
	s.Processed += t.Processed
	s.Failed += t.Failed
	s.Retried += t.Retried
	s.DeadLettered += t.DeadLettered
	s.Reclaimed += t.Reclaimed
	s.Deleted += t.Deleted
	s.ClaimsLost += t.ClaimsLost
	s.Postponed += t.Postponed
}

// Health reports the state of the worker, for readiness and liveness
// probes: Running and Fetching while every queue's run and fetch loop run,
// ShuttingDown once any queue drains, Paused while every queue is paused,
// Jobs and Waiting summed, Concurrency the worker's budget, LastFetch the
// oldest of the queues' last fetches, and LastError a queue's current
// fetch error (one newer than its last successful fetch), prefixed with
// what it reads. [HealthHandler] takes the worker as one probe; pass the
// sources as well to see each queue.
func (w *Worker) Health() Health {
	h := Health{Running: true, Fetching: true, Paused: true, Concurrency: w.size}
	for i, q := range w.queues {
		s := q.src.Run.Mon.Health()
		h.Running = h.Running && s.Running
		h.Fetching = h.Fetching && s.Fetching
		h.Paused = h.Paused && s.Paused
		h.ShuttingDown = h.ShuttingDown || s.ShuttingDown
		h.Jobs += s.Jobs
		h.Waiting += s.Waiting
		if i == 0 || s.LastFetch.Before(h.LastFetch) {
			h.LastFetch = s.LastFetch
		}
		if s.LastError != "" && !s.LastErrorAt.Before(s.LastFetch) && s.LastErrorAt.After(h.LastErrorAt) {
			h.LastError, h.LastErrorAt = q.src.Reads+": "+s.LastError, s.LastErrorAt
		}
	}
	return h
}
