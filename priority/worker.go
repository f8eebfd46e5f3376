package priority

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
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
	Expired      int64 // expired leases this worker's reaper returned to the ready set
	ClaimsLost   int64 // running jobs whose lease expired, so they may run elsewhere
	Missing      int64 // ready jobs found without their data (deleted by someone else)
}

// Worker runs a [streamq.Handler] for the jobs of a priority [Queue], most
// urgent first, with the stream consumer's rules for retries, dead letters,
// panics, timeouts and shutdown. Create it with [NewWorker] and start it with
// [Worker.Run].
type Worker struct {
	pq      *Queue
	cfg     WorkerConfig
	bands   []band
	eng     engine.Runner
	mon     *engine.Monitor
	running atomic.Bool
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
	if err := c.setDefaults(); err != nil {
		return nil, err
	}
	bands, err := bandRanges(c.Bands, pq.cfg.LowerFirst)
	if err != nil {
		return nil, err
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	eng := pq.core.NewEngine(streamq.Chain(h, c.Middleware...), c.OnEvent, "", engine.Config{
		Queue:           pq.core.Name,
		Concurrency:     c.Concurrency,
		Block:           c.Block,
		JobTimeout:      max(c.JobTimeout, 0),
		ShutdownTimeout: c.ShutdownTimeout,
		TouchEvery:      max(c.Lease/4, 5*time.Millisecond),
		TouchTimeout:    min(c.Lease/2, opTimeout),
		MaxDeliveries:   c.MaxDeliveries,
		Backoff:         c.Backoff,
		FinishBatch:     finishBatch,
		ShutdownCause:   streamq.ErrShutdown,
		LostCause:       streamq.ErrClaimLost,
		TimeoutCause:    streamq.ErrJobTimeout,
		CancelCause:     streamq.ErrCancelled,
		Logger:          log.With("queue", pq.core.Name, "worker", c.Name),

		Client:          pq.core.RDB,
		Keys:            pq.core.Keys,
		ControlInterval: c.ControlInterval,
		ResultRetention: c.ResultRetention,
		MaxResultBytes:  c.MaxResultBytes,
		Heartbeat:       heartbeat(pq.core.Keys.Workers, c.Name),
	})
	return &Worker{pq: pq, cfg: c, bands: bands, eng: eng, mon: eng.Monitor()}, nil
}

func configErr(field, format string, args ...any) error {
	return &streamq.ConfigError{Field: "priority.WorkerConfig." + field, Reason: fmt.Sprintf(format, args...)}
}

func (c *WorkerConfig) setDefaults() error {
	if c.Name == "" {
		c.Name = defaultName()
	}
	if err := validName(c.Name); err != nil {
		return err
	}
	if err := core.Durations([]core.Duration{
		{Field: "Block", V: &c.Block, Def: DefaultBlock},
		{Field: "Lease", V: &c.Lease, Def: DefaultLease},
		{Field: "JobTimeout", V: &c.JobTimeout, Def: DefaultJobTimeout, Off: true},
		{Field: "ShutdownTimeout", V: &c.ShutdownTimeout, Def: DefaultShutdownTimeout},
		{Field: "ReapInterval", V: &c.ReapInterval, Def: DefaultReapInterval, Off: true},
		{Field: "ControlInterval", V: &c.ControlInterval, Def: streamq.DefaultControlInterval},
		{Field: "ResultRetention", V: &c.ResultRetention, Def: streamq.DefaultResultRetention},
	}, configErr); err != nil {
		return err
	}
	if err := core.Control(c.ControlInterval, streamq.MinControlInterval, streamq.DefaultControlInterval,
		c.ResultRetention, streamq.DefaultResultRetention, configErr); err != nil {
		return err
	}
	if err := core.Sizes([]core.Bytes{
		{Field: "MaxResultBytes", V: &c.MaxResultBytes, Def: streamq.DefaultMaxResultBytes},
		{Field: "MaxFetchBytes", V: &c.MaxFetchBytes, Def: streamq.DefaultMaxFetchBytes},
	}, configErr); err != nil {
		return err
	}
	if c.Block < time.Millisecond {
		return configErr("Block", "%s is below 1ms, which Redis reads as 'block forever': use at least 1ms (default %s)", c.Block, DefaultBlock)
	}
	if c.Lease < minLease {
		return configErr("Lease", "%s is too short for running jobs to extend their leases in time: use at least %s (default %s)", c.Lease, minLease, DefaultLease)
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Concurrency < 0 {
		return configErr("Concurrency", "%d is negative: use a positive number of handler goroutines, or 0 for %d", c.Concurrency, DefaultConcurrency)
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = DefaultMaxDeliveries
	}
	if c.MaxDeliveries < 0 {
		return configErr("MaxDeliveries", "%d is negative: use a positive number of attempts, or 0 for %d", c.MaxDeliveries, DefaultMaxDeliveries)
	}
	if c.Backoff == nil {
		c.Backoff = streamq.DefaultBackoff
	}
	for i, m := range c.Middleware {
		if m == nil {
			return configErr(fmt.Sprintf("Middleware[%d]", i), "is nil: remove it")
		}
	}
	return nil
}

// validName accepts 1..200 bytes of printable ASCII without spaces, braces or
// '|' (which separates a lease token from the job's member).
func validName(s string) error {
	if len(s) > streamq.MaxNameLen {
		return configErr("Name", "is %d bytes long: use at most %d", len(s), streamq.MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch <= ' ' || ch >= 0x7f || ch == '{' || ch == '}' || ch == '|' {
			return configErr("Name", "%q contains %q at byte %d: use letters, digits and punctuation other than '{', '}' and '|', without spaces", s, ch, i)
		}
	}
	return nil
}

func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	name := fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randHex(4))
	if validName(name) != nil { // exotic host names
		name = fmt.Sprintf("worker-%d-%s", os.Getpid(), randHex(4))
	}
	return name
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// Name returns the worker's name.
func (w *Worker) Name() string { return w.cfg.Name }

// Queue returns the worker's priority queue.
func (w *Worker) Queue() *Queue { return w.pq }

// Stats returns the worker's counters.
func (w *Worker) Stats() WorkerStats {
	s := w.mon.Stats()
	return WorkerStats{
		Processed:    s.Processed,
		Failed:       s.Failed,
		Retried:      s.Retried,
		Postponed:    s.Postponed,
		DeadLettered: s.DeadLettered,
		Expired:      s.Reclaimed,
		ClaimsLost:   s.ClaimsLost,
		Missing:      s.Deleted,
	}
}

// Health reports the state of the worker's run, for readiness and liveness
// probes.
func (w *Worker) Health() streamq.Health { return streamq.Health(w.mon.Health()) }

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
	if !w.running.CompareAndSwap(false, true) {
		return streamq.ErrRunning
	}
	defer w.running.Store(false)
	return w.eng.Run(ctx, &backend{w: w, pq: w.pq, run: randHex(3), credits: make([]int64, len(w.bands)), budget: engine.NewFetchBudget(w.cfg.MaxFetchBytes)})
}

// backend is the engine's backend for a priority set (see engine.Backend).
// One exists per Run.
//
// Attempts: a lease counts as a handler start, and the reaper counts a
// lease that expires as a start cut short by a crash (the job's delivery
// counter). A job leased but made to wait (it must run alone) is marked
// waiting, so that its lease expires without counting anything, until the
// engine charges it right before it runs.
type backend struct {
	w  *Worker
	pq *Queue

	waiting atomic.Bool // Fetch waits for a wake-up

	// Owned by the fetch loop.
	run     string
	pops    uint64
	credits []int64
	budget  *engine.FetchBudget
}

// Start warns when Redis may evict keys (see core.Queue.WarnEvictionPolicy).
func (b *backend) Start(ctx context.Context) error {
	b.pq.core.WarnEvictionPolicy(ctx, b.w.mon.Log)
	err := rdb.Register(ctx, b.pq.core.RDB, b.pq.core.Prefix, b.pq.core.Name, rdb.KindPriority)
	if err != nil && !rdb.IsOOM(err) {
		return fmt.Errorf("priority: register queue %s: %w", b.pq.core.Name, err)
	}
	return nil
}

// workerForget is how long a worker that stopped sending heartbeats stays
// in the queue's workers set.
const workerForget = 24 * time.Hour

// heartbeat returns the control loop's addition: the worker's last-seen
// time in the workers set, and the removal of workers silent for a day.
func heartbeat(key, name string) func(redis.Pipeliner) {
	return func(pipe redis.Pipeliner) {
		ctx := context.Background()
		now := time.Now()
		pipe.ZAdd(ctx, key, redis.Z{Score: float64(now.UnixMilli()), Member: name})
		pipe.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(now.Add(-workerForget).UnixMilli(), 10))
	}
}

// Fetch leases up to n jobs and waits for a wake-up when there are none.
// The pop script runs to completion even if ctx is cancelled meanwhile, so
// a shutdown does not strand leased jobs; a pop re-sent after a lost reply
// returns the same jobs (its token prefix is unique to the call).
func (b *backend) Fetch(ctx context.Context, n int, wait time.Duration, _ func(string) bool) (_ []engine.Delivery, err error) {
	defer func() { rdb.Heal(ctx, b.pq.core.RDB, err) }() // on Cluster, find a failed-over master at once
	w := b.w
	b.pops++
	prefix := w.cfg.Name + ":" + b.run + "." + strconv.FormatUint(b.pops, 36) + ":"
	var bands []any
	if len(w.bands) > 0 {
		bands = make([]any, 0, 4*len(w.bands))
		for i, bd := range w.bands {
			bands = append(bands, bd.lo, bd.hi, bd.weight, b.credits[i])
		}
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	res, err := rdb.Pop(pctx, b.pq.core.RDB, b.pq.keys, b.run, w.cfg.Lease.Milliseconds(), int64(b.budget.Count(min(n, MaxPopBatch))), prefix, bands)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("priority: pop from %s: %w", b.pq.keys.Ready, err)
	}
	if len(res.Credits) == len(b.credits) {
		copy(b.credits, res.Credits)
	}
	if res.Missing > 0 {
		w.mon.Log.ErrorContext(ctx, "priority: jobs in the ready set had no data (deleted by someone else); they are lost", "count", res.Missing)
		for range res.Missing {
			w.mon.Event(ctx, engine.Event{Kind: engine.EventDeleted})
		}
	}
	if len(res.Jobs) == 0 {
		if res.Missing == 0 {
			return nil, b.waitForWork(ctx, res.Notify, wait)
		}
		return nil, nil
	}
	ds := make([]engine.Delivery, len(res.Jobs))
	var largest int64
	for i, p := range res.Jobs {
		largest = max(largest, int64(len(p.Data)))
		id, score := parseLease(p.Lease)
		prio := int(score)
		if !b.pq.cfg.LowerFirst {
			prio = int(-score)
		}
		ds[i] = engine.Delivery{
			Key:     p.Lease,
			ID:      id,
			Packed:  p.Data,
			Prior:   p.Count,
			Charged: true,
			Suspect: p.Count > 0 || strings.Contains(p.Data, crashedMark),
			Headers: map[string]string{HeaderPriority: strconv.Itoa(prio)},
		}
	}
	b.budget.Observe(largest)
	return ds, nil
}

// crashedMark is how the crashed field and its value "1" look in packed
// data (two MessagePack fixstr): a match inside a payload only costs a
// decode of the job's attempt field.
const crashedMark = "\xa7crashed\xa11"

// parseLease returns the job ID and score in a lease member
// "<seq>:<score>:<id>|<token>".
func parseLease(lm string) (id string, score int64) {
	if i := strings.LastIndexByte(lm, '|'); i >= 0 {
		lm = lm[:i]
	}
	parts := strings.SplitN(lm, ":", 3)
	if len(parts) < 3 {
		return lm, 0
	}
	score, _ = strconv.ParseInt(parts[1], 10, 64)
	return parts[2], score
}

// waitForWork blocks until a wake-up entry newer than from arrives, wait
// passes, or ctx is cancelled (Wake ends the read then).
func (b *backend) waitForWork(ctx context.Context, from string, wait time.Duration) error {
	b.waiting.Store(true)
	defer b.waiting.Store(false)
	// Checked after waiting is set, and Wake checks waiting after ctx is
	// cancelled: one of the two sees the other.
	if ctx.Err() != nil {
		return nil
	}
	err := b.pq.core.RDB.XRead(ctx, &redis.XReadArgs{
		Streams: []string{b.pq.keys.Notify, from},
		Count:   1,
		Block:   wait,
	}).Err()
	if err == nil || errors.Is(err, redis.Nil) || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("priority: wait for work on %s: %w", b.pq.keys.Notify, err)
}

// Wake ends a blocked wait for work by appending a wake-up entry. Other
// idle workers of the queue wake up too, look for work and wait again.
func (b *backend) Wake() {
	if !b.waiting.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := b.pq.core.RDB.XAdd(ctx, &redis.XAddArgs{
		Stream: b.pq.keys.Notify, MaxLen: 100, Approx: true, Values: []any{"w", "0"},
	}).Err()
	if err != nil {
		b.w.mon.Log.Debug("priority: cannot wake the worker; it notices the shutdown within Block", "error", err)
	}
}

// Charge marks the lease charged (its expiry counts a crashed start) or
// waiting (its expiry counts nothing).
func (b *backend) Charge(ctx context.Context, d *engine.Delivery, charge bool) (bool, error) {
	return rdb.MarkWaiting(ctx, b.pq.core.RDB, b.pq.keys, d.Key, !charge)
}

// Touch extends the leases of held jobs.
func (b *backend) Touch(ctx context.Context, leases []string) ([]string, error) {
	return rdb.KeepAlive(ctx, b.pq.core.RDB, b.pq.keys, b.w.cfg.Lease.Milliseconds(), leases)
}

// Finish removes finished jobs.
func (b *backend) Finish(ctx context.Context, done []engine.Finished) error {
	leases := make([]string, len(done))
	ids := make([]string, len(done))
	for i, f := range done {
		leases[i], ids[i] = f.Key, f.ID
	}
	_, left, err := rdb.Finish(ctx, b.pq.core.RDB, b.pq.keys, leases, ids)
	if err == nil && left > 0 {
		b.w.mon.Log.Info("priority: finished jobs had expired leases and are held by other workers now; they run again there", "count", left)
	}
	return err
}

// Move puts the job back with new fields: into the delayed set, or straight
// into the ready set without delay; either way with its priority and place.
func (b *backend) Move(ctx context.Context, d *engine.Delivery, fields []any, delay time.Duration, st rdb.Settle) (bool, error) {
	ms := int64((delay + time.Millisecond - 1) / time.Millisecond)
	return rdb.Retry(ctx, b.pq.core.RDB, b.pq.keys, d.Key, ms, wire.Pack(fields), st)
}

// DeadLetter moves the job to the queue's dead-letter stream.
func (b *backend) DeadLetter(ctx context.Context, d *engine.Delivery, _, _ string, st rdb.Settle, fields []any) (string, error) {
	return rdb.PriorityDeadLetter(ctx, b.pq.core.RDB, b.pq.core.Keys, b.pq.keys, d.Key, b.pq.core.DeadLetterMaxLen, st, fields)
}

// DropCancels removes cancel requests of jobs whose data is gone.
func (b *backend) DropCancels(ctx context.Context, ids []string) error {
	_, err := rdb.PriorityDropCancels(ctx, b.pq.core.RDB, b.pq.keys, ids)
	return err
}

// Abandon does nothing: the lease expires and the reaper returns the job.
func (b *backend) Abandon(string) {}

// Loops returns the reaper of expired leases and due retries.
func (b *backend) Loops() []engine.Loop {
	if b.w.cfg.ReapInterval <= 0 {
		return nil
	}
	return []engine.Loop{{Name: "reap expired leases and due retries", Every: b.w.cfg.ReapInterval, Do: b.reap}}
}

// reap returns expired leases and due retries to the ready set. Any number
// of workers may run it; the script moves each job exactly once.
func (b *backend) reap(ctx context.Context) (bool, error) {
	ids, due, err := rdb.Reap(ctx, b.pq.core.RDB, b.pq.keys, reapBatch)
	if err != nil {
		return false, err
	}
	if len(ids) > 0 {
		b.w.mon.Log.InfoContext(ctx, "priority: returned jobs with expired leases to the ready set (their worker died, hung or lost Redis)", "count", len(ids))
		for _, id := range ids {
			b.w.mon.Event(ctx, engine.Event{Kind: engine.EventReclaimed, ID: id})
		}
	}
	return len(ids) == reapBatch || due == reapBatch, nil
}
