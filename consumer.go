package streamq

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/engine"
)

// Consumer defaults. A zero ConsumerConfig field takes these values.
const (
	DefaultConcurrency       = 16
	DefaultBlock             = time.Second
	DefaultJobTimeout        = 5 * time.Minute
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultMinIdle           = 30 * time.Second
	DefaultMaxDeliveries     = 10
	DefaultSchedulerInterval = 50 * time.Millisecond
	DefaultPruneIdle         = time.Hour
	DefaultMaxFetchBytes     = 32 << 20 // 32 MiB
	DefaultControlInterval   = time.Second
	DefaultResultRetention   = 24 * time.Hour
	DefaultMaxResultBytes    = 64 << 10 // 64 KiB
)

// MinControlInterval is the shortest ConsumerConfig.ControlInterval.
const MinControlInterval = 100 * time.Millisecond

const (
	// schedulerBatch is the most due jobs one scheduler call moves.
	schedulerBatch = 500
	// ackBatch is the most finished jobs acknowledged by one call.
	ackBatch = 512
	// reclaimBatch is the most entries one reclaim call takes over.
	reclaimBatch = 100
)

// ConsumerConfig configures a [Consumer]. The zero value is valid; every field
// documents its default.
type ConsumerConfig struct {
	// Name is the consumer's name within the group. It must be unique among
	// live consumers. Defaults to "<hostname>-<pid>-<random>".
	Name string

	// Concurrency is the maximum number of jobs running at once; the consumer
	// never reads more entries than it has free handler slots, so no entry
	// waits in a local buffer. Defaults to DefaultConcurrency.
	Concurrency int

	// MaxFetchBytes bounds the bytes of jobs one read brings into memory,
	// after the first read of a run. Redis reads by count, not by size, so
	// a read asks for at most max(1, MaxFetchBytes / s) entries (and never
	// more than free slots), where s is the size of the largest entry of
	// recent reads, forgotten over about 20 reads of smaller ones. So a
	// consumer of 16 MiB jobs reads 2 at a time, one of small jobs as many as
	// it has free slots. Defaults to DefaultMaxFetchBytes (32 MiB); -1
	// disables the bound.
	MaxFetchBytes int64

	// Block is how long one XREADGROUP waits for new entries. It also bounds
	// how long Run takes to notice a cancelled context. Defaults to
	// DefaultBlock.
	Block time.Duration

	// JobTimeout bounds one handler call: the handler's context reports the
	// deadline, and once it has passed the context is cancelled (Err is
	// context.DeadlineExceeded, the cause [ErrJobTimeout]) and the job
	// counts as failed. One sweeper per Run enforces it, within
	// max(JobTimeout/64, 10ms) and at most 1s after the deadline. Defaults to
	// DefaultJobTimeout; -1 disables the timeout.
	JobTimeout time.Duration

	// ShutdownTimeout is how long Run lets running handlers finish after its
	// context is cancelled. Then their contexts are cancelled with cause
	// [ErrShutdown]; Run still waits for every handler to return. Defaults to
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// MinIdle is how long an entry must sit unacknowledged and untouched before
	// the reaper of any consumer takes it over (the owner is presumed dead).
	// Running jobs keep their claim fresh every MinIdle/4, so a healthy worker's
	// long job is never taken over. Entries delivered to this consumer by a
	// read whose reply was lost (the connection broke and the client re-sent
	// the read) are found and taken back uncharged within
	// min(MinIdle/4, 2s). Use the same value on every consumer of a queue.
	// Defaults to DefaultMinIdle.
	MinIdle time.Duration

	// ReclaimInterval is how often the reaper looks for abandoned entries.
	// Defaults to MinIdle/2; -1 disables the reaper (not recommended: jobs of
	// crashed workers would then wait for another consumer's reaper).
	ReclaimInterval time.Duration

	// PruneIdle is how long a consumer of the group must have been idle, with
	// no pending entries, before the reaper deletes it from the group
	// (XGROUP DELCONSUMER, checked and done in one script, so a consumer that
	// owns a job is never deleted and no job leaves the pending list). Names
	// are unique per process, so without pruning every restart would leave a
	// consumer behind forever. A pruned consumer that comes back is simply
	// recreated by its next read. It must be more than twice Block. Defaults
	// to DefaultPruneIdle; -1 disables pruning.
	PruneIdle time.Duration

	// MaxDeliveries is the number of attempts after which a failing job is
	// dead-lettered. An attempt is a handler start: one that failed, or one
	// cut short because its worker died while the handler ran. A job that was
	// read or taken over but never started is not charged, and neither is a
	// run that handed the job back ([Postpone], a shutdown). Defaults to
	// DefaultMaxDeliveries.
	MaxDeliveries int

	// Backoff gives the delay before retry number attempt (1 for the first
	// retry). Defaults to DefaultBackoff: exponential from 1 s, capped at 10
	// minutes, with full jitter.
	Backoff BackoffFunc

	// SchedulerInterval is how often the consumer moves due delayed jobs
	// (scheduled jobs and retries) into the stream. Defaults to
	// DefaultSchedulerInterval; -1 disables this consumer's scheduler.
	SchedulerInterval time.Duration

	// ControlInterval is how often the consumer reads the queue's pause
	// flag and the cancel requests of running jobs (one pipelined round
	// trip: EXISTS and HKEYS). A paused queue stops taking new jobs within
	// about two intervals (running jobs finish and keep their claims), and
	// resumes likewise; a cancelled job's context is cancelled with cause
	// [ErrCancelled] within about one. Reads then block for at most this
	// long. At least MinControlInterval. Defaults to DefaultControlInterval.
	ControlInterval time.Duration

	// ResultRetention is how long a job's progress ([SetProgress]) and
	// result ([SetResult]) are kept. Defaults to DefaultResultRetention.
	ResultRetention time.Duration

	// MaxResultBytes bounds a result passed to [SetResult]. Defaults to
	// DefaultMaxResultBytes; -1 disables the bound.
	MaxResultBytes int64

	// Middleware wraps the handler; the first is the outermost. Defaults to none.
	Middleware []Middleware

	// OnEvent, if set, is called synchronously for events that handler
	// middleware cannot see: retries, dead letters, reclaims and lost entries.
	// It must be quick and safe for concurrent use. Defaults to nil.
	OnEvent func(ctx context.Context, e Event)

	// Logger receives the consumer's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// EventKind says what an [Event] reports.
type EventKind int

// Event kinds.
const (
	// EventRetried: a failed job was written again for a retry (or handed
	// back uncharged at shutdown).
	EventRetried EventKind = iota + 1
	// EventDeadLettered: a job was moved to the dead-letter stream.
	EventDeadLettered
	// EventReclaimed: the reaper took over a job abandoned by another consumer
	// (for a priority worker: returned an expired lease to the ready set).
	EventReclaimed
	// EventDeleted: a job's data was gone when it was taken over (a pending
	// stream entry trimmed or XDELed by someone else, a priority job whose
	// data was deleted). The job is lost; it leaves the pending list. With
	// the safe trimming of this package it only happens if something else
	// deletes entries.
	EventDeleted
	// EventClaimLost: a running job was taken over by another consumer.
	EventClaimLost
	// EventPostponed: the handler returned a [Postpone] error and the job was
	// moved to the delayed set without charging the attempt.
	EventPostponed
)

// String returns the kind's name, such as "retried".
func (k EventKind) String() string {
	switch k {
	case EventRetried:
		return "retried"
	case EventDeadLettered:
		return "dead_lettered"
	case EventReclaimed:
		return "reclaimed"
	case EventDeleted:
		return "deleted"
	case EventClaimLost:
		return "claim_lost"
	case EventPostponed:
		return "postponed"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event describes something the consumer did to a job besides running it.
type Event struct {
	Kind    EventKind
	Queue   string
	ID      string        // the job's ID
	Message *Message      // the job, when it could be decoded; nil for EventDeleted
	Err     error         // the failure that caused a retry or dead letter
	Delay   time.Duration // retry delay, for EventRetried and EventPostponed
	Reason  string        // dead-letter reason, for EventDeadLettered
}

// newEvent converts an engine event.
func newEvent(e engine.Event, group string) Event {
	ev := Event{Kind: EventKind(e.Kind), Queue: e.Queue, ID: e.ID, Err: e.Err, Delay: e.Delay, Reason: e.Reason}
	if e.Run != nil {
		ev.Message = newMessage(e.Run, group)
	}
	return ev
}

// ConsumerStats are counters since the consumer was created.
type ConsumerStats struct {
	Processed    int64 // handler returned nil and the job was acknowledged
	Failed       int64 // handler returned an error or panicked
	Retried      int64 // written again for a retry
	DeadLettered int64 // moved to the dead-letter stream
	Reclaimed    int64 // taken over from other consumers by the reaper
	Deleted      int64 // pending entries found deleted from the stream (see EventDeleted)
	ClaimsLost   int64 // running jobs taken over by another consumer
	Postponed    int64 // handed back by the handler with Postpone (not failures)
}

// Consumer reads jobs of one [Queue] with a consumer group and runs them with
// a bounded pool of handler goroutines. Create it with [NewConsumer] and start
// it with [Consumer.Run].
type Consumer struct {
	consumerHandle // shared with streamq's other packages (internal/core)
	q              *Queue
	cfg            ConsumerConfig
	run            *core.Run
}

type consumerHandle = core.ConsumerHandle

// runDefaults returns the defaults of what consumers and priority workers
// configure alike (core.Queue.Defaults, see core.RunConfig).
func runDefaults() core.RunDefaults {
	return core.RunDefaults{
		Concurrency:     DefaultConcurrency,
		MaxDeliveries:   DefaultMaxDeliveries,
		Block:           DefaultBlock,
		JobTimeout:      DefaultJobTimeout,
		ShutdownTimeout: DefaultShutdownTimeout,
		ControlInterval: DefaultControlInterval,
		MinControl:      MinControlInterval,
		ResultRetention: DefaultResultRetention,
		MaxFetchBytes:   DefaultMaxFetchBytes,
		MaxResultBytes:  DefaultMaxResultBytes,
		Backoff:         DefaultBackoff,
		Version:         Version,
	}
}

// NewConsumer returns a consumer that runs h for every job of q. cfg may be
// nil. It copies cfg, applies defaults and validates it; it never changes cfg.
func NewConsumer(q *Queue, h Handler, cfg *ConsumerConfig) (*Consumer, error) {
	if q == nil {
		return nil, configErr("queue", "q is nil: create one with streamq.NewQueue")
	}
	if h == nil {
		return nil, configErr("handler", "h is nil: pass a streamq.Handler or streamq.HandlerFunc")
	}
	var c ConsumerConfig
	if cfg != nil {
		c = *cfg
		c.Middleware = append([]Middleware(nil), cfg.Middleware...)
	}
	run, err := core.Of(q).NewRun(&core.RunConfig{Role: "consumer", Group: q.group, FinishBatch: ackBatch, Claim: &c.MinIdle, Heartbeat: true, StartLease: true,
		Own:  []core.Duration{{Field: "MinIdle", V: &c.MinIdle, Def: DefaultMinIdle}, {Field: "SchedulerInterval", V: &c.SchedulerInterval, Def: DefaultSchedulerInterval, Off: true}},
		Name: &c.Name, Concurrency: &c.Concurrency, MaxDeliveries: &c.MaxDeliveries, Block: &c.Block, JobTimeout: &c.JobTimeout, ShutdownTimeout: &c.ShutdownTimeout,
		ControlInterval: &c.ControlInterval, ResultRetention: &c.ResultRetention, MaxFetchBytes: &c.MaxFetchBytes, MaxResultBytes: &c.MaxResultBytes,
		Backoff: (*func(int) time.Duration)(&c.Backoff), NilMiddleware: core.NilAt(c.Middleware), Logger: c.Logger, OnEvent: c.OnEvent,
		Check: c.check, Handler: func() any { return Chain(h, c.Middleware...) },
	}, func(field, format string, args ...any) error {
		return configErr("ConsumerConfig."+field, format, args...)
	})
	if err != nil {
		return nil, err
	}
	cc := &core.Consumer{Engine: run.Engine, Run: run, Concurrency: c.Concurrency, SetConcurrency: cfg != nil && cfg.Concurrency != 0,
		Reads: "stream " + q.keys.Stream}
	cons := &Consumer{consumerHandle: core.NewConsumerHandle(cc), q: q, cfg: c, run: run}
	cc.Backend = func() engine.Backend { return newStreamBackend(cons) }
	return cons, nil
}

// check applies the defaults of the consumer's own fields and validates
// them, after core.RunConfig.Apply.
func (c *ConsumerConfig) check() error {
	if c.MinIdle < 20*time.Millisecond {
		return configErr("ConsumerConfig.MinIdle", "%s is too short for running jobs to keep their claims fresh: use at least 20ms (default %s)", c.MinIdle, DefaultMinIdle)
	}
	switch {
	case c.ReclaimInterval == 0:
		c.ReclaimInterval = c.MinIdle / 2
	case c.ReclaimInterval == -1:
	case c.ReclaimInterval < 0:
		return configErr("ConsumerConfig.ReclaimInterval", "%s is negative: use a positive duration, 0 for MinIdle/2, or -1 to disable the reaper", c.ReclaimInterval)
	}
	switch {
	case c.PruneIdle == 0:
		c.PruneIdle = DefaultPruneIdle
	case c.PruneIdle == -1:
	case c.PruneIdle <= 2*c.Block:
		return configErr("ConsumerConfig.PruneIdle", "%s is not more than twice Block (%s): a live consumer waiting in XREADGROUP could look idle; use a longer duration, 0 for %s, or -1 to disable pruning", c.PruneIdle, c.Block, DefaultPruneIdle)
	}
	return nil
}

// Name returns the consumer's name in the group.
func (c *Consumer) Name() string { return c.cfg.Name }

// Queue returns the consumer's queue.
func (c *Consumer) Queue() *Queue { return c.q }

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats { return ConsumerStats(c.run.Mon.Stats()) }

// Health reports the state of the consumer's run, for readiness and
// liveness probes.
func (c *Consumer) Health() Health { return Health(c.run.Mon.Health()) }

// Run consumes jobs until ctx is cancelled, then shuts down gracefully: it
// stops reading at once, lets running handlers finish for up to
// ShutdownTimeout (their contexts are detached from ctx), then cancels them
// with cause [ErrShutdown], waits for every handler goroutine to return,
// flushes acknowledgements and returns. A job whose handler returned because
// of the shutdown, and a job that waited to make its last attempt alone,
// are handed back at once without charging an attempt; a job whose handler
// never returned stays pending (Run waits for it). No job is ever put back
// while its handler may still be running.
//
// Run returns nil after a shutdown caused by ctx, and an error only when
// Redis answers with one that retrying cannot fix (wrong key type, missing
// permission). Transient Redis errors are logged and retried with backoff.
// Run composes with errgroup. A Consumer runs at most once at a time.
func (c *Consumer) Run(ctx context.Context) error {
	return c.run.Run(ctx, newStreamBackend(c))
}
