// Package engine runs jobs: from the moment a backend hands one over to its
// outcome. It decodes the job, checks its attempts, runs the handler with
// its timeout (panics are recovered by the caller's [Exec]), and settles the
// outcome: acknowledge, retry with backoff, postpone, dead-letter, or hand
// back on shutdown. It keeps the claims of held jobs fresh, runs a job
// whose earlier runs crashed alone at its last attempt, drains on shutdown,
// and reports events and counters.
//
// The stream consumer (package streamq) and the priority worker (package
// priority) are this engine with two backends; what differs between them is
// only the Redis calls of a [Backend].
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq/internal/pool"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/testsignal"
	"github.com/streamq/streamq/internal/wire"
)

// Dead-letter reasons, stored in the dl_reason field. The root package
// exports the same values.
const (
	ReasonMaxDeliveries = "max_deliveries"
	ReasonPermanent     = "permanent"
	ReasonMalformed     = "malformed"
	ReasonCancelled     = "cancelled"
	ReasonDeadline      = "deadline"
	ReasonUnknownKind   = "unknown_kind"
)

const (
	// finishLinger is how long the finish loop waits for more finished jobs
	// before it settles a small batch.
	finishLinger = time.Millisecond
	// fetchGather is how long the fetch loop waits for every handler slot
	// to free up while a backlog exists.
	fetchGather = 500 * time.Microsecond
	// opTimeout bounds one settlement call (finish, retry, dead letter,
	// charge), including during shutdown.
	opTimeout = 5 * time.Second
	// loopBatches bounds how often a maintenance loop runs in one tick.
	loopBatches = 100
	// settleFor bounds how long a settlement (finish, retry, dead letter,
	// charge) that fails with an error Redis clears by itself keeps its job
	// held and tries again: while a slot migrates, every multi-key script
	// whose keys are not all on one node gets TRYAGAIN until the last key
	// has moved, and a failover takes cluster-node-timeout plus seconds.
	// Past it (or once the run stops) the job is left to be taken over.
	settleFor = 30 * time.Second
	// maxOOMTries bounds the tries of a move that Redis refuses for want of
	// memory (see moveAtOOM): about 14 hours at the backoff's 5 s.
	maxOOMTries = 10_000
)

// Exec is what the engine needs from the package that owns the handler: how
// to run it and what its errors mean. F is that package's state of one run
// (its message), kept in the same allocation as the engine's.
type Exec[F any] interface {
	// Call runs the handler for r with ctx, recovering panics. f is zero.
	// r is passed by value, so that a run costs no allocation of its own.
	Call(ctx context.Context, r Run, f *F) error
	// Classify says what a handler error asks for.
	Classify(err error) Outcome
}

// Run is one run of a job, as the handler sees it.
type Run struct {
	Queue   string
	ID      string
	Job     wire.Job
	Headers map[string]string // the job's headers and the backend's (Delivery.Headers)
	// Attempt is this run's number: the starts charged to the job before it,
	// plus one.
	Attempt int
}

// OutcomeKind is what a handler error asks for.
type OutcomeKind int

// Outcomes.
const (
	Fail       OutcomeKind = iota // retry with backoff, until MaxDeliveries
	Permanent                     // dead-letter at once
	RetryAfter                    // retry after Outcome.Delay, until MaxDeliveries
	Postpone                      // run again after Outcome.Delay without charging the attempt
	Malformed                     // dead-letter at once with ReasonMalformed (args that do not decode)
	// UnknownKind hands the job back with backoff without charging the
	// attempt, counting the hand-back in its uk field; after the job's
	// attempt budget of them it is dead-lettered with ReasonUnknownKind.
	UnknownKind
)

// Outcome is a classified handler error.
type Outcome struct {
	Kind  OutcomeKind
	Delay time.Duration
}

// Config configures an [Engine]. Every field must be set (the fronts apply
// their documented defaults).
type Config struct {
	Queue           string
	Concurrency     int
	Block           time.Duration // how long one fetch waits for work
	JobTimeout      time.Duration // 0: none
	ShutdownTimeout time.Duration
	// TouchEvery is how often held jobs' claims are refreshed, TouchTimeout
	// bounds one refresh.
	TouchEvery, TouchTimeout time.Duration
	MaxDeliveries            int
	Backoff                  func(attempt int) time.Duration
	FinishBatch              int

	ShutdownCause, LostCause, TimeoutCause error
	// CancelCause cancels a held job whose cancellation was requested; the
	// job is then dead-lettered with ReasonCancelled.
	CancelCause error

	// DB is the queue's Redis calls, for the control loop (pause and cancel
	// requests, throughput counters) and the handlers' progress and results
	// (nil: none of these; tests of the engine alone).
	DB *rdb.Queue
	// ControlInterval is how often the control loop reads the pause flag and
	// the cancel requests (0: never; tests of the engine alone).
	ControlInterval time.Duration
	// Heartbeat, if not empty, is the name under which each control tick
	// records the run as alive in the queue's workers set, with the record
	// HeartbeatInfo (JSON of rdb.Heartbeat); the run leaves the set when it
	// ends.
	Heartbeat, HeartbeatInfo string
	// StartLease, with Heartbeat, makes each control tick take or renew
	// the run's start lease (see rdb.StartLease), which lets the backend's
	// reads skip the look at the pause flag (see Monitor.HoldLease).
	StartLease bool
	// ResultRetention is how long progress and results are kept;
	// MaxResultBytes bounds a result.
	ResultRetention time.Duration
	MaxResultBytes  int64

	Logger  *slog.Logger
	OnEvent func(ctx context.Context, e Event) // may be nil

	// Gate, if set, is the engine's part of a budget of slots shared with
	// the engines of other queues (see [Share]); Concurrency is then the
	// queue's limit within it. nil: the engine has its own budget.
	Gate *Member
}

// A Waiter is a backend that can wait for work without holding anything.
// A gated engine (Config.Gate) fetches from such a backend with wait 0, so
// that the fetch does not block while it holds slots of the share, and
// when a fetch came back empty it waits with WaitForWork, holding none.
type Waiter interface {
	// WaitForWork returns when the backend may have jobs to fetch, after
	// at most wait, or when ctx ends (Wake ends it then).
	WaitForWork(ctx context.Context, wait time.Duration) error
}

// Runner is an [Engine] whatever its front's type.
type Runner interface {
	// Run runs jobs of b until ctx is cancelled; see [Engine.Run].
	Run(ctx context.Context, b Backend) error
	// Monitor is where the engine and its backends report.
	Monitor() *Monitor
	// Offline returns a runner of the same handler and rules that never
	// talks to Redis itself (see [Engine.Offline]).
	Offline() Runner
	// Gated returns a runner of the same handler and rules that takes its
	// slots from m too (see [Engine.Gated]).
	Gated(m *Member, limit int) Runner
}

// Engine runs jobs of one backend at a time; see [Engine.Run].
type Engine[F any] struct {
	cfg  Config
	exec Exec[F]
	mon  *Monitor
	// recordLatency makes runs record wait and run times even without a
	// control loop to write them (benchmarks of the recording).
	recordLatency bool
}

// New returns an engine that runs handlers with x.
func New[F any](cfg Config, x Exec[F]) *Engine[F] {
	mon := NewMonitor(cfg.Queue, cfg.Logger, cfg.OnEvent)
	mon.concurrency = cfg.Concurrency
	return &Engine[F]{cfg: cfg, exec: x, mon: mon}
}

// Monitor returns the engine's monitor.
func (e *Engine[F]) Monitor() *Monitor { return e.mon }

// Offline returns an engine with the same handler, rules and monitor that
// never talks to Redis itself: no control loop and no throughput counts, and
// SetProgress and SetResult in its handlers return ErrNotHandler. Only its
// backend does Redis calls; streamqtest runs it on an in-memory one.
func (e *Engine[F]) Offline() Runner {
	cfg := e.cfg
	cfg.DB = nil
	return &Engine[F]{cfg: cfg, exec: e.exec, mon: e.mon}
}

// Gated returns an engine with the same handler, rules and monitor that
// runs at most limit jobs at once and takes a slot of m's share for every
// job besides (see [Config.Gate]).
func (e *Engine[F]) Gated(m *Member, limit int) Runner {
	cfg := e.cfg
	cfg.Gate, cfg.Concurrency = m, limit
	return &Engine[F]{cfg: cfg, exec: e.exec, mon: e.mon}
}

// Run fetches and runs jobs from b until ctx is cancelled, then drains:
// it stops fetching at once, lets running handlers finish for up to
// ShutdownTimeout (their contexts are detached from ctx), then cancels them
// with ShutdownCause, waits for every handler to return, hands back the jobs
// that waited to run alone, settles what finished and returns. It returns
// nil after a shutdown caused by ctx, and an error only when Redis answers
// with one that retrying cannot fix.
func (e *Engine[F]) Run(ctx context.Context, b Backend) error {
	// The finish queue holds a full batch: handlers never wait for a flush
	// that lingers.
	r := &run[F]{cfg: e.cfg, exec: e.exec, mon: e.mon, b: b,
		fins: pool.NewBatcher[finished[F]](max(2*e.cfg.Concurrency, e.cfg.FinishBatch), min(e.cfg.Concurrency, e.cfg.FinishBatch))}
	r.sig = testsignal.From(ctx)
	r.stop = make(chan struct{})
	if e.cfg.ControlInterval > 0 && e.cfg.DB != nil || e.recordLatency {
		r.lat = new(latency)
		r.sysClock = e.cfg.DB == nil || e.cfg.DB.SystemClock()
	}
	// Handlers reach the config through their context (SetProgress,
	// SetResult): one value for the run, nothing per job.
	r.pool = pool.New(context.WithValue(ctx, cfgKey{}, &r.cfg), pool.Config{
		Concurrency:     e.cfg.Concurrency,
		ShutdownTimeout: e.cfg.ShutdownTimeout,
		ShutdownCause:   e.cfg.ShutdownCause,
		LostCause:       e.cfg.LostCause,
		JobTimeout:      e.cfg.JobTimeout,
		TimeoutCause:    e.cfg.TimeoutCause,
	}, r.work)
	e.mon.running.Store(true)
	e.mon.stopping.Store(false)
	e.mon.paused.Store(false)
	e.mon.lease.revoke() // an earlier run's lease was given back when it ended
	held := r.pool.Len
	e.mon.held.Store(&held)
	defer e.mon.running.Store(false)

	finDone := make(chan struct{})
	go func() {
		defer close(finDone)
		r.fins.Run(e.cfg.FinishBatch, finishLinger, r.flush)
	}()
	kaCtx, stopKA := context.WithCancel(context.WithoutCancel(ctx))
	kaDone := make(chan struct{})
	go func() { defer close(kaDone); r.keepAlive(kaCtx) }()

	g, gctx := errgroup.WithContext(ctx)
	wakeDone := make(chan struct{})
	stopWake := context.AfterFunc(gctx, func() { defer close(wakeDone); b.Wake() })
	g.Go(func() error { return r.fetchLoop(gctx) })
	if e.cfg.ControlInterval > 0 && e.cfg.DB != nil {
		g.Go(func() error { r.control(gctx); return nil })
	}
	for _, l := range b.Loops() {
		g.Go(func() error { return r.loop(gctx, l) })
	}
	err := g.Wait()
	close(r.stop)
	if !stopWake() {
		<-wakeDone
	}
	e.mon.stopping.Store(true)

	r.pool.Drain(func(running int) {
		e.mon.Log.Warn("streamq: shutdown timeout, cancelling running jobs; each is handed back once its handler returns", "running", running, "timeout", e.cfg.ShutdownTimeout)
	})
	r.handBackWaiting()
	r.pool.Close()
	r.fins.Close()
	<-finDone // claims of finished jobs stay fresh until they are settled
	r.flushCounts()
	stopKA()
	<-kaDone
	return err
}

// run is the state of one Run call.
type run[F any] struct {
	cfg  Config
	exec Exec[F]
	mon  *Monitor
	b    Backend
	pool *pool.Pool[slot[F]]
	fins *pool.Batcher[finished[F]]
	// flushDone and flushJobs are flush's buffers, owned by the finish loop.
	flushDone []Finished
	flushJobs []*pool.Job[slot[F]]

	// alone holds jobs that must run alone, in arrival order. Owned by the
	// fetch loop (and by Run once the fetch loop returned).
	alone []*pool.Job[slot[F]]

	// resume is closed when a paused queue is resumed; nil while it runs.
	// pauseMu orders the changes of the pause state.
	resume  atomic.Pointer[chan struct{}]
	pauseMu sync.Mutex

	// sig are the events a test asked for (none outside tests).
	sig testsignal.Signals
	// stop is closed once the run stops fetching (its ctx ended).
	stop chan struct{}

	// counts are finished jobs by minute, not yet added to the queue's
	// throughput counters (see counted).
	countMu sync.Mutex
	counts  map[int64]int64
	// lat are the wait and run times not yet added to the queue's latency
	// hashes (nil: the run writes no statistics).
	lat *latency
	// sysClock is set when the queue's clock is the process's: a run's end
	// time is then the time of its minute, with no other reading.
	sysClock bool
}

// SlotMessageBytes is the most bytes the state of one run of a front (the
// root's Message) may have for a plain job's slot to stay in its allocation
// size class; tests of the engine and of the root package check both sides.
const SlotMessageBytes = 248

// slot is everything the engine and its front keep for one job, in one
// allocation with the job's context (a pool.Job). The decoded job and its
// Run live on the stack of the goroutine that runs it.
type slot[F any] struct {
	d Delivery
	f F
	// share is the number of slots of Config.Gate the job holds while it
	// runs.
	share int64
	// The job's own options (result retention, timeout, ...) are not kept
	// here: most jobs have none, and every byte of a slot is allocated per
	// job. They are read from d's fields when needed (see ownRetention).
}

// finished is a job waiting for its success to be settled. It stays
// registered until then, so its claim stays fresh and nobody takes it over.
type finished[F any] struct {
	job         *pool.Job[slot[F]]
	lock, token string
	moved       string // the stable ID of a moved copy
	started     time.Time
	attempt     int
}

// fetchLoop fetches jobs, never more than there are free handler slots, and
// starts them; a job that must run alone is started, before anything else
// is fetched, as soon as every slot is free.
func (r *run[F]) fetchLoop(ctx context.Context) error {
	r.mon.fetching.Store(true)
	defer r.mon.fetching.Store(false)
	gate := r.cfg.Gate
	if gate != nil {
		gate.Join()
		defer gate.Leave()
	}
	if err := r.start(ctx); err != nil {
		return err
	}
	var bo pool.Backoff
	full := false // the last fetch returned as many jobs as it asked for
	wait := r.cfg.Block
	if r.cfg.ControlInterval > 0 {
		wait = min(wait, r.cfg.ControlInterval) // a pause stops reads within two intervals
	}
	// A gated engine waits for work holding no slot of the share.
	waiter, _ := r.b.(Waiter)
	fetchWait := wait
	if gate != nil && waiter != nil {
		fetchWait = 0
	}
	conc := int64(r.cfg.Concurrency)
	var jobs []*pool.Job[slot[F]] // of one fetch, reused
	for {
		if len(r.alone) > 0 {
			if !r.waitResumed(ctx) { // a job waiting alone starts no sooner than a read
				return nil
			}
			if !r.runAlone(ctx) {
				return nil
			}
			continue
		}
		// While a backlog is likely, wait briefly for all the slots rather
		// than fetch one or two jobs at a time: every fetch costs a round
		// trip and CPU on both sides, and with fast handlers the slots free
		// up within the wait. Slow handlers are not held up for longer than
		// fetchGather.
		if !r.waitResumed(ctx) {
			return nil
		}
		// A gated engine gathers slots of the share instead.
		n, err := r.pool.Slots(ctx, conc, full && gate == nil, conc, fetchGather)
		if err != nil {
			return nil // ctx cancelled
		}
		if gate != nil {
			k, err := gate.Acquire(ctx, n, full, fetchGather)
			r.pool.Release(n - k)
			if err != nil {
				return nil
			}
			n = k
		}
		ds, err := r.b.Fetch(ctx, int(n), fetchWait, r.pool.Owns)
		if err != nil {
			r.mon.lease.release()
			r.pool.Release(n)
			if gate != nil {
				gate.Fetched(n, 0, 0)
			}
			full = false
			if errors.Is(err, rdb.ErrPaused) && ctx.Err() == nil {
				if !r.paused(ctx, wait) {
					return nil
				}
				continue
			}
			if stop, err := r.fetchFailed(ctx, err, "fetching jobs", &bo); stop {
				return err
			}
			continue
		}
		bo.Reset()
		now := time.Now()
		r.mon.fetched(now)
		var started int64
		jobs = jobs[:0]
		for i := range ds {
			jobs = append(jobs, r.pool.NewJob(ds[i].Key, slot[F]{d: ds[i]}))
		}
		r.pool.RegisterAll(jobs)
		clear(ds) // the backend may reuse it: drop its references to the fields
		for _, j := range jobs {
			if r.mustWait(&j.Val.d) {
				r.wait(ctx, j)
				continue
			}
			if gate != nil {
				j.Val.share = 1
			}
			r.pool.Launch(j, 1, now) // owns one of the n slots
			started++
		}
		r.mon.lease.release() // the starts a held lease allowed are launched
		clear(jobs)
		r.pool.Release(n - started)
		if gate != nil {
			gate.Fetched(n, int64(len(ds)), started)
			if len(ds) == 0 && waiter != nil {
				if err := waiter.WaitForWork(ctx, wait); err != nil {
					if stop, err := r.fetchFailed(ctx, err, "waiting for jobs", &bo); stop {
						return err
					}
				}
			}
		}
		// A backlog is likely when a large fetch came back full; a small
		// one that did (most slots were busy) says nothing, and waiting for
		// every slot then would only delay the jobs that arrive meanwhile.
		// A gated engine gathers only its part of the share, so any full
		// fetch tells.
		full = len(ds) == int(n) && (2*n >= conc || gate != nil)
	}
}

// fetchFailed handles an error of the fetch loop's call what: it records
// it, then waits with bo before the next try. It reports stop when the
// loop must end, with the error to return (nil when ctx ended).
func (r *run[F]) fetchFailed(ctx context.Context, err error, what string, bo *pool.Backoff) (stop bool, _ error) {
	if ctx.Err() != nil {
		return true, nil
	}
	if g := r.cfg.Gate; g != nil {
		g.Idle()
	}
	r.mon.fetchFailed(err)
	if rdb.Fatal(err) {
		return true, err
	}
	r.mon.Log.WarnContext(ctx, "streamq: "+what+" failed, retrying", "error", err, "retry_in", bo.Peek())
	return !bo.Wait(ctx), nil
}

// work runs one launched job (see process) and gives back the slots of
// the shared budget it held.
func (r *run[F]) work(j *pool.Job[slot[F]]) bool {
	n := j.Val.share
	keep := r.process(j)
	if n > 0 {
		r.cfg.Gate.Release(n)
	}
	return keep
}

// start runs the backend's Start, retrying transient errors until ctx ends.
func (r *run[F]) start(ctx context.Context) error {
	var bo pool.Backoff
	for {
		err := r.b.Start(ctx)
		if err == nil {
			return nil
		}
		if stop, err := r.fetchFailed(ctx, err, "starting", &bo); stop {
			return err
		}
	}
}

// mustWait reports whether d must run alone: a job whose latest runs were
// cut short by crashes, about to make its last allowed attempt. The worker
// that died may have been killed by another job running beside it (a
// poison job that crashes the process takes its neighbours down too, and
// they are taken over together), and a job is only dead-lettered for
// crashes if it crashed a worker on its own.
func (r *run[F]) mustWait(d *Delivery) bool {
	if !d.Suspect || r.cfg.Concurrency == 1 && (r.cfg.Gate == nil || r.cfg.Gate.s.size == 1) {
		return false
	}
	fields := r.fields(d)
	if d.Prior == 0 && !wire.Crashed(fields) {
		return false
	}
	a, err := wire.AttemptField(fields)
	if err != nil {
		return false // malformed: dead-lettered without running
	}
	return a+d.Prior+1 == r.maxAttempts(fields)
}

// maxAttempts returns the attempt budget of a job from its fields: its own
// (the ma field) or the queue's.
func (r *run[F]) maxAttempts(fields map[string]any) int {
	if n := wire.MaxAttemptsField(fields); n > 0 {
		return n
	}
	return r.cfg.MaxDeliveries
}

// budget returns the attempt budget of a decoded job: its own or the
// queue's.
func (r *run[F]) budget(j *wire.Job) int {
	if j.MaxAttempts > 0 {
		return j.MaxAttempts
	}
	return r.cfg.MaxDeliveries
}

// fields returns d's wire fields, decoding packed ones once.
func (r *run[F]) fields(d *Delivery) map[string]any {
	if d.Fields == nil && d.Packed != "" {
		f, err := wire.Unpack(d.Packed)
		if err != nil {
			f = map[string]any{"data": d.Packed} // dead-lettered as malformed, with its data
		}
		d.Fields = f
	}
	return d.Fields
}

// wait queues a job to run alone. A start the fetch counted is taken back
// first: if this worker dies while the job waits, the job was not started.
func (r *run[F]) wait(ctx context.Context, j *pool.Job[slot[F]]) {
	d := &j.Val.d
	r.mon.Log.InfoContext(ctx, "streamq: job whose earlier runs were cut short makes its last attempt alone", "job_id", stableID(d), "msg_id", d.ID, "crashed_runs", d.Prior)
	if d.Charged {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		held, err := r.b.Charge(cctx, d, false)
		cancel()
		switch {
		case err != nil:
			r.mon.Log.WarnContext(ctx, "streamq: cannot take back the count of a waiting job's start", "job_id", stableID(d), "msg_id", d.ID, "error", err)
		case !held:
			r.pool.Settle(j)
			r.pool.Unregister(j)
			return
		default:
			d.Charged = false
		}
	}
	r.alone = append(r.alone, j)
	r.mon.waiting.Store(int64(len(r.alone)))
}

// runAlone starts the first waiting job once every slot is free and every
// other job has been settled (a finished job whose acknowledgement is still
// on its way would run again, charged, if the job running alone crashed the
// worker). It reports false if ctx ended first (the job keeps waiting).
func (r *run[F]) runAlone(ctx context.Context) bool {
	j := r.alone[0]
	if r.pool.Lost(j) {
		r.alone = r.alone[1:]
		r.mon.waiting.Store(int64(len(r.alone)))
		r.pool.Settle(j)
		r.pool.Unregister(j)
		return true
	}
	if r.pool.AcquireAll(ctx) != nil {
		return false
	}
	var share int64
	if g := r.cfg.Gate; g != nil {
		// Alone means alone in the process: no job of another queue
		// runs beside it either.
		if g.AcquireAll(ctx) != nil {
			r.pool.Release(int64(r.cfg.Concurrency))
			return false
		}
		share = g.s.size
	}
	giveBack := func() {
		r.pool.Release(int64(r.cfg.Concurrency))
		if share > 0 {
			r.cfg.Gate.Release(share)
		}
	}
	if r.pool.WaitHeld(ctx, len(r.alone)) != nil {
		giveBack()
		return false
	}
	if r.leasing() {
		// The start must come before a pause ends, as a read's do: hold
		// the start lease over the launch, or, without one (a pause may be
		// under way, or the lease lapsed), wait for the control loop.
		if !r.mon.HoldLease() {
			giveBack()
			return r.waitLease(ctx)
		}
		defer r.mon.lease.release()
	}
	r.alone = r.alone[1:]
	r.mon.waiting.Store(int64(len(r.alone)))
	j.Val.share = share
	r.pool.Launch(j, int64(r.cfg.Concurrency), time.Now())
	return true
}

// leasing reports whether the run takes start leases (see renewLease).
func (r *run[F]) leasing() bool {
	return r.cfg.StartLease && r.cfg.Heartbeat != "" && r.cfg.DB != nil && r.cfg.ControlInterval > 0
}

// waitLease waits, for a job that must run alone, until the run holds a
// start lease again or is paused (the fetch loop then waits for the
// resume), looking every 10 ms for at most a control interval. It reports
// false if ctx ended first.
func (r *run[F]) waitLease(ctx context.Context) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for range max(int(r.cfg.ControlInterval/(10*time.Millisecond)), 1) {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if r.mon.Leased() || r.mon.paused.Load() {
			break
		}
	}
	return true
}

// handBackWaiting hands back the jobs that still wait to run alone when the
// run ends, without charging them an attempt.
func (r *run[F]) handBackWaiting() {
	for _, j := range r.alone {
		r.pool.Settle(j)
		if !r.pool.Lost(j) {
			var wj wire.Job
			if err := wire.DecodeView(&wj, r.fields(&j.Val.d)); err == nil {
				r.move(j, r.runOf(j, &wj), r.cfg.ShutdownCause, false, 0, EventRetried)
			} else {
				r.b.Abandon(j.Key) // whoever takes it over dead-letters it
			}
		}
		r.pool.Unregister(j)
	}
	r.alone = nil
	r.mon.waiting.Store(0)
}

// runOf returns the run of j with its decoded fields wj.
func (r *run[F]) runOf(j *pool.Job[slot[F]], wj *wire.Job) Run {
	d := &j.Val.d
	h := wj.Headers
	if len(d.Headers) > 0 {
		h = make(map[string]string, len(wj.Headers)+len(d.Headers))
		for k, v := range wj.Headers {
			h[k] = v
		}
		for k, v := range d.Headers {
			h[k] = v
		}
	}
	return Run{Queue: r.cfg.Queue, ID: d.ID, Job: *wj, Headers: h, Attempt: wj.Attempt + d.Prior + 1}
}

// process runs one job and settles the outcome. It reports true when the
// job went to the finish loop, which unregisters it once settled.
func (r *run[F]) process(j *pool.Job[slot[F]]) bool {
	d := &j.Val.d
	if r.pool.Lost(j) { // taken over while it waited
		r.pool.Settle(j)
		return false
	}
	var wj wire.Job
	if err := wire.DecodeView(&wj, r.fields(d)); err != nil {
		r.pool.Settle(j)
		r.deadLetter(j, Run{Queue: r.cfg.Queue, ID: d.ID, Job: wj}, ReasonMalformed, err, 0, true)
		return false
	}
	rn := r.runOf(j, &wj)
	if made := rn.Attempt - 1; made >= r.budget(&wj) {
		// Its earlier starts all ended without a verdict: the workers
		// running it crashed, hung or were cut off.
		r.pool.Settle(j)
		cause := fmt.Errorf("attempted %d times without finishing (workers crashed or lost it)", made)
		if wj.LastError != "" {
			cause = fmt.Errorf("%w; last error: %s", cause, wj.LastError)
		}
		r.deadLetter(j, rn, ReasonMaxDeliveries, cause, made, false)
		return false
	}
	if wj.Deadline > 0 && time.Now().UnixMilli() >= wj.Deadline {
		r.pool.Settle(j)
		r.deadLetter(j, rn, ReasonDeadline, deadlineErr(wj.Deadline), rn.Attempt-1, false)
		return false
	}
	if !d.Charged && !r.charge(j) {
		return false
	}
	if wj.Timeout > 0 || wj.Deadline > 0 {
		r.jobLimits(j, &wj)
	}
	var ctx context.Context = j // cancelled on timeout, lost claim or shutdown
	start := time.Now()
	err := r.exec.Call(ctx, rn, &j.Val.f)
	r.pool.Settle(j)
	r.recordRun(d, &wj, start, err == nil)
	if err == nil {
		r.mon.processed.Add(1)
		r.fins.Add(finished[F]{job: j, lock: wj.Key, token: wj.KeyToken, moved: wj.JobID, started: start, attempt: rn.Attempt})
		return true
	}
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, r.cfg.LostCause):
		// Another worker holds the job now; settling it here would race.
		r.mon.failed.Add(1)
		r.mon.Log.Info("streamq: job failed after its claim was lost; its new holder settles it", "job_id", stableID(d), "msg_id", d.ID, "error", err)
	case errors.Is(cause, r.cfg.ShutdownCause):
		// The handler stopped because of the shutdown: hand the job back
		// at once without charging the attempt. Its handler has returned,
		// so it cannot run twice.
		r.mon.failed.Add(1)
		r.move(j, rn, err, false, 0, EventRetried)
	case r.cfg.CancelCause != nil && errors.Is(cause, r.cfg.CancelCause):
		// An operator cancelled it: never retried, kept as a dead letter.
		r.mon.failed.Add(1)
		cerr := err
		if !errors.Is(err, r.cfg.CancelCause) { // a handler that returned context.Cause(ctx) says it already
			cerr = fmt.Errorf("%w: %w", r.cfg.CancelCause, err)
		}
		r.deadLetter(j, rn, ReasonCancelled, cerr, rn.Attempt, false)
	default:
		r.fail(j, rn, err)
	}
	return false
}

// jobLimits applies a job's own timeout and deadline to its run: the
// handler's context ends at the earliest of the job's timeout (else the
// queue's) and its deadline.
func (r *run[F]) jobLimits(j *pool.Job[slot[F]], wj *wire.Job) {
	if wj.Timeout == 0 && wj.Deadline == 0 {
		return
	}
	now := time.Now()
	end, hasEnd := j.Deadline() // the queue's JobTimeout
	if wj.Timeout > 0 {
		end, hasEnd = now.Add(time.Duration(wj.Timeout)*time.Millisecond), true
	}
	if dl := time.UnixMilli(wj.Deadline); wj.Deadline > 0 && (!hasEnd || dl.Before(end)) {
		end = dl
	}
	r.pool.SetDeadline(j, end, end.Sub(now))
}

// deadlineErr is the error of a job whose deadline passed.
func deadlineErr(deadline int64) error {
	return fmt.Errorf("the job's deadline %s has passed", time.UnixMilli(deadline).UTC().Format(time.RFC3339Nano))
}

// charge counts the start of a job the fetch did not count, right before it
// runs. A job that cannot be charged does not run: it stays held until
// another worker takes it over (nothing is lost, and nothing runs
// uncounted).
func (r *run[F]) charge(j *pool.Job[slot[F]]) bool {
	var held bool
	err := r.settling(j, func(ctx context.Context) (err error) {
		held, err = r.b.Charge(ctx, &j.Val.d, true)
		return err
	})
	if err == nil && held {
		j.Val.d.Charged = true
		return true
	}
	r.pool.Settle(j)
	if err != nil {
		r.mon.Log.Error("streamq: cannot count the start of a job; it is left to be taken over later", "job_id", stableID(&j.Val.d), "msg_id", j.Val.d.ID, "error", err)
		r.b.Abandon(j.Key)
	}
	return false
}

// fail retries, postpones or dead-letters a failed attempt.
func (r *run[F]) fail(j *pool.Job[slot[F]], rn Run, err error) {
	o := r.exec.Classify(err)
	switch o.Kind {
	case Postpone:
		r.move(j, rn, err, false, max(o.Delay, 0), EventPostponed)
		return
	case UnknownKind:
		r.unknownKind(j, rn, err)
		return
	}
	r.mon.failed.Add(1)
	n := rn.Attempt
	switch {
	case rn.Job.Deadline > 0 && time.Now().UnixMilli() >= rn.Job.Deadline:
		r.deadLetter(j, rn, ReasonDeadline, fmt.Errorf("%w; last error: %w", deadlineErr(rn.Job.Deadline), err), n, false)
	case o.Kind == Permanent:
		r.deadLetter(j, rn, ReasonPermanent, err, n, false)
	case o.Kind == Malformed:
		r.deadLetter(j, rn, ReasonMalformed, err, n, false)
	case n >= r.budget(&rn.Job):
		r.deadLetter(j, rn, ReasonMaxDeliveries, err, n, false)
	case o.Kind == RetryAfter:
		r.move(j, rn, err, true, max(o.Delay, 0), EventRetried)
	default:
		r.move(j, rn, err, true, r.cfg.Backoff(n), EventRetried)
	}
}

// unknownKind hands back a job whose kind no handler of this worker knows,
// without charging the attempt, after the backoff of its count of such
// hand-backs; once that count reaches the job's attempt budget it is
// dead-lettered with ReasonUnknownKind. So in a rolling deploy a job of a
// new kind waits for a worker that knows it.
func (r *run[F]) unknownKind(j *pool.Job[slot[F]], rn Run, err error) {
	n := rn.Job.UnknownKind + 1
	if n >= r.budget(&rn.Job) {
		r.mon.failed.Add(1)
		r.deadLetter(j, rn, ReasonUnknownKind, fmt.Errorf("%w (no handler for it in %d deliveries)", err, n), rn.Attempt-1, false)
		return
	}
	rn.Job.UnknownKind = n
	r.move(j, rn, err, false, r.cfg.Backoff(n), EventPostponed)
}

// move writes the job again as a new copy due after delay. A charged move
// (a failed attempt) records the attempt and its error; an uncharged one (a
// postponement, a hand-back) does not count this run, and keeps the mark of
// runs cut short by crashes. If Redis cannot be reached the job stays held
// and is taken over later.
func (r *run[F]) move(j *pool.Job[slot[F]], rn Run, cause error, charged bool, delay time.Duration, kind EventKind) {
	d := &j.Val.d
	next := rn.Job
	jid := stableID(d)
	next.JobID = jid
	errs := wire.ErrorsField(r.fields(d))
	now := time.Now()
	if charged {
		next.Attempt = rn.Attempt
		if next.FirstFail == 0 {
			next.FirstFail = now.UnixMilli()
		}
		next.LastError = wire.Truncate(errString(cause), wire.MaxErrorLen)
		errs = wire.AppendFailure(errs, wire.Failure{At: now.UnixMilli(), Attempt: rn.Attempt, Error: next.LastError})
		next.Crashed = false // it ran to the end
	} else {
		next.Attempt = rn.Attempt - 1
		next.Crashed = next.Crashed || d.Prior > 0
	}
	args := next.Args()
	if errs != "" {
		args = append(args, wire.FieldErrors, errs)
	}
	st := rdb.Settle{JobID: jid, Failed: charged}
	var (
		moved bool
		began time.Time
	)
	err := r.settling(j, func(ctx context.Context) (err error) {
		left := delay
		if began.IsZero() {
			began = time.Now()
		} else {
			left = max(delay-time.Since(began), 0) // due when it would have been
		}
		moved, err = r.b.Move(ctx, d, args, left, st)
		if rdb.IsOOM(err) {
			moved, err = r.moveAtOOM(j, args, left, st, err)
		}
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	switch {
	case err != nil:
		r.mon.Log.Error("streamq: cannot settle a job; it stays held and is taken over later", "job_id", stableID(d), "msg_id", d.ID, "error", err)
		r.b.Abandon(j.Key)
	case !moved:
		r.mon.Log.Info("streamq: job was taken over by another worker before it was settled; leaving it", "job_id", stableID(d), "msg_id", d.ID)
	default:
		if kind == EventPostponed {
			r.mon.Log.Debug("streamq: job postponed", "job_id", stableID(d), "msg_id", d.ID, "retry_in", delay, "reason", cause)
		} else {
			r.mon.Log.Debug("streamq: job failed, retrying", "job_id", stableID(d), "msg_id", d.ID, "attempt", rn.Attempt, "retry_in", delay, "error", cause)
		}
		r.mon.Event(ctx, Event{Kind: kind, ID: d.ID, Run: &rn, Err: cause, Delay: delay})
	}
}

// moveAtOOM tries again a move that Redis refused because it is out of
// memory (an OOM error reply: the new copy cannot be written). The job stays
// held, its claim kept fresh, and does not run again; the move is tried with
// backoff (50 ms doubling to 5 s), its delay shortened by the time waited,
// until Redis takes it, the run stops fetching or the job is cancelled
// (shutdown timeout). Leaving the job to the reaper at once instead would
// run the failing handler again every MinIdle, with no backoff at all.
func (r *run[F]) moveAtOOM(j *pool.Job[slot[F]], args []any, delay time.Duration, st rdb.Settle, err error) (bool, error) {
	d := &j.Val.d
	r.mon.Log.Warn("streamq: Redis is out of memory and refuses the retry of a failed job; it stays held, not run again, until Redis takes it",
		"job_id", d.ID, "error", err)
	start := time.Now()
	var bo pool.Backoff
	for range maxOOMTries {
		t := time.NewTimer(bo.Next())
		select {
		case <-r.stop:
			t.Stop()
			return false, err
		case <-j.Done():
			t.Stop()
			return false, err
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		var moved bool
		moved, err = r.b.Move(ctx, d, args, max(delay-time.Since(start), 0), st)
		cancel()
		if !rdb.IsOOM(err) {
			return moved, err
		}
	}
	return false, err
}

// deadLetter moves the job to the dead-letter stream in one script with the
// reason, the error and attempts, the number of starts charged to it. A
// malformed job keeps its raw fields.
func (r *run[F]) deadLetter(j *pool.Job[slot[F]], rn Run, reason string, cause error, attempts int, malformed bool) {
	d := &j.Val.d
	var headers map[string]string
	var first int64
	var lock, token string
	if !malformed {
		if len(d.Headers) > 0 {
			headers = rn.Headers
		}
		first, lock, token = rn.Job.FirstFail, rn.Job.Key, rn.Job.KeyToken
	}
	now := time.Now()
	dl := wire.DeadLetter{Queue: r.cfg.Queue, ID: d.ID, Reason: reason, Error: errString(cause), Attempts: attempts, Failed: now}
	if first > 0 {
		dl.FirstFail = time.UnixMilli(first)
	}
	raw := r.fields(d)
	jid := stableID(d)
	if !malformed {
		// The dead letter carries the job's stable ID and its error history
		// with this failure.
		raw = maps.Clone(raw)
		raw[wire.FieldJobID] = jid
		raw[wire.FieldErrors] = wire.AppendFailure(wire.ErrorsField(raw), wire.Failure{At: now.UnixMilli(), Attempt: attempts, Error: errString(cause)})
	}
	fields := wire.DeadLetterArgs(dl, raw, headers)
	var id string
	err := r.settling(j, func(ctx context.Context) (err error) {
		id, err = r.b.DeadLetter(ctx, d, lock, token, rdb.Settle{JobID: jid, Failed: true}, fields)
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	switch {
	case err != nil:
		r.mon.Log.Error("streamq: cannot dead-letter job; it stays held and is taken over later", "job_id", stableID(d), "msg_id", d.ID, "reason", reason, "error", err)
		r.b.Abandon(j.Key)
	case id == "":
		r.mon.Log.Info("streamq: job was taken over by another worker before it was dead-lettered; leaving it", "job_id", stableID(d), "msg_id", d.ID)
	default:
		r.mon.DeadLettered(reason, "job_id", stableID(d), "msg_id", d.ID, "dead_letter_id", id, "attempts", attempts, "error", cause)
		ev := Event{Kind: EventDeadLettered, ID: d.ID, Err: cause, Reason: reason}
		if !malformed {
			ev.Run = &rn
		}
		r.mon.Event(ctx, ev)
	}
}

// flush settles a batch of finished jobs, trying three times. Jobs it
// cannot settle stay held and run again later (a duplicate, never a loss).
// It runs on the finish loop only, which owns its buffers.
func (r *run[F]) flush(batch []finished[F]) {
	done, jobs := r.flushDone[:0], r.flushJobs[:0]
	for _, f := range batch {
		done = append(done, Finished{Key: f.job.Key, ID: f.job.Val.d.ID, Lock: f.lock, Token: f.token, Moved: f.moved, D: &f.job.Val.d, Started: f.started, Attempt: f.attempt})
		jobs = append(jobs, f.job)
	}
	defer func() {
		clear(done) // keep no job alive through the buffers
		clear(jobs)
		r.flushDone, r.flushJobs = done[:0], jobs[:0]
	}()
	var (
		bo    pool.Backoff
		began time.Time // of the first failure: nothing on the way of a success
	)
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := r.b.Finish(ctx, done)
		cancel()
		if err == nil {
			r.counted(len(done))
			break
		}
		if began.IsZero() {
			began = time.Now()
		}
		if try < 3 {
			time.Sleep(bo.Next())
			continue
		}
		if !r.again(nil, err, began, &bo) {
			r.mon.Log.Error("streamq: cannot settle finished jobs; they stay held and run again", "count", len(done), "error", err)
			for _, f := range done {
				r.b.Abandon(f.Key)
			}
			break
		}
	}
	r.pool.UnregisterAll(jobs)
}

// settling runs call, a settlement of held job j, each try with its own
// opTimeout, and tries again while [run.again] says so: a slot migration
// or a failover delays the settlement, with the job held and its claim
// kept fresh, instead of leaving the job to be taken over and run again a
// MinIdle later. The scripts it runs settle a job only while this consumer
// holds it, so a try whose reply was lost makes the next one a no-op.
func (r *run[F]) settling(j *pool.Job[slot[F]], call func(ctx context.Context) error) error {
	var (
		bo    pool.Backoff
		began time.Time // of the first failure: no clock read on the way of a success
	)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := call(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if began.IsZero() {
			began = time.Now()
		}
		if !r.again(j, err, began, &bo) {
			return err
		}
	}
}

// again reports, after waiting a backoff, whether a settlement that failed
// with err is worth another try: err clears by itself (rdb.Transient, or
// the try ran out of time), less than settleFor has passed since began,
// the run is not stopping (a shutdown does not wait for a migration), and
// j (nil for a batch) is still held. It returns false at once otherwise.
func (r *run[F]) again(j *pool.Job[slot[F]], err error, began time.Time, bo *pool.Backoff) bool {
	if !rdb.Transient(err) && !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	wait := bo.Next()
	if time.Since(began)+wait > settleFor || (j != nil && r.pool.Lost(j)) {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-r.stop:
		return false
	case <-t.C:
		return true
	}
}

// keepAlive refreshes the claims of the jobs this run holds every
// TouchEvery, and cancels running jobs whose claim was lost.
func (r *run[F]) keepAlive(ctx context.Context) {
	r.pool.KeepAlive(ctx, r.cfg.TouchEvery, r.cfg.TouchTimeout, r.b.Touch,
		func(j *pool.Job[slot[F]]) {
			r.mon.Log.Warn("streamq: a running job was taken over by another worker; cancelling it here", "job_id", stableID(&j.Val.d), "msg_id", j.Val.d.ID)
			r.mon.Event(ctx, Event{Kind: EventClaimLost, ID: j.Val.d.ID})
		},
		func(err error) { r.mon.Log.Warn("streamq: cannot refresh the claims of held jobs", "error", err) })
}

// loop runs a backend's maintenance loop until ctx ends: every l.Every
// (starting at a random offset, so that workers started together do not
// run in step), up to loopBatches calls while it has more to do, with
// backoff after errors.
func (r *run[F]) loop(ctx context.Context, l Loop) error {
	first := time.NewTimer(rand.N(l.Every) + 1)
	select {
	case <-ctx.Done():
		first.Stop()
		return nil
	case <-first.C:
	}
	t := time.NewTicker(l.Every)
	defer t.Stop()
	var bo pool.Backoff
	for {
		for range loopBatches {
			more, err := l.Do(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if rdb.Fatal(err) {
					return fmt.Errorf("streamq: %s: %w", l.Name, err)
				}
				r.mon.Log.WarnContext(ctx, "streamq: "+l.Name+" failed, retrying", "error", err, "retry_in", bo.Peek())
				if !bo.Wait(ctx) {
					return nil
				}
				break
			}
			bo.Reset()
			if !more {
				break
			}
		}
		r.sig.LoopDone.Fire(l.Name)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// stableID returns the stable ID of a delivered job: the jid field of a
// retried or requeued stream copy, else its own ID (a priority job keeps its
// ID when it is retried). It only reads d, so the control loop may call it
// while the job runs: the fields of a stream delivery never change, and
// those of a packed (priority) one are not looked at.
// StableID returns the job's stable ID: the jid field of its fields
// (packed or not), else its ID.
func (d *Delivery) StableID() string { return stableID(d) }

func stableID(d *Delivery) string {
	if d.Packed != "" {
		if id := wire.PackedJobID(d.Packed); id != "" {
			return id
		}
		return d.ID
	}
	if d.Fields != nil {
		if s, ok := wire.Str(d.Fields[wire.FieldJobID]); ok && s != "" {
			return s
		}
	}
	return d.ID
}
