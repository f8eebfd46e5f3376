package streamq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq/internal/pool"
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
	DefaultSchedulerBatch    = 500
	DefaultAckBatch          = 512
	DefaultPruneIdle         = time.Hour
	// ackLinger is how long the ack loop waits for more finished jobs before
	// sending a small XACK batch; readGather is how long the read loop waits
	// for every handler slot to free up while a backlog exists.
	ackLinger  = time.Millisecond
	readGather = 500 * time.Microsecond
	// opTimeout bounds one bookkeeping call (ack, retry, dead-letter) made
	// after the job ran, including during shutdown.
	opTimeout = 5 * time.Second
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
	// long job is never taken over. Use the same value on every consumer of a
	// queue. Defaults to DefaultMinIdle.
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

	// MaxDeliveries is the number of attempts (retries plus redeliveries after
	// crashes) after which a failing job is dead-lettered. Defaults to
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
	// EventRetried: a failed job was moved to the delayed set for a retry.
	EventRetried EventKind = iota + 1
	// EventDeadLettered: a job was moved to the dead-letter stream.
	EventDeadLettered
	// EventReclaimed: the reaper took over a job abandoned by another consumer.
	EventReclaimed
	// EventDeleted: XAUTOCLAIM found a pending entry whose data was deleted
	// from the stream (trimmed or XDELed by someone else). Its job is gone;
	// the entry was acknowledged so it leaves the pending list. With the safe
	// trimming of this package it only happens if something else deletes entries.
	EventDeleted
	// EventClaimLost: a running job was taken over by another consumer.
	EventClaimLost
	// EventPostponed: the handler returned a [Postpone] error and the job was
	// moved to the delayed set without charging the attempt.
	EventPostponed
)

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
	ID      string        // stream entry ID
	Message *Message      // the job, when it could be decoded; nil for EventDeleted
	Err     error         // the failure that caused a retry or dead letter
	Delay   time.Duration // retry delay, for EventRetried
	Reason  string        // dead-letter reason, for EventDeadLettered
}

// ConsumerStats are counters since the consumer was created.
type ConsumerStats struct {
	Processed    int64 // handler returned nil and the job was acknowledged
	Failed       int64 // handler returned an error or panicked
	Retried      int64 // moved to the delayed set for a retry
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
	q       *Queue
	h       Handler
	cfg     ConsumerConfig
	log     *slog.Logger
	running atomic.Bool

	processed, failed, retried, dead, reclaimed, deleted, claimsLost, postponed atomic.Int64
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
	if err := c.setDefaults(); err != nil {
		return nil, err
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Consumer{
		q:   q,
		h:   Chain(h, c.Middleware...),
		cfg: c,
		log: log.With("queue", q.name, "consumer", c.Name),
	}, nil
}

func (c *ConsumerConfig) setDefaults() error {
	if c.Name == "" {
		c.Name = defaultConsumerName()
	}
	if err := validName("ConsumerConfig.Name", c.Name); err != nil {
		return err
	}
	type dur struct {
		field string
		v     *time.Duration
		def   time.Duration
		off   bool // -1 allowed
	}
	for _, d := range []dur{
		{"Block", &c.Block, DefaultBlock, false},
		{"JobTimeout", &c.JobTimeout, DefaultJobTimeout, true},
		{"ShutdownTimeout", &c.ShutdownTimeout, DefaultShutdownTimeout, false},
		{"MinIdle", &c.MinIdle, DefaultMinIdle, false},
		{"SchedulerInterval", &c.SchedulerInterval, DefaultSchedulerInterval, true},
	} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v == -1 && d.off:
		case *d.v < 0:
			hint := "use a positive duration or 0 for the default"
			if d.off {
				hint += ", or -1 to disable"
			}
			return configErr("ConsumerConfig."+d.field, "%s is negative: %s (%s)", *d.v, hint, d.def)
		}
	}
	if c.Block < time.Millisecond {
		return configErr("ConsumerConfig.Block", "%s is below 1ms, which Redis reads as 'block forever': use at least 1ms", c.Block)
	}
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
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Concurrency < 0 {
		return configErr("ConsumerConfig.Concurrency", "%d is negative: use a positive number of handler goroutines, or 0 for %d", c.Concurrency, DefaultConcurrency)
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.MaxDeliveries < 0 {
		return configErr("ConsumerConfig.MaxDeliveries", "%d is negative: use a positive number of attempts, or 0 for %d", c.MaxDeliveries, DefaultMaxDeliveries)
	}
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	for i, m := range c.Middleware {
		if m == nil {
			return configErr(fmt.Sprintf("ConsumerConfig.Middleware[%d]", i), "is nil: remove it")
		}
	}
	return nil
}

func defaultConsumerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	if validName("", name) != nil { // exotic host names
		name = fmt.Sprintf("consumer-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	}
	return name
}

// Name returns the consumer's name in the group.
func (c *Consumer) Name() string { return c.cfg.Name }

// Queue returns the consumer's queue.
func (c *Consumer) Queue() *Queue { return c.q }

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{
		Processed:    c.processed.Load(),
		Failed:       c.failed.Load(),
		Retried:      c.retried.Load(),
		DeadLettered: c.dead.Load(),
		Reclaimed:    c.reclaimed.Load(),
		Deleted:      c.deleted.Load(),
		ClaimsLost:   c.claimsLost.Load(),
		Postponed:    c.postponed.Load(),
	}
}

// Run consumes jobs until ctx is cancelled, then shuts down gracefully: it
// stops reading at once, lets running handlers finish for up to
// ShutdownTimeout (their contexts are detached from ctx), then cancels them
// with cause [ErrShutdown], waits for every handler goroutine to return,
// flushes acknowledgements and returns. Jobs that did not finish stay pending
// and are taken over by another consumer's reaper after MinIdle; no job is
// ever put back while its handler may still be running.
//
// Run returns nil after a shutdown caused by ctx, and an error only when
// Redis answers with one that retrying cannot fix (wrong key type, missing
// permission). Transient Redis errors are logged and retried with backoff.
// Run composes with errgroup. A Consumer runs at most once at a time.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)

	r := &run{c: c, acks: make(chan ackItem, 2*c.cfg.Concurrency)}
	r.pool = pool.New(ctx, pool.Config{
		Concurrency:     c.cfg.Concurrency,
		ShutdownTimeout: c.cfg.ShutdownTimeout,
		ShutdownCause:   ErrShutdown,
		LostCause:       ErrClaimLost,
		JobTimeout:      max(c.cfg.JobTimeout, 0),
		TimeoutCause:    ErrJobTimeout,
	}, r.process)

	ackDone := make(chan struct{})
	go func() {
		defer close(ackDone)
		pool.Batch(r.acks, DefaultAckBatch, min(c.cfg.Concurrency, DefaultAckBatch), ackLinger, r.flushAcks)
	}()
	kaCtx, stopKA := context.WithCancel(context.WithoutCancel(ctx))
	kaDone := make(chan struct{})
	go func() { defer close(kaDone); r.keepAlive(kaCtx) }()

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.readLoop(gctx) })
	if c.cfg.ReclaimInterval > 0 {
		g.Go(func() error { return r.reapLoop(gctx) })
	}
	if c.cfg.SchedulerInterval > 0 {
		g.Go(func() error { return r.promoteLoop(gctx) })
	}
	err := g.Wait()

	r.pool.Drain(func(running int) {
		c.log.Warn("streamq: shutdown timeout, cancelling running jobs; each is handed back once its handler returns", "running", running, "timeout", c.cfg.ShutdownTimeout)
	})
	r.pool.Close()
	close(r.acks)
	<-ackDone // claims of acknowledged jobs stay fresh until the XACK is sent
	stopKA()
	<-kaDone
	return err
}

// run is the state of one Run call.
type run struct {
	c    *Consumer
	pool *pool.Pool[entry] // jobs by stream entry ID
	acks chan ackItem
}

// entry is a stream entry the run owns.
type entry struct {
	values     map[string]any
	deliveries int
}

// ackItem is a finished job waiting to be acknowledged. It stays registered
// until its XACK was sent, so its claim stays fresh and the reaper cannot
// start it again.
type ackItem struct {
	job      *pool.Job[entry]
	lockKey  string // unique-key lock to release, if any
	keyToken string
}

// readLoop reads new entries, never more than there are free handler slots.
func (r *run) readLoop(ctx context.Context) error {
	c := r.c
	if err := r.ensureGroup(ctx); err != nil {
		return err
	}
	var bo pool.Backoff
	full := false // the last read returned as many entries as it asked for
	conc := int64(c.cfg.Concurrency)
	for {
		// While a backlog is likely, wait briefly for all the slots rather
		// than read one or two entries at a time: every XREADGROUP costs a
		// round trip and CPU on both sides, and with fast handlers the
		// slots free up within the wait. (Waiting for half of them read
		// half as many entries per call and cost 12-20 % more CPU per job
		// at concurrency 16 and 64.) Slow handlers are not held up for
		// longer than readGather.
		n, err := r.pool.Slots(ctx, conc, full, conc, readGather)
		if err != nil {
			return nil // ctx cancelled
		}
		streams, err := c.q.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group:    c.q.group,
			Consumer: c.cfg.Name,
			Streams:  []string{c.q.stream, ">"},
			Count:    n,
			Block:    c.cfg.Block,
		}).Result()
		if err != nil {
			r.pool.Release(n)
			full = false
			if errors.Is(err, redis.Nil) {
				bo.Reset()
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			if isNoGroup(err) {
				if err := r.ensureGroup(ctx); err != nil {
					return err
				}
				continue
			}
			if pool.Fatal(err) {
				return fmt.Errorf("streamq: xreadgroup %s: %w", c.q.stream, err)
			}
			c.log.WarnContext(ctx, "streamq: read failed, retrying", "error", err, "retry_in", bo.Peek())
			if !bo.Wait(ctx) {
				return nil
			}
			continue
		}
		bo.Reset()
		var read, started int64
		var alone []*pool.Job[entry]
		for _, s := range streams {
			for _, m := range s.Messages {
				read++
				j := r.pool.Register(m.ID, entry{values: m.Values, deliveries: 1})
				// A copy handed back after crashes, at its last attempt.
				if conc > 1 && LastAttemptAfterCrash(m.Values, 1, c.cfg.MaxDeliveries) {
					c.log.InfoContext(ctx, "streamq: job whose earlier runs were cut short makes its last attempt alone", "msg_id", m.ID)
					alone = append(alone, j)
					continue
				}
				r.start(j, 1)
				started++
			}
		}
		r.pool.Release(n - started)
		full = read == n
		if !r.pool.RunAlone(ctx, alone, r.handBack) {
			return nil
		}
	}
}

// ensureGroup creates the group, retrying transient errors until ctx ends.
func (r *run) ensureGroup(ctx context.Context) error {
	var bo pool.Backoff
	for {
		err := r.c.q.Setup(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if pool.Fatal(errors.Unwrap(err)) {
			return err
		}
		r.c.log.WarnContext(ctx, "streamq: cannot create consumer group, retrying", "error", err, "retry_in", bo.Peek())
		if !bo.Wait(ctx) {
			return nil
		}
	}
}

// start runs a registered job in a new goroutine. The caller holds weight
// handler slots for it.
func (r *run) start(j *pool.Job[entry], weight int64) {
	r.pool.Launch(j, weight)
}

// process runs the handler for one entry and settles the outcome: ack,
// retry, or dead letter. It reports true when the job went to the ack loop,
// which unregisters it once acknowledged.
func (r *run) process(j *pool.Job[entry]) bool {
	c := r.c
	msg, err := DecodeMessage(c.q.name, j.Key, j.Val.values, j.Val.deliveries)
	msg.Group = c.q.group
	if err != nil {
		r.deadLetter(msg, ReasonMalformed, err, max(msg.Deliveries, 1))
		return false
	}
	if v, cause, over := Exhausted(msg, c.cfg.MaxDeliveries); over {
		r.deadLetter(msg, v.Reason, cause, v.Attempts)
		return false
	}
	var jctx context.Context = j // cancelled on timeout, lost claim or shutdown
	err = CallHandler(jctx, c.h, msg)
	r.pool.Settle(j)
	if err == nil {
		c.processed.Add(1)
		a := ackItem{job: j}
		if msg.Key != "" {
			a.lockKey, a.keyToken = c.q.uniqueKey(msg.Key), msg.keyToken
		}
		r.acks <- a
		return true
	}
	cause := context.Cause(jctx)
	switch {
	case errors.Is(cause, ErrClaimLost):
		// Another consumer owns the job now; settling it here would race.
		c.failed.Add(1)
		c.log.Info("streamq: job failed after its claim was lost; the new owner settles it", "msg_id", msg.ID, "error", err)
	case errors.Is(cause, ErrShutdown):
		// The handler stopped because of the shutdown: hand the job back at
		// once without charging an attempt. Its handler has returned, so it
		// cannot run twice.
		c.failed.Add(1)
		r.retry(msg, err, Verdict{Postponed: true}, EventRetried)
	default:
		r.fail(msg, err)
	}
	return false
}

// fail retries, postpones or dead-letters a failed attempt, as [Decide] says.
func (r *run) fail(msg *Message, err error) {
	v := Decide(msg, err, r.c.cfg.MaxDeliveries, r.c.cfg.Backoff)
	if !v.Postponed {
		r.c.failed.Add(1)
	}
	if v.DeadLetter {
		r.deadLetter(msg, v.Reason, err, v.Attempts)
		return
	}
	kind := EventRetried
	if v.Postponed {
		kind = EventPostponed
	}
	r.retry(msg, err, v, kind)
}

// retry moves the job to the delayed set in one script, due after v.Delay;
// with v.Postponed the attempt is not charged (see [RetryFields]). kind is
// the event to report: EventRetried or EventPostponed. If it cannot (Redis
// unreachable), the job stays pending and the reaper retries it later.
func (r *run) retry(msg *Message, cause error, v Verdict, kind EventKind) {
	c := r.c
	now := time.Now()
	args := append([]any{c.q.group, c.cfg.Name, msg.ID, millis(now.Add(v.Delay)), newToken()}, RetryFields(msg, cause, !v.Postponed, now)...)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	moved, err := scriptRetry.Run(ctx, c.q.rdb, []string{c.q.stream, c.q.delayed, c.q.jobs}, args...).Int()
	switch {
	case err != nil:
		c.log.Error("streamq: cannot schedule retry; the job stays pending and will be reclaimed", "msg_id", msg.ID, "error", err)
	case moved == 0:
		c.log.Info("streamq: job was taken over by another consumer before its retry; leaving it", "msg_id", msg.ID)
	case kind == EventPostponed:
		c.postponed.Add(1)
		c.log.Debug("streamq: job postponed", "msg_id", msg.ID, "retry_in", v.Delay, "reason", cause)
		c.event(ctx, Event{Kind: EventPostponed, ID: msg.ID, Message: msg, Err: cause, Delay: v.Delay})
	default:
		c.retried.Add(1)
		c.log.Debug("streamq: job failed, retrying", "msg_id", msg.ID, "attempt", msg.Attempts(), "retry_in", v.Delay, "error", cause)
		c.event(ctx, Event{Kind: EventRetried, ID: msg.ID, Message: msg, Err: cause, Delay: v.Delay})
	}
}

func (c *Consumer) event(ctx context.Context, e Event) {
	if c.cfg.OnEvent != nil {
		e.Queue = c.q.name
		c.cfg.OnEvent(ctx, e)
	}
}

// flushAcks acknowledges a batch in one XACK, or, when some of its jobs hold
// unique-key locks, in one script that also releases the locks. It tries
// three times; jobs it cannot acknowledge stay pending and run again later.
func (r *run) flushAcks(batch []ackItem) {
	c := r.c
	ids := make([]string, len(batch))
	var lockKeys []string
	for i, a := range batch {
		ids[i] = a.job.Key
		if a.lockKey != "" {
			lockKeys = append(lockKeys, a.lockKey)
		}
	}
	var keys []string
	var args []any
	if len(lockKeys) > 0 {
		keys = append([]string{c.q.stream}, lockKeys...)
		args = make([]any, 0, 2+len(ids)+len(lockKeys))
		args = append(args, c.q.group, len(ids))
		for _, id := range ids {
			args = append(args, id)
		}
		for _, a := range batch {
			if a.lockKey != "" {
				args = append(args, a.keyToken)
			}
		}
	}
	var bo pool.Backoff
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		var err error
		if len(lockKeys) == 0 {
			err = c.q.rdb.XAck(ctx, c.q.stream, c.q.group, ids...).Err()
		} else {
			err = scriptAck.Run(ctx, c.q.rdb, keys, args...).Err()
		}
		cancel()
		if err == nil || try == 3 {
			if err != nil {
				c.log.Error("streamq: cannot acknowledge jobs; they stay pending and will run again", "count", len(ids), "error", err)
			}
			jobs := make([]*pool.Job[entry], len(batch))
			for i, a := range batch {
				jobs[i] = a.job
			}
			r.pool.UnregisterAll(jobs)
			return
		}
		time.Sleep(bo.Next())
	}
}

// keepAlive refreshes the claims of the jobs this run owns every MinIdle/4,
// so that the reaper of another consumer does not take them over, and
// cancels running jobs whose claim was lost.
func (r *run) keepAlive(ctx context.Context) {
	c := r.c
	// A refresh that takes longer than MinIdle/2 is too late anyway; the
	// next tick tries again.
	r.pool.KeepAlive(ctx, max(c.cfg.MinIdle/4, 5*time.Millisecond), min(c.cfg.MinIdle/2, opTimeout),
		func(ctx context.Context, ids []string) ([]string, error) {
			args := make([]any, 0, 2+len(ids))
			args = append(args, c.q.group, c.cfg.Name)
			for _, id := range ids {
				args = append(args, id)
			}
			return scriptTouch.Run(ctx, c.q.rdb, []string{c.q.stream}, args...).StringSlice()
		},
		func(j *pool.Job[entry]) {
			c.claimsLost.Add(1)
			c.log.Warn("streamq: running job was taken over by another consumer; cancelling it here", "msg_id", j.Key)
			c.event(ctx, Event{Kind: EventClaimLost, ID: j.Key})
		},
		func(err error) { c.log.Warn("streamq: cannot refresh claims of running jobs", "error", err) })
}
