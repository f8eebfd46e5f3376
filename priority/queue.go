package priority

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Priorities.
const (
	// MinPriority is the lowest accepted priority (the int32 range, so every
	// priority is an exact Redis sorted-set score).
	MinPriority = math.MinInt32
	// MaxPriority is the highest accepted priority.
	MaxPriority = math.MaxInt32
	// DefaultPriority is the priority [Forward] gives a stream job without a
	// [HeaderPriority] header when QueueConfig.DefaultPriority is zero.
	DefaultPriority = 0
	// HeaderPriority is the job header that carries a job's priority as a
	// decimal integer. [WithPriority] sets it on stream jobs and [Forward]
	// reads it. A [Worker] sets it on every job it runs (from the job's
	// place in the priority set), so a handler reads its job's priority with
	// [Of], and dead letters keep it, so a job requeued from the dead-letter
	// stream and forwarded again gets its priority back.
	HeaderPriority = wire.HeaderPriority
)

// QueueConfig configures a [Queue]. The zero value is valid.
type QueueConfig struct {
	// DefaultPriority is the priority [Forward] gives a stream job that has
	// no [HeaderPriority] header. It must lie in [MinPriority, MaxPriority].
	// Defaults to DefaultPriority (0).
	DefaultPriority int

	// LowerFirst reverses the order of the queue: lower numbers run first,
	// like Unix nice values. Every process that uses the queue must agree
	// on it. Defaults to false: higher priorities run first.
	LowerFirst bool

	// Hooks run for every job pushed with [Queue.Push] or [Queue.PushBatch],
	// with the job's headers, as [streamq.ProducerConfig.Hooks] do for stream
	// jobs (for example to inject a trace context). Defaults to none.
	Hooks []streamq.EnqueueHook
}

// Queue is the priority set of a [streamq.Queue]: jobs ordered by priority,
// and by push order (FIFO) among jobs of equal priority. Jobs get into it by
// [Queue.Push] and [Queue.PushBatch], or from the queue's stream through
// the [Forward] handler; a [Worker] runs them.
//
// A Queue is cheap, immutable and safe for concurrent use.
type Queue struct {
	q    *streamq.Queue
	core *core.Queue
	db   *rdb.PrioritySet
	cfg  QueueConfig
	keys rdb.PriorityKeys
	// p runs the hooks of pushes and records the queue in the registry.
	p *core.Producer
}

// NewQueue returns the priority set of q. cfg may be nil. It copies cfg,
// applies defaults and validates it; it never changes cfg and does not talk
// to Redis.
func NewQueue(q *streamq.Queue, cfg *QueueConfig) (*Queue, error) {
	if q == nil {
		return nil, &streamq.ConfigError{Field: "queue", Reason: "q is nil: create one with streamq.NewQueue"}
	}
	var c QueueConfig
	if cfg != nil {
		c = *cfg
		c.Hooks = append([]streamq.EnqueueHook(nil), cfg.Hooks...)
	}
	if err := checkPriority(c.DefaultPriority); err != nil {
		return nil, &streamq.ConfigError{Field: "priority.QueueConfig.DefaultPriority",
			Reason: fmt.Sprintf("%d is out of range: use a priority from %d to %d", c.DefaultPriority, MinPriority, MaxPriority)}
	}
	hooks := make([]func(context.Context, map[string]string), len(c.Hooks))
	for i, h := range c.Hooks {
		if h == nil {
			return nil, &streamq.ConfigError{Field: fmt.Sprintf("priority.QueueConfig.Hooks[%d]", i), Reason: "is nil: remove it"}
		}
		hooks[i] = h
	}
	cq := core.Of(q)
	cq.HasPrioritySet.Store(true)
	db := cq.DB.Priority()
	return &Queue{q: q, core: cq, db: db, cfg: c, keys: db.Keys(),
		p: &core.Producer{Queue: cq, Hooks: hooks, Kind: rdb.KindPriority}}, nil
}

// Queue returns the stream queue the priority set belongs to.
func (pq *Queue) Queue() *streamq.Queue { return pq.q }

// Job is one job for [Queue.Push] and [Queue.PushBatch].
type Job struct {
	// Priority orders the job: higher runs first (lower with
	// QueueConfig.LowerFirst). It must lie in [MinPriority, MaxPriority].
	Priority int
	// Payload is the job's payload.
	Payload []byte
	// Headers are optional string headers. A [HeaderPriority] header here is
	// ignored: the worker gives every job the header of its Priority.
	Headers map[string]string
}

// Push adds one job to the priority set and returns its ID. A nil error
// means the job is stored in Redis and will be handled at least once or
// dead-lettered. A priority out of range returns an error wrapping
// [ErrInvalidPriority] and pushes nothing.
func (pq *Queue) Push(ctx context.Context, job Job) (string, error) {
	ids, err := pq.PushBatch(ctx, []Job{job})
	if len(ids) == 0 {
		return "", err
	}
	return ids[0], err
}

// PushBatch adds many jobs in as few round trips as possible (one script per
// [streamq.MaxBatchChunk] jobs), in order: jobs of equal priority run in the
// order of the slice. Each chunk is all-or-nothing; on error, ids[i] is ""
// for every job that was not pushed. If any priority is out of range nothing
// is pushed and the error wraps [ErrInvalidPriority]. A job whose payload or
// headers exceed the stream queue's limits (the error wraps
// [streamq.ErrTooLarge]) or whose headers are not valid UTF-8
// ([streamq.ErrInvalidHeader]) stops the batch before its chunk is pushed.
func (pq *Queue) PushBatch(ctx context.Context, jobs []Job) (ids []string, err error) {
	if len(jobs) == 0 {
		return []string{}, nil
	}
	for i, j := range jobs {
		if err := checkPriority(j.Priority); err != nil {
			return make([]string, len(jobs)), fmt.Errorf("%w: job %d: %w", ErrInvalidPriority, i, err)
		}
	}
	ids = make([]string, len(jobs))
	now := pq.core.DB.Now()
	for start := 0; start < len(jobs); start += streamq.MaxBatchChunk {
		chunk := jobs[start:min(start+streamq.MaxBatchChunk, len(jobs))]
		var pp rdb.PushParams
		for i, j := range chunk {
			// The priority is kept in the job's place (its score), not in
			// its fields: the worker sets the header from the score.
			fields, err := pq.fields(ctx, j, now)
			if err != nil {
				return ids, fmt.Errorf("priority: push job %d to %s: %w", start+i, pq.keys.Ready, err)
			}
			pp.Add(pq.score(j.Priority), wire.Pack(fields))
		}
		res, err := pq.db.Push(ctx, &pp)
		if err != nil {
			return ids, fmt.Errorf("priority: push to %s: %w", pq.keys.Ready, err)
		}
		copy(ids[start:], res)
	}
	pq.p.Register(ctx)
	return ids, nil
}

// fields returns the wire fields of a pushed job, after the hooks ran, or
// the error of its checks against the queue's limits (see
// [streamq.ErrTooLarge], [streamq.ErrInvalidHeader]). The priority is kept
// in the job's place (its score), not in its fields: the worker sets the
// header from the score.
func (pq *Queue) fields(ctx context.Context, j Job, now time.Time) ([]any, error) {
	h := pq.p.Headers(ctx, nil, j.Headers)
	delete(h, HeaderPriority)
	if err := pq.core.CheckJob(j.Payload, h); err != nil {
		return nil, err
	}
	wj := wire.Job{Payload: j.Payload, Headers: h, EnqMillis: now.UnixMilli()}
	return wj.Args(), nil
}

// Stats is a snapshot of a priority set.
type Stats struct {
	Ready   int64 // jobs waiting to run
	Leased  int64 // jobs leased by a worker: running, or held by a crashed worker until the lease expires
	Delayed int64 // jobs waiting for a retry
}

// Stats reads the priority set's counters in one round trip.
func (pq *Queue) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	pipe := pq.core.RDB.Pipeline()
	ready := pipe.ZCard(ctx, pq.keys.Ready)
	leased := pipe.ZCard(ctx, pq.keys.Leases)
	delayed := pipe.ZCard(ctx, pq.keys.Delayed)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return s, fmt.Errorf("priority: stats %s: %w", pq.core.Name, err)
	}
	s.Ready, s.Leased, s.Delayed = ready.Val(), leased.Val(), delayed.Val()
	return s, nil
}

// score is the sorted-set score of priority p: ZPOPMIN takes the lowest
// score, so with higher priorities first the score is -p. It is formatted as
// an exact integer (never through a float).
func (pq *Queue) score(p int) string {
	if pq.cfg.LowerFirst {
		return strconv.FormatInt(int64(p), 10)
	}
	return strconv.FormatInt(-int64(p), 10)
}

// WithPriority sets the priority of a stream job
// (streamq.EnqueueOptions.Priority, written as the [HeaderPriority]
// header), which [Forward] reads when it moves the job into the priority
// set. p must lie in [MinPriority, MaxPriority]: the option fails with
// [ErrInvalidPriority] otherwise. A [streamq.Producer] refuses it unless a
// priority set of its queue was created in the process ([NewQueue]), since
// without one nothing orders the jobs by priority.
func WithPriority(p int) streamq.EnqueueOption {
	return func(o *streamq.EnqueueOptions) error {
		if err := checkPriority(p); err != nil {
			return fmt.Errorf("%w: WithPriority(%d): %w", ErrInvalidPriority, p, err)
		}
		o.Priority = &p
		return nil
	}
}

// Of returns the priority of msg from its [HeaderPriority] header. ok is
// false when the header is missing or not a priority. Every job a [Worker]
// runs has it.
func Of(msg *streamq.Message) (p int, ok bool) {
	if msg == nil {
		return 0, false
	}
	s, found := msg.Headers[HeaderPriority]
	if !found {
		return 0, false
	}
	p, err := parsePriority(s)
	return p, err == nil
}

// parsePriority parses a HeaderPriority value.
func parsePriority(s string) (int, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not an integer from %d to %d", ErrInvalidPriority, s, MinPriority, MaxPriority)
	}
	return int(n), nil
}

func checkPriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return fmt.Errorf("%d is outside [%d, %d]", p, MinPriority, MaxPriority)
	}
	return nil
}
