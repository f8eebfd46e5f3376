package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// markSender is the sender until streamq.WithJobID exists: every row is
// enqueued by the unique-enqueue script with the row's mark
// (rdb.Keys.OutboxMark) as its lock, which the job does not release: the
// mark and the job are written in one script call, and a second call for
// the row finds the mark and adds nothing. The mark is deleted once the
// row is (see forget), and expires after retention in any case.
type markSender struct {
	producers   map[string]*streamq.Producer
	retention   time.Duration
	concurrency int
}

func (s *markSender) send(ctx context.Context, rows []Row) []error {
	errs := make([]error, len(rows))
	sem := make(chan struct{}, s.concurrency)
	var wg sync.WaitGroup
	for i := range rows {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = s.sendOne(ctx, &rows[i])
		}()
	}
	wg.Wait()
	return errs
}

// sendOne enqueues the job of row r once.
func (s *markSender) sendOne(ctx context.Context, r *Row) error {
	p := s.producers[r.Queue]
	if p == nil {
		return fmt.Errorf("%w %q: add a producer of the queue to RelayConfig.Producers", errNoProducer, r.Queue)
	}
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
	if err := cq.CheckJob(job.Payload, job.Headers); err != nil {
		return err
	}
	if !due.IsZero() {
		job.JobID = rdb.NewDelayedID()
	}
	_, _, err = cq.DB.EnqueueUnique(ctx, &rdb.EnqueueUniqueParams{
		Job: &job, Lock: cq.Keys.OutboxMark(r.ID), LockTTL: s.retention, Due: due, Replicas: cp.Replicas,
	})
	if err != nil {
		return err
	}
	// Enqueued now, or found marked: enqueued before, by this relay or
	// another one that did not remove the row.
	cp.Register(ctx)
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
