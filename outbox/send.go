package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// JobID returns the ID of the job that the relay enqueues for the row with
// ID rowID (what [Prepare] and the drivers' Enqueue return), unless the row
// was enqueued with a job ID of the caller's ([streamq.WithJobID]), which
// the job keeps: "outbox:" and the row ID. Producers cannot choose IDs with
// that prefix, so the IDs of rows never meet other jobs' IDs. The job keeps
// this ID for its whole life: inspect and `streamq job <queue> <id>` find
// it by it.
func JobID(rowID string) string { return rdb.OutboxIDPrefix + rowID }

// sender enqueues the jobs of relayed rows, each under its job ID (see
// JobID): an ID that names a job that lives or finished within its queue's
// QueueConfig.DoneRetention is a success that stores nothing. errs[i] is
// row i's outcome.
type sender struct {
	producers map[string]*streamq.Producer
}

// errNoProducer marks a row of a queue that the relay has no producer for.
var errNoProducer = errors.New("streamq: outbox row of a queue the relay has no producer for")

// errIDTaken marks a row with a job ID of its caller's that names a job
// that lives or finished within the queue's done retention: the row is done
// (removed) without a new job, as Producer.Enqueue returns ErrDuplicate.
var errIDTaken = fmt.Errorf("%w: the outbox row's job ID names a job that lives or finished within QueueConfig.DoneRetention; row removed without a new job", streamq.ErrDuplicate)

// send enqueues the jobs of rows with one script call per chunk of a
// queue's rows (rdb.Queue.EnqueueIDs).
func (s *sender) send(ctx context.Context, rows []Row) []error {
	errs := make([]error, len(rows))
	type chunk struct {
		p    *streamq.Producer
		rows []int // indexes into rows
		own  []bool
		op   rdb.EnqueueIDsParams
	}
	byQueue := make(map[string]*chunk)
	var chunks []*chunk
	for i := range rows {
		r := &rows[i]
		p := s.producers[r.Queue]
		if p == nil {
			errs[i] = fmt.Errorf("%w %q: add a producer of the queue to RelayConfig.Producers", errNoProducer, r.Queue)
			continue
		}
		c := byQueue[r.Queue]
		if c == nil || c.op.Len() == streamq.MaxBatchChunk {
			c = &chunk{p: p, op: rdb.EnqueueIDsParams{Replicas: core.OfProducer(p).Replicas}}
			byQueue[r.Queue] = c
			chunks = append(chunks, c)
		}
		own, err := add(ctx, c.p, &c.op, r)
		if errs[i] = err; err == nil {
			c.rows, c.own = append(c.rows, i), append(c.own, own)
		}
	}
	for _, c := range chunks {
		cp := core.OfProducer(c.p)
		err := cp.Queue.DB.EnqueueIDs(ctx, &c.op)
		if err != nil {
			err = fmt.Errorf("streamq: outbox enqueue on %s: %w", cp.Queue.Name, err)
		} else if c.op.Added > 0 {
			cp.Register(ctx)
		}
		for k, i := range c.rows {
			errs[i] = err
			if err == nil && c.own[k] && c.op.Taken[k] {
				errs[i] = errIDTaken
			}
		}
	}
	return errs
}

// add adds the job of row r to op, or returns why it cannot be enqueued;
// own reports that the row carries a job ID of its caller's.
func add(ctx context.Context, p *streamq.Producer, op *rdb.EnqueueIDsParams, r *Row) (own bool, err error) {
	o, err := decodeOptions(r.Options)
	if err != nil {
		return false, err
	}
	cp := core.OfProducer(p)
	cq := cp.Queue
	now := cq.DB.Now()
	job := wire.Job{Payload: r.Payload, Headers: cp.Headers(ctx, o.Headers, nil), EnqMillis: now.UnixMilli()}
	job.Opts = wire.Opts{Kind: o.Kind, MaxAttempts: o.MaxAttempts, Timeout: o.Timeout, Deadline: o.Deadline, Retention: o.Retention, Tags: o.Tags}
	if err := cq.CheckJob(job.Payload, job.Headers); err != nil {
		return false, err
	}
	id := JobID(r.ID)
	if o.ID != "" {
		if problem := rdb.JobIDProblem(o.ID); problem != "" {
			return false, fmt.Errorf("%w: job ID %s", errBadRow, problem)
		}
		id = o.ID
	}
	// A delay counts from the insert (the row's age is the database's
	// measure), after Redis's clock; a due time past goes into the stream,
	// as Producer.Enqueue does.
	due := "0"
	switch {
	case o.At != 0 && time.UnixMilli(o.At).After(now):
		due = rdb.DueArg(time.UnixMilli(o.At), 0)
	case o.In > 0:
		due = rdb.DueArg(time.Time{}, time.Duration(o.In)*time.Millisecond-r.Age)
	}
	op.Add(cq.DB, id, &job, due)
	return o.ID != "", nil
}

// rowError reports whether err is the row's own problem, which a retry
// soon will not fix (the row waits with a backoff), rather than Redis's
// (the whole batch waits for Redis).
func rowError(err error) bool {
	for _, e := range []error{errNoProducer, errBadRow, streamq.ErrTooLarge, streamq.ErrInvalidHeader, streamq.ErrQueueFull} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
