package priority

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/pool"
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
	// DefaultReapBatch is the most expired leases and due retries one reap
	// script moves from each set.
	DefaultReapBatch = 500
	// MaxPopBatch is the most jobs one pop leases.
	MaxPopBatch = 500
	// DefaultFinishBatch is the most finished jobs removed by one script.
	DefaultFinishBatch = 512

	// finishLinger is how long the finish loop waits for more finished jobs
	// before it sends a small batch; popGather is how long the pop loop waits
	// for half the handler slots to free up while a backlog exists.
	finishLinger = time.Millisecond
	popGather    = 500 * time.Microsecond
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

	// MaxDeliveries is the number of attempts (retries plus runs cut short
	// by crashes) after which a failing job is dead-lettered, as for
	// [streamq.ConsumerConfig.MaxDeliveries]. Defaults to
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
	h       streamq.Handler
	cfg     WorkerConfig
	bands   []band
	log     *slog.Logger
	running atomic.Bool

	processed, failed, retried, postponed, dead, expired, claimsLost, missing atomic.Int64
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
	return &Worker{
		pq:    pq,
		h:     streamq.Chain(h, c.Middleware...),
		cfg:   c,
		bands: bands,
		log:   log.With("queue", pq.q.Name(), "worker", c.Name),
	}, nil
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
	type dur struct {
		field string
		v     *time.Duration
		def   time.Duration
		off   bool // -1 allowed
	}
	for _, d := range []dur{
		{"Block", &c.Block, DefaultBlock, false},
		{"Lease", &c.Lease, DefaultLease, false},
		{"JobTimeout", &c.JobTimeout, DefaultJobTimeout, true},
		{"ShutdownTimeout", &c.ShutdownTimeout, DefaultShutdownTimeout, false},
		{"ReapInterval", &c.ReapInterval, DefaultReapInterval, true},
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
			return configErr(d.field, "%s is negative: %s (%s)", *d.v, hint, d.def)
		}
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
	return WorkerStats{
		Processed:    w.processed.Load(),
		Failed:       w.failed.Load(),
		Retried:      w.retried.Load(),
		Postponed:    w.postponed.Load(),
		DeadLettered: w.dead.Load(),
		Expired:      w.expired.Load(),
		ClaimsLost:   w.claimsLost.Load(),
		Missing:      w.missing.Load(),
	}
}

// Run runs jobs until ctx is cancelled, then shuts down gracefully: it stops
// taking jobs at once (also while it waits for work), lets running handlers
// finish for up to ShutdownTimeout (their contexts are detached from ctx),
// then cancels them with cause [streamq.ErrShutdown], waits for every handler
// goroutine to return, removes the finished jobs and returns. A job whose
// handler returned because of the shutdown goes back to the ready set at
// once, without charging an attempt; a job whose handler did not finish
// keeps its lease until it returns. No job is ever put back while its
// handler may still be running.
//
// Run returns nil after a shutdown caused by ctx, and an error only when
// Redis answers with one that retrying cannot fix (wrong key type, missing
// permission). Transient Redis errors are logged and retried with backoff.
// Run composes with errgroup. A Worker runs at most once at a time.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer w.running.Store(false)

	r := newRun(w, ctx)

	finDone := make(chan struct{})
	go func() {
		defer close(finDone)
		pool.Batch(r.finishes, DefaultFinishBatch, min(w.cfg.Concurrency, DefaultFinishBatch), finishLinger, r.flushFinishes)
	}()
	kaCtx, stopKA := context.WithCancel(context.WithoutCancel(ctx))
	kaDone := make(chan struct{})
	go func() { defer close(kaDone); r.keepAlive(kaCtx) }()

	g, gctx := errgroup.WithContext(ctx)
	// A cancelled Run must not wait out a blocked XREAD: wake it.
	wakeDone := make(chan struct{})
	stopWake := context.AfterFunc(gctx, func() { defer close(wakeDone); r.wakeIfWaiting() })
	g.Go(func() error { return r.popLoop(gctx) })
	if w.cfg.ReapInterval > 0 {
		g.Go(func() error { return r.reapLoop(gctx) })
	}
	err := g.Wait()
	if !stopWake() {
		<-wakeDone
	}

	r.pool.Drain(func(running int) {
		w.log.Warn("priority: shutdown timeout, cancelling running jobs; each is handed back once its handler returns", "running", running, "timeout", w.cfg.ShutdownTimeout)
	})
	r.pool.Close()
	close(r.finishes)
	<-finDone // leases of finished jobs stay fresh until they are removed
	stopKA()
	<-kaDone
	return err
}

// run is the state of one Run call.
type run struct {
	w        *Worker
	pool     *pool.Pool[item] // jobs by lease member: every job whose lease this run holds
	finishes chan *pool.Job[item]
	waiting  atomic.Bool // the pop loop waits for a wake-up

	// Owned by the pop loop.
	runID   string
	pops    uint64
	credits []int64
}

func newRun(w *Worker, ctx context.Context) *run {
	r := &run{
		w:        w,
		finishes: make(chan *pool.Job[item], 2*w.cfg.Concurrency),
		runID:    randHex(3),
		credits:  make([]int64, len(w.bands)),
	}
	r.pool = pool.New(ctx, pool.Config{
		Concurrency:     w.cfg.Concurrency,
		ShutdownTimeout: w.cfg.ShutdownTimeout,
		ShutdownCause:   streamq.ErrShutdown,
		LostCause:       streamq.ErrClaimLost,
		JobTimeout:      max(w.cfg.JobTimeout, 0),
		TimeoutCause:    streamq.ErrJobTimeout,
	}, r.process)
	return r
}

// item is a leased job.
type item struct {
	id         string
	prio       int    // from the member's score
	data       string // packed fields, decoded by fields
	deliveries int
}

// popLoop leases jobs, never more than there are free handler slots, and
// waits for a wake-up when there are none.
func (r *run) popLoop(ctx context.Context) error {
	w := r.w
	var bo pool.Backoff
	full := false // the last pop leased as many jobs as it asked for
	most := int64(min(w.cfg.Concurrency, MaxPopBatch))
	for {
		// While a backlog is likely, wait briefly for three quarters of the
		// slots rather than pop one or two jobs at a time.
		n, err := r.pool.Slots(ctx, most, full, most*3/4, popGather)
		if err != nil {
			return nil // ctx cancelled
		}
		if ctx.Err() != nil {
			r.pool.Release(n)
			return nil
		}
		res, err := r.pop(ctx, n)
		if err != nil {
			r.pool.Release(n)
			full = false
			if ctx.Err() != nil {
				return nil
			}
			if pool.Fatal(err) {
				return err
			}
			w.log.WarnContext(ctx, "priority: pop failed, retrying", "error", err, "retry_in", bo.Peek())
			if !bo.Wait(ctx) {
				return nil
			}
			continue
		}
		bo.Reset()
		if res.missing > 0 {
			w.missing.Add(res.missing)
			w.log.ErrorContext(ctx, "priority: jobs in the ready set had no data (deleted by someone else); they are lost", "count", res.missing)
		}
		var alone []*pool.Job[item]
		for _, it := range res.jobs {
			j := r.pool.Register(it.lease, it.item)
			if w.cfg.Concurrency > 1 && streamq.LastAttemptAfterCrash(j.Val.fields(), j.Val.deliveries, w.cfg.MaxDeliveries) {
				w.log.Info("priority: job whose earlier runs were cut short makes its last attempt alone", "job_id", j.Val.id, "deliveries", j.Val.deliveries)
				alone = append(alone, j)
				continue
			}
			r.pool.Launch(j, 1) // owns one of the n slots
		}
		r.pool.Release(n - int64(len(res.jobs)-len(alone)))
		full = int64(len(res.jobs)) == n
		if !r.pool.RunAlone(ctx, alone, r.handBack) {
			return nil
		}
		if len(res.jobs) == 0 && res.missing == 0 {
			if !r.waitForWork(ctx, res.notify, &bo) {
				return nil
			}
		}
	}
}

// fields decodes the job's data. Data that cannot be decoded is returned
// under "data", so that the job is dead-lettered as malformed with it.
func (it item) fields() map[string]any {
	f, err := unpackFields(it.data)
	if err != nil {
		return map[string]any{"data": it.data}
	}
	return f
}

// popResult is what one pop script returned.
type popResult struct {
	notify  string // newest wake-up entry, when the ready set was empty
	missing int64
	jobs    []leased
}

// leased is a job one pop leased.
type leased struct {
	lease string // lease member
	item
}

// pop leases up to n jobs. The script runs to completion even if ctx is
// cancelled meanwhile, so a shutdown does not strand leased jobs.
func (r *run) pop(ctx context.Context, n int64) (popResult, error) {
	w := r.w
	pq := w.pq
	r.pops++
	prefix := w.cfg.Name + ":" + r.runID + "." + strconv.FormatUint(r.pops, 36) + ":"
	keys := []string{pq.keys.ready, pq.keys.leases, pq.keys.jobs, pq.keys.deliveries, pq.keys.notify}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	args := make([]any, 0, 4+4*len(w.bands))
	args = append(args, w.cfg.Lease.Milliseconds(), n, prefix)
	var (
		res []any
		err error
	)
	if len(w.bands) == 0 {
		res, err = scriptPop.Run(pctx, pq.q.Client(), keys, args...).Slice()
	} else {
		args = append(args, len(w.bands))
		for i, b := range w.bands {
			args = append(args, b.lo, b.hi, b.weight, r.credits[i])
		}
		res, err = scriptPopWeighted.Run(pctx, pq.q.Client(), keys, args...).Slice()
	}
	if err != nil {
		return popResult{}, fmt.Errorf("priority: pop from %s: %w", pq.keys.ready, err)
	}
	return r.parsePop(res)
}

// parsePop decodes a pop script's reply: {notify ID, missing, credits,
// lease member, deliveries, data, ...}. The jobs' data is decoded later, by
// their own goroutines, off the pop loop.
func (r *run) parsePop(res []any) (popResult, error) {
	var out popResult
	if len(res) < 3 || (len(res)-3)%3 != 0 {
		return out, fmt.Errorf("priority: unexpected pop reply with %d elements", len(res))
	}
	out.notify, _ = res[0].(string)
	out.missing, _ = res[1].(int64)
	if credits, ok := res[2].([]any); ok && len(credits) == len(r.credits) {
		for i, c := range credits {
			r.credits[i], _ = c.(int64)
		}
	}
	for i := 3; i+2 < len(res); i += 3 {
		lm, _ := res[i].(string)
		d, _ := res[i+1].(int64)
		data, _ := res[i+2].(string)
		id, score := parseLease(lm)
		p := int(score)
		if !r.w.pq.cfg.LowerFirst {
			p = int(-score)
		}
		out.jobs = append(out.jobs, leased{lease: lm, item: item{id: id, prio: p, data: data, deliveries: int(d)}})
	}
	return out, nil
}

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

// waitForWork blocks until a wake-up entry newer than from arrives, Block
// passes, or ctx is cancelled (Run wakes the read then). It reports false
// when ctx ended.
func (r *run) waitForWork(ctx context.Context, from string, bo *pool.Backoff) bool {
	w := r.w
	r.waiting.Store(true)
	defer r.waiting.Store(false)
	// Checked after waiting is set, and Run's wake-up checks waiting after
	// ctx is cancelled: one of the two sees the other.
	if ctx.Err() != nil {
		return false
	}
	err := w.pq.q.Client().XRead(ctx, &redis.XReadArgs{
		Streams: []string{w.pq.keys.notify, from},
		Count:   1,
		Block:   w.cfg.Block,
	}).Err()
	if err == nil || errors.Is(err, redis.Nil) {
		bo.Reset()
		return ctx.Err() == nil
	}
	if ctx.Err() != nil {
		return false
	}
	w.log.WarnContext(ctx, "priority: waiting for work failed, retrying", "error", err, "retry_in", bo.Peek())
	return bo.Wait(ctx)
}

// wakeIfWaiting ends the pop loop's blocked XREAD by appending a wake-up
// entry. Other idle workers of the queue wake up too, look for work and wait
// again.
func (r *run) wakeIfWaiting() {
	if !r.waiting.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := r.w.pq.q.Client().XAdd(ctx, &redis.XAddArgs{
		Stream: r.w.pq.keys.notify, MaxLen: 100, Approx: true, Values: []any{"w", "0"},
	}).Err()
	if err != nil {
		r.w.log.Debug("priority: cannot wake the pop loop; it notices the shutdown within Block", "error", err)
	}
}

// process runs the handler for one job and settles the outcome: finish,
// retry, or dead letter. It reports true when the job went to the finish
// loop, which unregisters it once removed.
func (r *run) process(j *pool.Job[item]) bool {
	w := r.w
	msg, err := streamq.DecodeMessage(w.pq.q.Name(), j.Val.id, j.Val.fields(), j.Val.deliveries)
	if err != nil {
		r.pool.Settle(j)
		r.deadLetter(j, msg, streamq.ReasonMalformed, err, max(j.Val.deliveries, 1))
		return false
	}
	msg.Headers[HeaderPriority] = strconv.Itoa(j.Val.prio)
	if v, cause, over := streamq.Exhausted(msg, w.cfg.MaxDeliveries); over {
		r.pool.Settle(j)
		r.deadLetter(j, msg, v.Reason, cause, v.Attempts)
		return false
	}
	var jctx context.Context = j // cancelled on timeout, lost claim or shutdown
	err = streamq.CallHandler(jctx, w.h, msg)
	r.pool.Settle(j)
	if err == nil {
		w.processed.Add(1)
		r.finishes <- j // the finish loop unregisters it once removed
		return true
	}
	cause := context.Cause(jctx)
	switch {
	case errors.Is(cause, streamq.ErrClaimLost):
		// Its lease expired and the job is back in the ready set or runs
		// elsewhere; whoever runs it next settles it.
		w.failed.Add(1)
		w.log.Info("priority: job failed after its lease was lost; leaving it to its next run", "job_id", j.Val.id, "error", err)
	case errors.Is(cause, streamq.ErrShutdown):
		// The handler stopped because of the shutdown: hand the job back at
		// once without charging an attempt. Its handler has returned, so it
		// cannot run twice.
		w.failed.Add(1)
		r.retry(j, msg, err, streamq.Verdict{Postponed: true}, streamq.EventRetried)
	default:
		r.fail(j, msg, err)
	}
	return false
}

// fail retries, postpones or dead-letters a failed attempt, as
// [streamq.Decide] says.
func (r *run) fail(j *pool.Job[item], msg *streamq.Message, err error) {
	v := streamq.Decide(msg, err, r.w.cfg.MaxDeliveries, r.w.cfg.Backoff)
	if !v.Postponed {
		r.w.failed.Add(1)
	}
	if v.DeadLetter {
		r.deadLetter(j, msg, v.Reason, err, v.Attempts)
		return
	}
	kind := streamq.EventRetried
	if v.Postponed {
		kind = streamq.EventPostponed
	}
	r.retry(j, msg, err, v, kind)
}

// handBack returns a leased job that did not run to the ready set at once,
// without charging an attempt.
func (r *run) handBack(j *pool.Job[item]) {
	defer r.pool.Unregister(j)
	r.pool.Settle(j)
	msg, err := streamq.DecodeMessage(r.w.pq.q.Name(), j.Val.id, j.Val.fields(), j.Val.deliveries)
	if err != nil {
		return // its lease expires; whoever pops it next dead-letters it
	}
	r.retry(j, msg, streamq.ErrShutdown, streamq.Verdict{Postponed: true}, streamq.EventRetried)
}

// retry moves the job from its lease to the delayed set (or the ready set,
// without delay) in one script, due after v.Delay; with v.Postponed the
// attempt is not charged (see [streamq.RetryFields]). kind is the event to
// report: streamq.EventRetried or streamq.EventPostponed. If Redis cannot be
// reached, the job keeps its lease until it expires, and then returns to the
// ready set.
func (r *run) retry(j *pool.Job[item], msg *streamq.Message, cause error, v streamq.Verdict, kind streamq.EventKind) {
	w := r.w
	pq := w.pq
	ms := (v.Delay + time.Millisecond - 1) / time.Millisecond
	args := []any{j.Key, int64(ms), packFields(streamq.RetryFields(msg, cause, !v.Postponed, time.Now()))}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	keys := []string{pq.keys.leases, pq.keys.ready, pq.keys.delayed, pq.keys.jobs, pq.keys.deliveries, pq.keys.notify}
	moved, err := scriptRetry.Run(ctx, pq.q.Client(), keys, args...).Int()
	switch {
	case err != nil:
		w.log.Error("priority: cannot schedule retry; the job returns to the ready set when its lease expires", "job_id", j.Val.id, "error", err)
	case moved == 0:
		w.log.Info("priority: job is held by another worker; leaving its retry to it", "job_id", j.Val.id)
	case kind == streamq.EventPostponed:
		w.postponed.Add(1)
		w.log.Debug("priority: job postponed", "job_id", j.Val.id, "retry_in", v.Delay, "reason", cause)
		w.event(ctx, streamq.Event{Kind: kind, ID: j.Val.id, Message: msg, Err: cause, Delay: v.Delay})
	default:
		w.retried.Add(1)
		w.log.Debug("priority: job failed, retrying", "job_id", j.Val.id, "attempt", msg.Attempts(), "retry_in", v.Delay, "error", cause)
		w.event(ctx, streamq.Event{Kind: kind, ID: j.Val.id, Message: msg, Err: cause, Delay: v.Delay})
	}
}

// deadLetter moves the job to the queue's dead-letter stream in one script.
// attempts is the number of attempts made, recorded in the dead letter. If
// Redis cannot be reached, the job keeps its lease until it expires, runs
// again and is dead-lettered then.
func (r *run) deadLetter(j *pool.Job[item], msg *streamq.Message, reason string, cause error, attempts int) {
	w := r.w
	pq := w.pq
	fields := streamq.DeadLetterFields(msg, reason, cause, attempts, time.Now())
	if reason != streamq.ReasonMalformed {
		fields = withHeaders(fields, msg.Headers)
	}
	args := append([]any{j.Key, pq.q.DeadLetterMaxLen()}, fields...)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	keys := []string{pq.keys.leases, pq.keys.ready, pq.keys.jobs, pq.keys.deliveries, pq.q.DeadLetterKey()}
	id, err := scriptDeadLetter.Run(ctx, pq.q.Client(), keys, args...).Text()
	switch {
	case errors.Is(err, redis.Nil):
		w.log.Info("priority: job is held by another worker; leaving its dead letter to it", "job_id", j.Val.id)
	case err != nil:
		w.log.Error("priority: cannot dead-letter job; it returns to the ready set when its lease expires", "job_id", j.Val.id, "reason", reason, "error", err)
	default:
		w.dead.Add(1)
		w.log.Warn("priority: job dead-lettered", "job_id", j.Val.id, "dead_letter_id", id, "reason", reason, "attempt", attempts, "error", cause)
		w.event(ctx, streamq.Event{Kind: streamq.EventDeadLettered, ID: j.Val.id, Message: msg, Err: cause, Reason: reason})
	}
}

// withHeaders sets the headers field of a dead letter's field list to
// headers, which hold the job's priority: the stored fields of a pushed job
// do not (its priority is its score), and a dead letter requeued into the
// stream must carry it to be forwarded at its priority again.
func withHeaders(fields []any, headers map[string]string) []any {
	h, err := json.Marshal(headers)
	if err != nil {
		return fields
	}
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "headers" {
			fields[i+1] = string(h)
			return fields
		}
	}
	return append(fields, "headers", string(h))
}

func (w *Worker) event(ctx context.Context, e streamq.Event) {
	if w.cfg.OnEvent != nil {
		e.Queue = w.pq.q.Name()
		w.cfg.OnEvent(ctx, e)
	}
}
