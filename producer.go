package streamq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// MaxBatchChunk is the number of jobs [Producer.EnqueueBatch] writes per Redis
// script call; larger batches are split into chunks of this size.
const MaxBatchChunk = 1000

// EnqueueHook is called for every job just before it is written, with the
// job's headers (never nil). Hooks may add headers, for example to propagate
// a trace context; see the middleware package.
type EnqueueHook func(ctx context.Context, headers map[string]string)

// DefaultReplicaTimeout is how long a replicated enqueue waits for its
// replicas when ProducerConfig.ReplicaTimeout is 0.
const DefaultReplicaTimeout = time.Second

// ProducerConfig configures a [Producer]. The zero value is valid.
type ProducerConfig struct {
	// Hooks run for every enqueued job, in order. Defaults to none.
	Hooks []EnqueueHook

	// MinReplicas makes every enqueue wait until that many replicas of the
	// master got the job (WAIT right after the write, on the same
	// connection) before it returns nil, so that a failover to one of them
	// cannot lose a job whose Enqueue succeeded. When fewer acknowledge
	// within ReplicaTimeout, Enqueue returns the job's ID with an error
	// wrapping [ErrNotReplicated] (a [*NotReplicatedError] says how many
	// did): the job is stored on the master, and may be lost if it fails
	// over before replicating it. Costs one WAIT per call (a batch waits
	// once). Defaults to 0: return as soon as the master stored the job.
	MinReplicas int

	// ReplicaTimeout bounds the wait for MinReplicas. It must be shorter
	// than the client's ReadTimeout (the WAIT is read like any reply).
	// Defaults to DefaultReplicaTimeout.
	ReplicaTimeout time.Duration
}

// Producer enqueues jobs into a [Queue]. It is safe for concurrent use.
type Producer struct {
	producerHandle // shared with streamq's other packages (internal/core)
	q              *Queue
	cfg            ProducerConfig
}

type producerHandle = core.ProducerHandle

// NewProducer returns a producer for q. cfg may be nil.
func NewProducer(q *Queue, cfg *ProducerConfig) (*Producer, error) {
	if q == nil {
		return nil, configErr("queue", "q is nil: create one with streamq.NewQueue")
	}
	p := &Producer{q: q}
	if cfg != nil {
		p.cfg = *cfg
		p.cfg.Hooks = append([]EnqueueHook(nil), cfg.Hooks...)
	}
	if p.cfg.ReplicaTimeout == 0 {
		p.cfg.ReplicaTimeout = DefaultReplicaTimeout
	}
	if err := checkReplicas("ProducerConfig", q.client, p.cfg.MinReplicas, p.cfg.ReplicaTimeout); err != nil {
		return nil, err
	}
	hooks := make([]func(context.Context, map[string]string), len(p.cfg.Hooks))
	for i, h := range p.cfg.Hooks {
		if h == nil {
			return nil, configErr(fmt.Sprintf("ProducerConfig.Hooks[%d]", i), "is nil: remove it")
		}
		hooks[i] = h
	}
	p.producerHandle = core.NewProducerHandle(&core.Producer{Queue: core.Of(q), Hooks: hooks, Kind: rdb.KindStream})
	return p, nil
}

// Queue returns the producer's queue.
func (p *Producer) Queue() *Queue { return p.q }

// EnqueueOption changes how one job is enqueued.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct {
	headers map[string]string
	// at is when the job is due, or in (when positive) how long after the
	// enqueue, by the queue's clock.
	at        time.Time
	in        time.Duration
	uniqueKey string
	uniqueTTL time.Duration
	err       error
}

// MaxUniqueKeyLen is the longest accepted unique key, in bytes.
const MaxUniqueKeyLen = 1024

// Unique makes the job unique by key: while a job enqueued with the same key
// is waiting, scheduled, retrying or running, Enqueue returns the existing
// job's ID and [ErrDuplicate]. The lock is released when the job succeeds or
// is dead-lettered, and expires after ttl in any case (so a lost lock cannot
// block the key forever; choose ttl longer than the job's expected life).
// Taking the lock and enqueueing are one atomic step. Not allowed with
// EnqueueBatch.
func Unique(key string, ttl time.Duration) EnqueueOption {
	return func(o *enqueueOptions) {
		switch {
		case key == "":
			o.err = configErr("Unique key", "is empty: use a key that identifies the work, e.g. \"invoice:42\"")
		case len(key) > MaxUniqueKeyLen:
			o.err = configErr("Unique key", "is %d bytes long: use at most %d", len(key), MaxUniqueKeyLen)
		case ttl < time.Millisecond:
			o.err = configErr("Unique ttl", "%s: use at least 1ms, longer than the job is expected to wait and run", ttl)
		default:
			o.uniqueKey, o.uniqueTTL = key, ttl
		}
	}
}

// WithHeaders adds headers to the job. Later options win on equal keys.
func WithHeaders(h map[string]string) EnqueueOption {
	return func(o *enqueueOptions) {
		if o.headers == nil {
			o.headers = make(map[string]string, len(h))
		}
		maps.Copy(o.headers, h)
	}
}

// WithHeader adds one header to the job.
func WithHeader(key, value string) EnqueueOption {
	return func(o *enqueueOptions) {
		if o.headers == nil {
			o.headers = make(map[string]string, 1)
		}
		o.headers[key] = value
	}
}

// ProcessAt delays the job until t. It is kept in the queue's delayed set and
// moved into the stream by a consumer's scheduler when due. A time in the
// past enqueues the job at once.
func ProcessAt(t time.Time) EnqueueOption {
	return func(o *enqueueOptions) { o.at, o.in = t, 0 }
}

// ProcessIn delays the job by d; see [ProcessAt].
func ProcessIn(d time.Duration) EnqueueOption {
	return func(o *enqueueOptions) {
		if d < 0 {
			o.err = configErr("ProcessIn", "negative delay %s: use 0 to enqueue at once", d)
			return
		}
		o.at, o.in = time.Time{}, d
	}
}

// Job is one job of a batch for [Producer.EnqueueBatch].
type Job struct {
	Payload []byte
	Headers map[string]string // optional; merged over the batch's headers
}

// Enqueue adds one job and returns its ID, which the job keeps for its
// whole life ([Message.ID]; see docs/jobs.md, "Job IDs and deduplication"):
// its stream entry ID, or for a delayed job a generated ID of the same form
// (see [Queue.CancelDelayed]).
// A nil error means the job is stored in Redis and will be handled at least
// once or dead-lettered. It returns [ErrQueueFull] when the queue is at its
// cap, and for a [Unique] job whose key is taken, the existing job's ID with
// [ErrDuplicate]. With ProducerConfig.MinReplicas, a job that too few
// replicas acknowledged in time is returned with its ID and
// [ErrNotReplicated]. A payload or headers above the queue's limits
// (QueueConfig.MaxPayloadBytes, MaxHeaderBytes) fail with [ErrTooLarge], a
// header that is not valid UTF-8 with [ErrInvalidHeader], before anything is
// written.
//
// A call that go-redis sends again after a lost reply returns the first
// send's result and stores nothing more (see docs/guarantees.md, "Idempotent
// writes").
func (p *Producer) Enqueue(ctx context.Context, payload []byte, opts ...EnqueueOption) (string, error) {
	ids, err := p.enqueue(ctx, []Job{{Payload: payload}}, opts)
	if len(ids) == 0 {
		return "", err
	}
	return ids[0], err
}

// EnqueueBatch adds many jobs in as few round trips as possible (one script
// call per [MaxBatchChunk] jobs). The options apply to every job. Each chunk
// is all-or-nothing; on error, ids[i] is "" for every job that was not
// enqueued, and the IDs of the jobs that were enqueued are kept (with
// [ErrNotReplicated], those of the chunk that was not replicated too; later
// chunks are not sent). A job that fails the checks of [Producer.Enqueue]
// stops the batch before its chunk is written.
func (p *Producer) EnqueueBatch(ctx context.Context, jobs []Job, opts ...EnqueueOption) (ids []string, err error) {
	return p.enqueue(ctx, jobs, opts)
}

func (p *Producer) enqueue(ctx context.Context, jobs []Job, opts []EnqueueOption) ([]string, error) {
	var o enqueueOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return nil, o.err
	}
	ids := make([]string, len(jobs))
	if len(jobs) == 0 {
		return ids, nil
	}
	now := p.q.db.Now()
	enq := now.UnixMilli()
	at := o.at
	if o.in > 0 {
		at = now.Add(o.in)
	}
	if !at.After(now) {
		at = time.Time{} // due now: into the stream
	}
	if o.uniqueKey != "" {
		if len(jobs) != 1 {
			return ids, configErr("Unique", "cannot be used with EnqueueBatch: enqueue unique jobs one by one")
		}
		return p.enqueueUnique(ctx, jobs[0], &o, enq, at)
	}

	var err error
	if !at.IsZero() {
		err = p.schedule(ctx, jobs, &o, enq, at, ids)
	} else {
		err = p.add(ctx, jobs, &o, enq, ids)
	}
	if err != nil {
		return ids, err
	}
	core.OfProducer(p).Register(ctx)
	return ids, nil
}

// add adds jobs to the stream, in chunks of at most MaxBatchChunk (one
// script call each), and sets their IDs in ids. A chunk whose jobs differ
// only by payload carries their common fields once.
func (p *Producer) add(ctx context.Context, jobs []Job, o *enqueueOptions, enq int64, ids []string) error {
	for start := 0; start < len(jobs); start += MaxBatchChunk {
		chunk := jobs[start:min(start+MaxBatchChunk, len(jobs))]
		ep := rdb.EnqueueParams{IDs: ids[start:], Replicas: p.replicas()}
		var firstHeaders map[string]string
		for i, j := range chunk {
			h := p.headers(ctx, o.headers, j.Headers)
			if err := core.Of(p.q).CheckJob(j.Payload, h); err != nil {
				return fmt.Errorf("streamq: enqueue job %d of %d on %s: %w", start+i, len(jobs), p.q.keys.Stream, err)
			}
			if i > 0 && maps.Equal(h, firstHeaders) {
				ep.AddLike(j.Payload)
				continue
			}
			if i == 0 {
				firstHeaders = h
			}
			ep.AddJob(&wire.Job{Payload: j.Payload, Headers: h, EnqMillis: enq})
		}
		if err := p.q.db.Enqueue(ctx, &ep); err != nil {
			if !errors.Is(err, ErrNotReplicated) {
				clear(ids[start:])
			}
			if !errors.Is(err, ErrQueueFull) {
				err = fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
			}
			return err
		}
	}
	return nil
}

// schedule stores jobs due at at in the delayed set, in chunks of at most
// MaxBatchChunk, and sets their IDs in ids.
func (p *Producer) schedule(ctx context.Context, jobs []Job, o *enqueueOptions, enq int64, at time.Time, ids []string) error {
	for start := 0; start < len(jobs); start += MaxBatchChunk {
		chunk := jobs[start:min(start+MaxBatchChunk, len(jobs))]
		sp := rdb.ScheduleParams{Due: at, Replicas: p.replicas()}
		for i, j := range chunk {
			jf := wire.Job{Payload: j.Payload, Headers: p.headers(ctx, o.headers, j.Headers), EnqMillis: enq}
			if err := core.Of(p.q).CheckJob(jf.Payload, jf.Headers); err != nil {
				return fmt.Errorf("streamq: enqueue job %d of %d on %s: %w", start+i, len(jobs), p.q.keys.Stream, err)
			}
			// The delayed-set ID is the job's stable ID: the copy promoted
			// into the stream carries it, so the job can be found by the ID
			// Enqueue returned (see package inspect).
			jf.JobID = p.q.db.NewDelayedID()
			ids[start+i] = jf.JobID
			sp.Add(jf.JobID, jf.Args())
		}
		if err := p.q.db.Schedule(ctx, &sp); err != nil {
			if !errors.Is(err, ErrNotReplicated) {
				clear(ids[start : start+len(chunk)])
			}
			return fmt.Errorf("streamq: schedule on %s: %w", p.q.keys.Delayed, err)
		}
	}
	return nil
}

// enqueueUnique enqueues one job under its unique key: into the stream, or
// into the delayed set when at is not zero.
func (p *Producer) enqueueUnique(ctx context.Context, job Job, o *enqueueOptions, enq int64, at time.Time) ([]string, error) {
	jf := wire.Job{Payload: job.Payload, Headers: p.headers(ctx, o.headers, job.Headers), EnqMillis: enq}
	if err := core.Of(p.q).CheckJob(jf.Payload, jf.Headers); err != nil {
		return []string{""}, fmt.Errorf("streamq: enqueue unique on %s: %w", p.q.keys.Stream, err)
	}
	lock := rdb.Lock{Mode: rdb.LockUnique, Key: o.uniqueKey, TTL: o.uniqueTTL}
	outcome, id, err := p.q.db.EnqueueOne(ctx, &rdb.EnqueueOneParams{Job: &jf, Due: at, Lock: lock, Replicas: p.replicas()})
	ok := outcome != rdb.Duplicate
	if err != nil {
		switch {
		case errors.Is(err, ErrQueueFull):
			return []string{""}, err
		case errors.Is(err, ErrNotReplicated) && ok:
			return []string{id}, fmt.Errorf("streamq: enqueue unique on %s: %w", p.q.keys.Stream, err)
		case errors.Is(err, ErrNotReplicated):
			// The holder's lock was read, not written: nothing to wait for.
		default:
			return []string{""}, fmt.Errorf("streamq: enqueue unique on %s: %w", p.q.keys.Stream, err)
		}
	}
	if !ok {
		return []string{id}, fmt.Errorf("%w: key %q is held by job %s", ErrDuplicate, o.uniqueKey, id)
	}
	core.OfProducer(p).Register(ctx)
	return []string{id}, nil
}

// replicas returns what the producer's writes wait for.
func (p *Producer) replicas() rdb.Replicas {
	return rdb.Replicas{N: p.cfg.MinReplicas, Timeout: p.cfg.ReplicaTimeout}
}

// headers merges the batch and job headers and runs the hooks (see
// core.Producer.Headers).
func (p *Producer) headers(ctx context.Context, common, own map[string]string) map[string]string {
	return core.OfProducer(p).Headers(ctx, common, own)
}

// checkReplicas validates a replicated-write option of config conf.
func checkReplicas(conf string, c any, n int, timeout time.Duration) error {
	if field, reason := rdb.ReplicasProblem(c, n, timeout); field != "" {
		return configErr(conf+"."+field, "%s", reason)
	}
	return nil
}
