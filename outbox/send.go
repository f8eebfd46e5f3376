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

// sender enqueues the jobs of relayed rows, each under its row's ID: an ID
// that was enqueued before (and whose mark is kept) is a success that
// stores nothing. errs[i] is row i's outcome.
//
// This is the one place that knows how a row becomes exactly one job, so
// that it can move to streamq.WithJobID (the job ID as the idempotency key)
// without touching the relay.
type sender interface {
	send(ctx context.Context, rows []Row) (errs []error)
	// forget drops the marks of rows that the store removed.
	forget(ctx context.Context, rows []Row) error
}

// errNoProducer marks a row of a queue that the relay has no producer for.
var errNoProducer = errors.New("streamq: outbox row of a queue the relay has no producer for")

// markSender is the sender until streamq.WithJobID exists: the jobs of a
// queue's rows are enqueued by one script call per chunk (rdb.Queue.Outbox)
// that writes each job with its row's mark (rdb.Keys.OutboxMark), unless
// the mark exists: then the job was enqueued before and nothing is
// written. The mark is deleted once the row is (see forget), and expires
// after retention in any case.
type markSender struct {
	producers map[string]*streamq.Producer
	retention time.Duration
}

func (s *markSender) send(ctx context.Context, rows []Row) []error {
	errs := make([]error, len(rows))
	type chunk struct {
		p    *streamq.Producer
		rows []int // indexes into rows
		op   rdb.OutboxParams
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
			cp := core.OfProducer(p)
			c = &chunk{p: p, op: rdb.OutboxParams{MarkTTL: s.retention, Replicas: cp.Replicas}}
			byQueue[r.Queue] = c
			chunks = append(chunks, c)
		}
		if errs[i] = s.add(ctx, c.p, &c.op, r); errs[i] == nil {
			c.rows = append(c.rows, i)
		}
	}
	for _, c := range chunks {
		cp := core.OfProducer(c.p)
		err := cp.Queue.DB.Outbox(ctx, &c.op)
		if err != nil {
			err = fmt.Errorf("streamq: outbox enqueue on %s: %w", cp.Queue.Name, err)
		} else if c.op.Added > 0 {
			cp.Register(ctx)
		}
		for _, i := range c.rows {
			errs[i] = err
		}
	}
	return errs
}

// add adds the job of row r to op, or returns why it cannot be enqueued.
func (s *markSender) add(ctx context.Context, p *streamq.Producer, op *rdb.OutboxParams, r *Row) error {
	o, err := decodeOptions(r.Options)
	if err != nil {
		return err
	}
	cp := core.OfProducer(p)
	cq := cp.Queue
	now := cq.DB.Now()
	var due time.Time
	switch {
	case o.At != 0:
		due = time.UnixMilli(o.At)
	case o.In > 0:
		due = now.Add(time.Duration(o.In)*time.Millisecond - r.Age)
	}
	if !due.After(now) {
		due = time.Time{}
	}
	job := wire.Job{Payload: r.Payload, Headers: cp.Headers(ctx, o.Headers, nil), EnqMillis: now.UnixMilli()}
	job.Opts = wire.Opts{Kind: o.Kind, MaxAttempts: o.MaxAttempts, Timeout: o.Timeout, Deadline: o.Deadline, Retention: o.Retention, Tags: o.Tags}
	if err := cq.CheckJob(job.Payload, job.Headers); err != nil {
		return err
	}
	if !due.IsZero() {
		job.JobID = rdb.NewDelayedID()
	}
	op.Add(cq.Keys, r.ID, &job, due)
	return nil
}

func (s *markSender) forget(ctx context.Context, rows []Row) error {
	byClient := make(map[*core.Queue][]string)
	for _, r := range rows {
		if p := s.producers[r.Queue]; p != nil {
			cq := core.OfProducer(p).Queue
			byClient[cq] = append(byClient[cq], cq.Keys.OutboxMark(r.ID))
		}
	}
	var errs []error
	for cq, keys := range byClient {
		// One DEL per queue: every mark of a queue is under its hash tag.
		if err := cq.RDB.Del(ctx, keys...).Err(); err != nil {
			errs = append(errs, fmt.Errorf("streamq: delete outbox marks of %s: %w", cq.Name, err))
		}
	}
	return errors.Join(errs...)
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
