package priority

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/engine"
)

// Worker defaults. A zero WorkerConfig field takes these values.
const (
	DefaultConcurrency     = streamq.DefaultConcurrency
	DefaultBlock           = streamq.DefaultBlock
	DefaultLease           = 30 * time.Second
	DefaultJobTimeout      = streamq.DefaultJobTimeout
	DefaultShutdownTimeout = streamq.DefaultShutdownTimeout
	DefaultMaxDeliveries   = streamq.DefaultMaxDeliveries
	DefaultReapInterval    = 50 * time.Millisecond
	// MaxPopBatch is the most jobs one pop leases.
	MaxPopBatch = 500
)

const (
	// reapBatch is the most expired leases and due retries one reap script
	// moves from each set.
	reapBatch = 500
	// finishBatch is the most finished jobs removed by one script.
	finishBatch = 512
	// opTimeout bounds one bookkeeping call (pop, finish, retry, dead
	// letter), including during shutdown.
	opTimeout = 5 * time.Second
	// minLease is the shortest lease: keep-alive runs every Lease/4.
	minLease = 20 * time.Millisecond
)

// WorkerConfig configures a [Worker]. The zero value is valid; every field
// documents its default.
type WorkerConfig struct {
	// Name identifies the worker in its lease tokens and logs. It must be
	// unique among live workers of the queue. Defaults to
	// "<hostname>-<pid>-<random>".
	Name string

	// Concurrency is the maximum number of jobs running at once. The worker
	// never leases more jobs than it has free handler slots (each pop leases
	// as many as are free, up to MaxPopBatch), so no leased job waits in a
	// local buffer. Defaults to DefaultConcurrency.
	Concurrency int

	// MaxFetchBytes bounds the bytes of jobs one pop brings into memory, as
	// [streamq.ConsumerConfig.MaxFetchBytes] does for a read. Defaults to
	// [streamq.DefaultMaxFetchBytes] (32 MiB); -1 disables the bound.
	MaxFetchBytes int64

	// Block is how long the worker waits for a wake-up when the priority set
	// is empty before it looks again (a push or forward wakes it at once).
	// Defaults to DefaultBlock.
	Block time.Duration

	// Lease is how long a popped job stays leased without a sign of life.
	// Running jobs extend their lease every Lease/4; a lease that expires
	// (its worker died, hung or lost Redis for that long) returns the job to
	// the ready set with its original priority and place. Use the same value
	// on every worker of a queue. Defaults to DefaultLease.
	Lease time.Duration

	// JobTimeout bounds one handler call: the handler's context reports the
	// deadline, and once it has passed the context is cancelled (Err is
	// context.DeadlineExceeded, the cause [streamq.ErrJobTimeout]) and the job
	// counts as failed. One sweeper per Run enforces it, within
	// max(JobTimeout/64, 10ms) and at most 1s after the deadline. Defaults to
	// DefaultJobTimeout; -1 disables the timeout.
	JobTimeout time.Duration

	// ShutdownTimeout is how long Run lets running handlers finish after its
	// context is cancelled. Then their contexts are cancelled with cause
	// [streamq.ErrShutdown]; Run still waits for every handler to return.
	// Defaults to DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// MaxDeliveries is the number of attempts (handler starts that failed or
	// were cut short by crashes) after which a failing job is dead-lettered,
	// as for [streamq.ConsumerConfig.MaxDeliveries]. Defaults to
	// DefaultMaxDeliveries.
	MaxDeliveries int

	// Backoff gives the delay before retry number attempt. Defaults to
	// [streamq.DefaultBackoff].
	Backoff streamq.BackoffFunc

	// ReapInterval is how often the worker returns expired leases and due
	// retries to the ready set. Any number of workers may reap at once.
	// Defaults to DefaultReapInterval; -1 disables this worker's reaper (not
	// recommended: some worker of the queue must reap).
	ReapInterval time.Duration

	// Bands turns on weighted mode: instead of strict priority the worker
	// shares its pops between bands of priorities in proportion to their
	// weights, so that low priorities are not starved; within a band jobs
	// still run in priority order, FIFO among equals. The bands must not
	// overlap and must hold every priority from MinPriority to MaxPriority.
	// Defaults to nil: strict priority.
	Bands []Band

	// ControlInterval is how often the worker reads the queue's pause flag
	// and cancel requests and records that it is alive (one pipelined round
	// trip), as [streamq.ConsumerConfig.ControlInterval]. At least
	// [streamq.MinControlInterval]. Defaults to
	// [streamq.DefaultControlInterval].
	ControlInterval time.Duration

	// ResultRetention is how long progress and results of jobs
	// ([streamq.SetProgress], [streamq.SetResult]) are kept. Defaults to
	// [streamq.DefaultResultRetention].
	ResultRetention time.Duration

	// MaxResultBytes bounds a result. Defaults to
	// [streamq.DefaultMaxResultBytes]; -1 disables the bound.
	MaxResultBytes int64

	// Middleware wraps the handler; the first is the outermost. Defaults to
	// none.
	Middleware []streamq.Middleware

	// OnEvent, if set, is called synchronously for events that handler
	// middleware cannot see: [streamq.EventRetried],
	// [streamq.EventPostponed], [streamq.EventDeadLettered], [streamq.EventReclaimed] (an expired lease
	// returned to the ready set by this worker's reaper) and
	// [streamq.EventClaimLost]. Event.ID is the job ID. It must be quick and
	// safe for concurrent use. Defaults to nil.
	OnEvent func(ctx context.Context, e streamq.Event)

	// Logger receives the worker's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// WorkerStats are counters since the worker was created.
type WorkerStats struct {
	Processed    int64 // handler returned nil; the job is finished
	Failed       int64 // handler returned an error or panicked
	Retried      int64 // moved to the delayed set (or straight back) for a retry
	Postponed    int64 // handed back by the handler with streamq.Postpone (not failures)
	DeadLettered int64 // moved to the queue's dead-letter stream
	// Reclaimed counts the jobs this worker's reaper took back from workers
	// that stopped answering (expired leases returned to the ready set),
	// as [streamq.ConsumerStats].Reclaimed does for stream consumers.
	Reclaimed  int64
	ClaimsLost int64 // running jobs whose lease expired, so they may run elsewhere
	// Deleted counts ready jobs found without their data (deleted by
	// someone else), as streamq.ConsumerStats.Deleted does for stream
	// entries.
	Deleted int64

	// Expired is Reclaimed.
	//
	// Deprecated: use Reclaimed, the name every other surface (ConsumerStats,
	// streamq.EventReclaimed, the metric streamq.jobs.reclaimed) uses.
	Expired int64
	// Missing is Deleted.
	//
	// Deprecated: use Deleted, the name of ConsumerStats.
	Missing int64
}

// Worker runs a [streamq.Handler] for the jobs of a priority [Queue], most
// urgent first, with the stream consumer's rules for retries, dead letters,
// panics, timeouts and shutdown. Create it with [NewWorker] and start it with
// [Worker.Run], or run it beside other queues with one budget as a source of
// a [streamq.Worker] (see [streamq.WorkerQueue]).
type Worker struct {
	consumerHandle // what a streamq.Worker runs (internal/core)
	pq             *Queue
	cfg            WorkerConfig
	bands          []band
	run            *core.Run
}

// NewWorker returns a worker that runs h for the jobs of pq. cfg may be nil.
// It copies cfg, applies defaults and validates it; it never changes cfg.
func NewWorker(pq *Queue, h streamq.Handler, cfg *WorkerConfig) (*Worker, error) {
	if pq == nil {
		return nil, &streamq.ConfigError{Field: "queue", Reason: "pq is nil: create one with priority.NewQueue"}
	}
	if h == nil {
		return nil, &streamq.ConfigError{Field: "handler", Reason: "h is nil: pass a streamq.Handler or streamq.HandlerFunc"}
	}
	var c WorkerConfig
	if cfg != nil {
		c = *cfg
		c.Middleware = append([]streamq.Middleware(nil), cfg.Middleware...)
		c.Bands = append([]Band(nil), cfg.Bands...)
	}
	// The lease token holds the name, and '|' ends it.
	run, err := pq.core.NewRun(&core.RunConfig{Role: "worker", Forbid: "|", FinishBatch: finishBatch, Claim: &c.Lease, Heartbeat: true,
		Own:  []core.Duration{{Field: "Lease", V: &c.Lease, Def: DefaultLease}, {Field: "ReapInterval", V: &c.ReapInterval, Def: DefaultReapInterval, Off: true}},
		Name: &c.Name, Concurrency: &c.Concurrency, MaxDeliveries: &c.MaxDeliveries, Block: &c.Block, JobTimeout: &c.JobTimeout, ShutdownTimeout: &c.ShutdownTimeout,
		ControlInterval: &c.ControlInterval, ResultRetention: &c.ResultRetention, MaxFetchBytes: &c.MaxFetchBytes, MaxResultBytes: &c.MaxResultBytes,
		Backoff: (*func(int) time.Duration)(&c.Backoff), NilMiddleware: core.NilAt(c.Middleware), Logger: c.Logger, OnEvent: c.OnEvent,
		Check: c.check, Handler: func() any { return streamq.Chain(h, c.Middleware...) },
	}, configErr)
	if err != nil {
		return nil, err
	}
	bands, err := bandRanges(c.Bands, pq.cfg.LowerFirst)
	if err != nil {
		return nil, err
	}
	w := &Worker{pq: pq, cfg: c, bands: bands, run: run}
	w.consumerHandle = core.NewConsumerHandle(&core.Consumer{Engine: run.Engine, Run: run, Backend: w.backend,
		Concurrency: c.Concurrency, SetConcurrency: cfg != nil && cfg.Concurrency != 0, Reads: "priority set " + pq.keys.Ready})
	return w, nil
}

type consumerHandle = core.ConsumerHandle

func configErr(field, format string, args ...any) error {
	return &streamq.ConfigError{Field: "priority.WorkerConfig." + field, Reason: fmt.Sprintf(format, args...)}
}

// check validates the worker's own fields, after core.RunConfig.Apply.
func (c *WorkerConfig) check() error {
	if c.Lease < minLease {
		return configErr("Lease", "%s is too short for running jobs to extend their leases in time: use at least %s (default %s)", c.Lease, minLease, DefaultLease)
	}
	return nil
}

// Name returns the worker's name.
func (w *Worker) Name() string { return w.cfg.Name }

// Queue returns the worker's priority queue.
func (w *Worker) Queue() *Queue { return w.pq }

// Stats returns the worker's counters.
func (w *Worker) Stats() WorkerStats {
	s := w.run.Mon.Stats()
	return WorkerStats{
		Processed:    s.Processed,
		Failed:       s.Failed,
		Retried:      s.Retried,
		Postponed:    s.Postponed,
		DeadLettered: s.DeadLettered,
		Reclaimed:    s.Reclaimed,
		ClaimsLost:   s.ClaimsLost,
		Deleted:      s.Deleted,
		Expired:      s.Reclaimed,
		Missing:      s.Deleted,
	}
}

// Health reports the state of the worker's run, for readiness and liveness
// probes.
func (w *Worker) Health() streamq.Health { return streamq.Health(w.run.Mon.Health()) }

// Run runs jobs until ctx is cancelled, then shuts down gracefully: it stops
// taking jobs at once (also while it waits for work), lets running handlers
// finish for up to ShutdownTimeout (their contexts are detached from ctx),
// then cancels them with cause [streamq.ErrShutdown], waits for every handler
// goroutine to return, removes the finished jobs and returns. A job whose
// handler returned because of the shutdown, and a job that waited to make
// its last attempt alone, go back to the ready set without being charged an
// attempt; a job whose handler did not finish keeps its lease until it
// returns. No job is ever put back while its handler may still be running.
//
// Run returns nil after a shutdown caused by ctx, and an error only when
// Redis answers with one that retrying cannot fix (wrong key type, missing
// permission). Transient Redis errors are logged and retried with backoff.
// Run composes with errgroup. A Worker runs at most once at a time; a second
// Run returns [streamq.ErrRunning].
func (w *Worker) Run(ctx context.Context) error {
	return w.run.Run(ctx, w.backend())
}

// backend returns the backend of one run.
func (w *Worker) backend() engine.Backend {
	return &backend{w: w, pq: w.pq, run: randHex(3), credits: make([]int64, len(w.bands)), budget: engine.NewFetchBudget(w.cfg.MaxFetchBytes)}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
