package streamqtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// DefaultQueue is the queue name a [Worker]'s handler sees in
// Message.Queue when Job.Queue is empty.
const DefaultQueue = "streamqtest"

// Outcome is what became of a job a [Worker] ran.
type Outcome int

// Outcomes, as a consumer would settle the job.
const (
	// Acked: the handler returned nil and the job was acknowledged.
	Acked Outcome = iota + 1
	// Retried: the attempt failed and the job was written again, due after
	// Result.RetryIn (the consumer's Backoff for this attempt, or the delay
	// of a [streamq.RetryAfter] error). The attempt counts towards
	// MaxDeliveries.
	Retried
	// Postponed: the handler returned a [streamq.Postpone] error; the job
	// runs again after Result.RetryIn without charging the attempt.
	Postponed
	// DeadLettered: the job was moved to the dead-letter stream with
	// Result.Reason: a [streamq.Permanent] error, the last allowed attempt
	// failed (or the job had used up its attempts before this run), or the
	// job's fields do not follow the wire format.
	DeadLettered
)

// String returns the outcome's name: "acked", "retried", "postponed" or
// "dead_lettered".
func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Retried:
		return "retried"
	case Postponed:
		return "postponed"
	case DeadLettered:
		return "dead_lettered"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Job is a job for [Worker.Work]: what a consumer would read from the
// stream. Every field is optional.
type Job struct {
	// Payload is the job's payload.
	Payload []byte
	// Headers are the job's headers (what streamq.WithHeaders set and the
	// producer's hooks added).
	Headers map[string]string
	// Attempt is the number of this attempt, as the handler sees it in
	// Message.Attempt: 1 for the first run, n when n-1 earlier attempts
	// were charged. An attempt above MaxDeliveries dead-letters the job
	// without running it, as a consumer does. Defaults to 1.
	Attempt int
	// Key is the job's unique key (streamq.Unique).
	Key string
	// EnqueuedAt is when the job was enqueued. Defaults to now.
	EnqueuedAt time.Time
	// FirstFailedAt and LastError describe earlier failed attempts, as
	// Message shows them to the handler.
	FirstFailedAt time.Time
	LastError     string
	// ID is the job's ID. Defaults to a stream entry ID made of EnqueuedAt
	// and a sequence number.
	ID string
	// Queue is the queue name the handler sees in Message.Queue. Defaults
	// to DefaultQueue.
	Queue string
	// Fields, if set, are the job's raw stream entry fields, as written by
	// XADD (for example by a producer in another language), and every field
	// above but ID and Queue is ignored (the attempt is the "attempt" field
	// plus one): a job whose fields do not follow the wire format is
	// dead-lettered with reason streamq.ReasonMalformed.
	Fields map[string]string
}

// Result is the verdict of one [Worker.Work].
type Result struct {
	Outcome Outcome
	// RetryIn is the delay before the job runs again, for Retried and
	// Postponed.
	RetryIn time.Duration
	// Reason is the dead-letter reason for DeadLettered:
	// streamq.ReasonPermanent, streamq.ReasonMaxDeliveries or
	// streamq.ReasonMalformed.
	Reason string
	// Err is the failure: the error the handler (with its middleware)
	// returned, a *streamq.PanicError if it panicked, or why a job was
	// dead-lettered without running. Nil for Acked.
	Err error
}

// Worker runs a handler the way a [streamq.Consumer] does, without Redis:
// through the consumer's middleware, with its job timeout, panic recovery,
// backoff and outcome rules, by the very engine a consumer runs, on an
// in-memory copy of one job. Create it with [NewWorker]. It is safe for
// concurrent use.
type Worker struct {
	h   streamq.Handler
	cfg streamq.ConsumerConfig
	seq atomic.Int64
}

// NewWorker returns a worker that runs h as a consumer configured with cfg
// would (cfg may be nil; its defaults apply, as for streamq.NewConsumer).
// An invalid cfg fails the test.
func NewWorker(tb testing.TB, h streamq.Handler, cfg *streamq.ConsumerConfig) *Worker {
	tb.Helper()
	w := &Worker{h: h}
	if cfg != nil {
		w.cfg = *cfg
		w.cfg.Middleware = append([]streamq.Middleware(nil), cfg.Middleware...)
	}
	if _, err := w.consumer(DefaultQueue, w.cfg); err != nil {
		tb.Fatalf("streamqtest: NewWorker: %v", err)
	}
	return w
}

// noRedis is the Redis client of a Worker's queue: the engine runs on an
// in-memory backend and never calls it.
type noRedis struct{ redis.UniversalClient }

// consumer returns a consumer of the queue name with cfg.
func (w *Worker) consumer(name string, cfg streamq.ConsumerConfig) (*streamq.Consumer, error) {
	q, err := streamq.NewQueue(noRedis{}, name, nil)
	if err != nil {
		return nil, err
	}
	return streamq.NewConsumer(q, w.h, &cfg)
}

// Work runs job once, as a consumer that read it from the stream would, and
// returns the verdict. The handler's context carries ctx's values, the
// consumer's JobTimeout, and is detached from ctx's cancellation as during a
// consumer's shutdown: if ctx ends before the handler returns, the handler
// gets ShutdownTimeout to finish, then its context is cancelled with cause
// streamq.ErrShutdown. Work returns an error, and no verdict, when the job
// was not settled: ctx ended first and the handler returned because of the
// shutdown (a consumer hands such a job back uncharged), or job is invalid.
func (w *Worker) Work(ctx context.Context, job *Job) (*Result, error) {
	var j Job
	if job != nil {
		j = *job
	}
	d, err := w.delivery(&j)
	if err != nil {
		return nil, err
	}
	b := newBackend(d)
	cfg := w.cfg
	userEvent := cfg.OnEvent
	cfg.OnEvent = func(ctx context.Context, e streamq.Event) {
		b.event(e)
		if userEvent != nil {
			userEvent(ctx, e)
		}
	}
	c, err := w.consumer(j.Queue, cfg)
	if err != nil {
		return nil, fmt.Errorf("streamqtest: %w", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- core.OfConsumer(c).Engine.Offline().Run(runCtx, b) }()
	select {
	case <-b.settled:
	case <-ctx.Done():
	}
	stop() // the real shutdown: it drains the handler if it still runs
	if err := <-done; err != nil {
		return nil, fmt.Errorf("streamqtest: the engine failed: %w", err)
	}
	return b.result(ctx, j.Attempt)
}

// delivery fills in j's defaults and returns what a backend hands the engine.
func (w *Worker) delivery(j *Job) (*engine.Delivery, error) {
	if j.Queue == "" {
		j.Queue = DefaultQueue
	}
	if j.Attempt == 0 {
		j.Attempt = 1
	}
	if j.Attempt < 0 || j.Attempt > wire.MaxAttempt {
		return nil, fmt.Errorf("streamqtest: Job.Attempt is %d: use 1 for a first run, n for the n-th attempt", j.Attempt)
	}
	if j.EnqueuedAt.IsZero() {
		j.EnqueuedAt = time.Now()
	}
	if j.ID == "" {
		j.ID = fmt.Sprintf("%d-%d", j.EnqueuedAt.UnixMilli(), w.seq.Add(1)-1)
	}
	var fields map[string]any
	if j.Fields != nil {
		fields = make(map[string]any, len(j.Fields))
		for k, v := range j.Fields {
			fields[k] = v
		}
		if a, err := wire.AttemptField(fields); err == nil {
			j.Attempt = a + 1 // the run's attempt, for result
		}
	} else {
		wj := wire.Job{Payload: j.Payload, Headers: j.Headers, EnqMillis: j.EnqueuedAt.UnixMilli(),
			Attempt: j.Attempt - 1, Key: j.Key, LastError: j.LastError}
		if j.Key != "" {
			wj.KeyToken = "streamqtest"
		}
		if !j.FirstFailedAt.IsZero() {
			wj.FirstFail = j.FirstFailedAt.UnixMilli()
		}
		fields = toMap(wj.Args())
	}
	// A fetch by XREADGROUP: it counted the coming start.
	return &engine.Delivery{Key: j.ID, ID: j.ID, Fields: fields, Charged: true}, nil
}

// toMap turns a field/value list into the map a stream read gives.
func toMap(args []any) map[string]any {
	m := make(map[string]any, len(args)/2)
	for i := 0; i+1 < len(args); i += 2 {
		k, _ := wire.Str(args[i])
		v, _ := wire.Str(args[i+1])
		m[k] = v
	}
	return m
}

// backend is an engine.Backend that holds one job in memory and records how
// the engine settled it.
type backend struct {
	settled chan struct{} // closed at the first settlement
	wake    chan struct{}

	mu        sync.Mutex
	d         *engine.Delivery // until fetched
	acked     bool
	moved     bool
	movedAtt  int // the attempt field of the moved copy
	delay     time.Duration
	dead      bool
	abandoned bool
	ev        *streamq.Event // the last event
}

func newBackend(d *engine.Delivery) *backend {
	return &backend{settled: make(chan struct{}), wake: make(chan struct{}, 1), d: d}
}

func (b *backend) settle() {
	select {
	case <-b.settled:
	default:
		close(b.settled)
	}
}

func (b *backend) event(e streamq.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ev = &e
}

func (b *backend) Start(context.Context) error { return nil }

func (b *backend) Fetch(ctx context.Context, _ int, wait time.Duration, _ func(string) bool) ([]engine.Delivery, error) {
	b.mu.Lock()
	d := b.d
	b.d = nil
	b.mu.Unlock()
	if d != nil {
		return []engine.Delivery{*d}, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-b.wake:
	case <-t.C:
	}
	return nil, nil
}

func (b *backend) Charge(context.Context, *engine.Delivery, bool) (bool, error) { return true, nil }

func (b *backend) Touch(context.Context, []string) ([]string, error) { return nil, nil }

func (b *backend) Finish(context.Context, []engine.Finished) error {
	b.mu.Lock()
	b.acked = true
	b.mu.Unlock()
	b.settle()
	return nil
}

func (b *backend) Move(_ context.Context, _ *engine.Delivery, fields []any, delay time.Duration, _ rdb.Settle) (bool, error) {
	att, err := wire.AttemptField(toMap(fields))
	if err != nil {
		return false, err // the engine wrote it: cannot happen
	}
	b.mu.Lock()
	b.moved, b.movedAtt, b.delay = true, att, delay
	b.mu.Unlock()
	b.settle()
	return true, nil
}

func (b *backend) DeadLetter(context.Context, *engine.Delivery, string, string, rdb.Settle, []any) (string, error) {
	b.mu.Lock()
	b.dead = true
	b.mu.Unlock()
	b.settle()
	return "0-1", nil
}

func (b *backend) DropCancels(context.Context, []string) error { return nil }

func (b *backend) Abandon(string) {
	b.mu.Lock()
	b.abandoned = true
	b.mu.Unlock()
	b.settle()
}

func (b *backend) Loops() []engine.Loop { return nil }

func (b *backend) Wake() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// errNotSettled is wrapped by the error of a Work whose job was not settled.
var errNotSettled = errors.New("streamqtest: the job was not settled")

// result turns what the engine did into a Result. attempt is the run's
// attempt number.
func (b *backend) result(ctx context.Context, attempt int) (*Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ev streamq.Event
	if b.ev != nil {
		ev = *b.ev
	}
	switch {
	case b.acked:
		return &Result{Outcome: Acked}, nil
	case b.dead:
		return &Result{Outcome: DeadLettered, Reason: ev.Reason, Err: ev.Err}, nil
	case b.moved && ev.Kind == streamq.EventPostponed:
		return &Result{Outcome: Postponed, RetryIn: b.delay, Err: ev.Err}, nil
	case b.moved && b.movedAtt == attempt:
		return &Result{Outcome: Retried, RetryIn: b.delay, Err: ev.Err}, nil
	case b.moved:
		return nil, fmt.Errorf("%w: ctx ended (%v) and the handler returned because of the shutdown (%v); a consumer hands such a job back without charging the attempt",
			errNotSettled, context.Cause(ctx), ev.Err)
	case b.abandoned:
		return nil, fmt.Errorf("%w: the engine abandoned it", errNotSettled)
	}
	return nil, fmt.Errorf("%w: ctx ended before the handler ran: %w", errNotSettled, context.Cause(ctx))
}
