package streamq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
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

// DefaultReplicaRetry is how long a replicated enqueue that was not
// replicated keeps trying when ProducerConfig.ReplicaRetry is 0: longer
// than a planned Sentinel failover leaves the new master without a
// replica (about 12 s in our measurements, see docs/deployment.md).
const DefaultReplicaRetry = 30 * time.Second

// ProducerConfig configures a [Producer]. The zero value is valid.
type ProducerConfig struct {
	// Hooks run for every enqueued job, in order. Defaults to none.
	Hooks []EnqueueHook

	// MinReplicas makes every enqueue wait until that many replicas of the
	// master got the job (WAIT right after the write, on the same
	// connection) before it returns nil, so that a failover to one of them
	// cannot lose a job whose Enqueue succeeded. When fewer acknowledge
	// within ReplicaTimeout, the enqueue is sent again (see ReplicaRetry);
	// when they still do not, Enqueue returns the job's ID with an error
	// wrapping [ErrNotReplicated] (a [*NotReplicatedError] says how many
	// did): the job is stored on the master, and may be lost if it fails
	// over before replicating it. Costs one WAIT per call (a batch waits
	// once). Defaults to 0: return as soon as the master stored the job
	// (a failover can then lose the last jobs; see docs/deployment.md).
	MinReplicas int

	// ReplicaTimeout bounds one wait for MinReplicas. It must be shorter
	// than the client's ReadTimeout (the WAIT is read like any reply).
	// Defaults to DefaultReplicaTimeout.
	ReplicaTimeout time.Duration

	// ReplicaRetry is how long, with MinReplicas, an enqueue that too few
	// replicas acknowledged, or that failed as writes do during a failover
	// (a lost connection, READONLY, NOREPLICAS), keeps being sent again,
	// backing off up to 500 ms between sends, before it returns the error.
	// Every send carries the call's idempotency token, so the job is stored
	// once: on the master that has it now, whichever that is. This is how
	// an enqueue rides a failover, during which the new master has no
	// replica for seconds, instead of failing. The caller's ctx bounds it
	// too. -1 disables it: fail after the first ReplicaTimeout. Defaults
	// to DefaultReplicaRetry.
	ReplicaRetry time.Duration

	// Codec encodes the args of typed jobs ([EnqueueArgs]). The workers'
	// [Mux] must decode with the same codec ([MuxCodec]). Defaults to
	// [JSONCodec].
	Codec Codec
}

// Producer enqueues jobs into a [Queue]. It is safe for concurrent use.
type Producer struct {
	producerHandle // shared with streamq's other packages (internal/core)
	q              *Queue
	cfg            ProducerConfig
	codec          Codec
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
	switch {
	case p.cfg.ReplicaRetry == 0:
		p.cfg.ReplicaRetry = DefaultReplicaRetry
	case p.cfg.ReplicaRetry < -1:
		return nil, configErr("ProducerConfig.ReplicaRetry", "%s is negative: use -1 not to send a write again, 0 for the default (%s), or how long to keep trying", p.cfg.ReplicaRetry, DefaultReplicaRetry)
	}
	p.codec = p.cfg.Codec
	if p.codec == nil {
		p.codec = JSONCodec{}
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
	p.producerHandle = core.NewProducerHandle(&core.Producer{Queue: core.Of(q), Hooks: hooks, Kind: rdb.KindStream, Replicas: p.replicas()})
	return p, nil
}

// Queue returns the producer's queue.
func (p *Producer) Queue() *Queue { return p.q }

// Job is one job of a batch for [Producer.EnqueueBatch].
type Job struct {
	Payload []byte
	Headers map[string]string // optional; merged over the batch's headers
	// ID is the job's ID, as [WithJobID] gives it to one job ("": one is
	// generated). Give every job of a batch an ID, or none.
	ID string
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
//
// Jobs with IDs ([Job.ID]) are stored as [WithJobID] stores one, still one
// script call per chunk: a job whose ID names a job that lives or finished
// within QueueConfig.DoneRetention (or an earlier job of the batch) is not
// written, its ids[i] is "", and the call returns the other jobs' IDs with
// an error wrapping [ErrDuplicate].
func (p *Producer) EnqueueBatch(ctx context.Context, jobs []Job, opts ...EnqueueOption) (ids []string, err error) {
	return p.enqueue(ctx, jobs, opts)
}

func (p *Producer) enqueue(ctx context.Context, jobs []Job, opts []EnqueueOption) ([]string, error) {
	var o EnqueueOptions
	if err := buildOptions(&o, opts); err != nil {
		return nil, fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
	}
	return p.enqueueWith(ctx, jobs, &o)
}

// enqueueWith enqueues jobs with the options o.
func (p *Producer) enqueueWith(ctx context.Context, jobs []Job, o *EnqueueOptions) ([]string, error) {
	if err := p.checkOptions(o); err != nil {
		return nil, fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
	}
	ids := make([]string, len(jobs))
	if len(jobs) == 0 {
		return ids, nil
	}
	b, err := p.prepare(jobs, o)
	switch {
	case err != nil:
		return ids, err
	case b.withIDs:
		return ids, p.addWithIDs(ctx, jobs, o, b.enq, b.due, ids)
	case b.one:
		return p.enqueueOne(ctx, jobs[0], o, b.enq, b.due, b.lock)
	}
	if b.due.later() {
		err = p.schedule(ctx, jobs, o, b.enq, b.due, ids)
	} else {
		err = p.add(ctx, jobs, o, b.enq, ids)
	}
	if err != nil {
		return ids, err
	}
	core.OfProducer(p).Register(ctx)
	return ids, nil
}

// batchPlan is how enqueueWith writes a batch: the enqueue time, when the
// jobs are due, their lock, and whether the jobs carry their own IDs
// (addWithIDs) or go one by one (enqueueOne: a dedup mode or a chosen ID).
type batchPlan struct {
	enq          int64
	due          when
	lock         rdb.Lock
	withIDs, one bool
}

// prepare checks jobs (at least one) and o, whose options checkOptions
// accepted, and returns the plan of their batch.
func (p *Producer) prepare(jobs []Job, o *EnqueueOptions) (batchPlan, error) {
	now := p.q.db.Now()
	b := batchPlan{enq: now.UnixMilli(), due: when{in: o.In}}
	if o.In <= 0 && o.At.After(now) {
		b.due.at = o.At
	}
	if !o.Deadline.IsZero() {
		if err := checkDeadline(o.Deadline, now, b.due.approx(now)); err != nil {
			return b, fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
		}
	}
	var err error
	if b.lock, err = o.lock(jobs[0].Payload); err != nil {
		return b, fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
	}
	if slices.ContainsFunc(jobs, func(j Job) bool { return j.ID != "" }) {
		if err := checkJobIDs(jobs, o, b.lock); err != nil {
			return b, fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
		}
		b.withIDs = true
		return b, nil
	}
	if b.lock.Mode != "" || o.JobID != "" {
		if len(jobs) != 1 {
			return b, configErr(o.oneByOne(), "cannot be used with EnqueueBatch: enqueue such jobs one by one")
		}
		b.one = true
	}
	return b, nil
}

// checkOptions refuses options this producer cannot honour, and turns a
// priority into the header the priority set's forwarder reads.
func (p *Producer) checkOptions(o *EnqueueOptions) error {
	if o.JobID != "" {
		if problem := rdb.JobIDProblem(o.JobID); problem != "" {
			return configErr("EnqueueOptions.JobID", "%s", problem)
		}
	}
	switch {
	case o.Priority == nil:
		return nil
	case !core.Of(p.q).HasPrioritySet.Load():
		return configErr("priority.WithPriority", "queue %q has no priority set in this process, so nothing would order its jobs by priority: create the set with priority.NewQueue on this Queue (and run priority.Forward on its consumer), or drop the option", p.q.Name())
	}
	h := make(map[string]string, len(o.Headers)+1) // never the caller's map
	maps.Copy(h, o.Headers)
	h[wire.HeaderPriority] = strconv.Itoa(*o.Priority)
	o.Headers = h
	return nil
}

// checkDeadline refuses a deadline that has passed at now, or that comes
// before the job is due at at (zero: now).
func checkDeadline(deadline, now, at time.Time) error {
	if !deadline.After(now) {
		return configErr("Deadline", "%s has passed (the queue's clock reads %s): pass a time in the future", deadline.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	if !at.IsZero() && !deadline.After(at) {
		return configErr("Deadline", "%s is not after the time the job is due, %s: the job could never run; move the deadline or the due time", deadline.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
	}
	return nil
}

// add adds jobs to the stream, in chunks of at most MaxBatchChunk (one
// script call each), and sets their IDs in ids. A chunk whose jobs differ
// only by payload carries their common fields once.
func (p *Producer) add(ctx context.Context, jobs []Job, o *EnqueueOptions, enq int64, ids []string) error {
	for start := 0; start < len(jobs); start += MaxBatchChunk {
		ep, err := p.addCall(ctx, jobs, start, o, enq, ids)
		if err != nil {
			return err
		}
		if err := p.q.db.Enqueue(ctx, ep); err != nil {
			return p.addFailed(ids[start:], err)
		}
	}
	return nil
}

// addCall returns the script call that adds the chunk of jobs due now that
// begins at start (at most MaxBatchChunk jobs), setting their IDs in
// ids[start:]. Each chunk is built when it is sent: a large batch never
// holds the arguments of all its calls at once.
func (p *Producer) addCall(ctx context.Context, jobs []Job, start int, o *EnqueueOptions, enq int64, ids []string) (*rdb.EnqueueParams, error) {
	chunk := jobs[start:min(start+MaxBatchChunk, len(jobs))]
	ep := &rdb.EnqueueParams{IDs: ids[start:], Replicas: p.replicas()}
	var firstHeaders map[string]string
	for i, j := range chunk {
		h := p.headers(ctx, o.Headers, j.Headers)
		if err := core.Of(p.q).CheckJob(j.Payload, h); err != nil {
			return nil, fmt.Errorf("streamq: enqueue job %d of %d on %s: %w", start+i, len(jobs), p.q.keys.Stream, err)
		}
		if i > 0 && maps.Equal(h, firstHeaders) {
			ep.AddLike(j.Payload)
			continue
		}
		if i == 0 {
			firstHeaders = h
		}
		wj := wire.Job{Payload: j.Payload, Headers: h, EnqMillis: enq}
		o.setJobOptions(&wj)
		ep.AddJob(&wj)
	}
	return ep, nil
}

// addFailed returns the error of an add call that failed, whose jobs and
// those after it have their IDs in ids: it clears them unless the jobs
// were written (not replicated).
func (p *Producer) addFailed(ids []string, err error) error {
	if !errors.Is(err, ErrNotReplicated) {
		clear(ids)
	}
	if !errors.Is(err, ErrQueueFull) {
		err = fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
	}
	return err
}

// checkJobIDs checks the IDs of jobs, some of which have one: every job
// needs a valid one, and no option may choose another ID or dedup.
func checkJobIDs(jobs []Job, o *EnqueueOptions, lock rdb.Lock) error {
	switch {
	case o.JobID != "":
		return configErr("Job.ID", "cannot be used with WithJobID: give the ID in Job.ID only")
	case lock.Mode != "":
		return configErr("Job.ID", "cannot be used with %s: choose the job ID or a dedup mode", o.oneByOne())
	}
	for i, j := range jobs {
		if j.ID == "" {
			return configErr(fmt.Sprintf("jobs[%d].ID", i), "is empty while other jobs of the batch have one: give every job of a batch an ID, or none")
		}
		if problem := rdb.JobIDProblem(j.ID); problem != "" {
			return configErr(fmt.Sprintf("jobs[%d].ID", i), "%s", problem)
		}
	}
	return nil
}

// addWithIDs stores jobs with their own IDs, due as due says, in chunks of
// at most MaxBatchChunk (one script call each), and sets the IDs of the
// jobs stored in ids. Jobs whose IDs were taken are reported by an error
// wrapping ErrDuplicate, after every chunk was sent.
func (p *Producer) addWithIDs(ctx context.Context, jobs []Job, o *EnqueueOptions, enq int64, due when, ids []string) error {
	dueArg := rdb.DueArg(due.at, due.in)
	var taken []string
	for start := 0; start < len(jobs); start += MaxBatchChunk {
		chunk := jobs[start:min(start+MaxBatchChunk, len(jobs))]
		ep := rdb.EnqueueIDsParams{Replicas: p.replicas()}
		for i, j := range chunk {
			wj := wire.Job{Payload: j.Payload, Headers: p.headers(ctx, o.Headers, j.Headers), EnqMillis: enq}
			o.setJobOptions(&wj)
			if err := core.Of(p.q).CheckJob(wj.Payload, wj.Headers); err != nil {
				return fmt.Errorf("streamq: enqueue job %d of %d on %s: %w", start+i, len(jobs), p.q.keys.Stream, err)
			}
			ep.Add(p.q.db, j.ID, &wj, dueArg)
		}
		err := p.q.db.EnqueueIDs(ctx, &ep)
		if err != nil && !errors.Is(err, ErrNotReplicated) {
			if !errors.Is(err, ErrQueueFull) {
				err = fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
			}
			return err
		}
		for i, j := range chunk {
			if ep.Taken[i] {
				taken = append(taken, j.ID)
			} else {
				ids[start+i] = j.ID
			}
		}
		if ep.Added > 0 {
			core.OfProducer(p).Register(ctx)
		}
		if err != nil {
			return fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
		}
	}
	if len(taken) > 0 {
		return fmt.Errorf("%w: %d of %d job IDs name jobs that live or finished within QueueConfig.DoneRetention (their ids are \"\"), the first %q", ErrDuplicate, len(taken), len(jobs), taken[0])
	}
	return nil
}

// when is when a job is due: in after the server's time when in > 0, else
// at; both zero: now.
type when struct {
	at time.Time
	in time.Duration
}

// later reports whether the job goes into the delayed set.
func (w when) later() bool { return w.in > 0 || !w.at.IsZero() }

// approx returns when the job is due by the process's clock now (zero: now),
// for checks of the caller's options only: the due time that counts is the
// server's.
func (w when) approx(now time.Time) time.Time {
	if w.in > 0 {
		return now.Add(w.in)
	}
	return w.at
}

// schedule stores jobs due at due in the delayed set, in chunks of at most
// MaxBatchChunk, and sets their IDs in ids.
func (p *Producer) schedule(ctx context.Context, jobs []Job, o *EnqueueOptions, enq int64, due when, ids []string) error {
	for start := 0; start < len(jobs); start += MaxBatchChunk {
		chunk := jobs[start:min(start+MaxBatchChunk, len(jobs))]
		sp := rdb.ScheduleParams{Due: due.at, In: due.in, Replicas: p.replicas()}
		for i, j := range chunk {
			jf := wire.Job{Payload: j.Payload, Headers: p.headers(ctx, o.Headers, j.Headers), EnqMillis: enq}
			o.setJobOptions(&jf)
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

// enqueueOne enqueues one job with a chosen ID or under a dedup lock (see
// jobid.go): into the stream, or into the delayed set when due is later
// (or the lock debounces).
func (p *Producer) enqueueOne(ctx context.Context, job Job, o *EnqueueOptions, enq int64, due when, lock rdb.Lock) ([]string, error) {
	jf := wire.Job{Payload: job.Payload, Headers: p.headers(ctx, o.Headers, job.Headers), EnqMillis: enq}
	o.setJobOptions(&jf)
	if err := core.Of(p.q).CheckJob(jf.Payload, jf.Headers); err != nil {
		return []string{""}, fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
	}
	outcome, id, err := p.q.db.EnqueueOne(ctx, &rdb.EnqueueOneParams{Job: &jf, ID: o.JobID, Due: due.at, In: due.in, Lock: lock, Replicas: p.replicas()})
	ok := outcome != rdb.Duplicate
	if err != nil {
		switch {
		case errors.Is(err, ErrQueueFull):
			return []string{""}, err
		case errors.Is(err, ErrNotReplicated) && ok:
			return []string{id}, fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
		case errors.Is(err, ErrNotReplicated):
			// The holder was read, not written: nothing to wait for.
		default:
			return []string{""}, fmt.Errorf("streamq: enqueue on %s: %w", p.q.keys.Stream, err)
		}
	}
	switch {
	case ok:
		core.OfProducer(p).Register(ctx)
		return []string{id}, nil
	case o.JobID != "" && id == o.JobID:
		return []string{id}, fmt.Errorf("%w: job ID %q names a job that lives or finished within QueueConfig.DoneRetention", ErrDuplicate, id)
	}
	return []string{id}, fmt.Errorf("%w: %s key %q is held by job %s", ErrDuplicate, lock.Mode, lock.Key, id)
}

// replicas returns what the producer's writes wait for.
func (p *Producer) replicas() rdb.Replicas {
	return rdb.Replicas{N: p.cfg.MinReplicas, Timeout: p.cfg.ReplicaTimeout, Retry: max(p.cfg.ReplicaRetry, 0)}
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
