package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
)

// Relay defaults.
const (
	// DefaultBatchSize is how many rows a relay claims at once when
	// RelayConfig.BatchSize is 0.
	DefaultBatchSize = 500
	// DefaultPollInterval is how often an idle relay looks for rows when
	// RelayConfig.PollInterval is 0.
	DefaultPollInterval = time.Second
	// DefaultBatches is how many batches a relay works on at once when
	// RelayConfig.Batches is 0.
	DefaultBatches = 1
	// DefaultRetention was how long the mark of a relayed row was kept.
	//
	// Deprecated: a relayed row's job ID is kept taken by its queue's
	// QueueConfig.DoneRetention (streamq.DefaultDoneRetention); the relay
	// writes no marks.
	DefaultRetention = 24 * time.Hour

	// maxRowRetry bounds the wait of a row that failed (see rowRetry).
	maxRowRetry = 5 * time.Minute
	// minBackoff and maxBackoff bound the relay's pause after an error of
	// Redis or of the database.
	minBackoff = 50 * time.Millisecond
	maxBackoff = 5 * time.Second
	// finishTimeout bounds the work on a batch once it is claimed.
	finishTimeout = time.Minute
)

// RelayConfig configures a [Relay]. Producers is required.
type RelayConfig struct {
	// Producers are the producers that rows are enqueued through, one per
	// queue name (their config applies: hooks, MinReplicas). A row of a
	// queue with no producer here waits, failing, until a relay that has
	// one takes it. Required.
	Producers []*streamq.Producer

	// BatchSize is how many rows the relay claims at once. Defaults to
	// DefaultBatchSize.
	BatchSize int

	// Batches is how many batches Run works on at once while rows wait:
	// more overlap the database's commits with Redis's work, for
	// throughput. Defaults to DefaultBatches.
	Batches int

	// PollInterval is how often an idle relay looks for rows: the only
	// wake-up on SQLite, the fallback on PostgreSQL, whose relay wakes on
	// LISTEN/NOTIFY when a transaction with rows commits. Defaults to
	// DefaultPollInterval.
	PollInterval time.Duration

	// Retention must be 0. It was how long the mark of a relayed row was
	// kept; the relay writes no marks.
	//
	// Deprecated: a row's job has the row's job ID (see [JobID]); a relay
	// that claims the row again while that job lives, or within its
	// queue's QueueConfig.DoneRetention after it finished, removes the row
	// without enqueueing it again. Set that instead.
	Retention time.Duration

	// Logger receives the relay's errors. nil means slog.Default().
	Logger *slog.Logger
}

// Relay moves the rows of an outbox table to Redis: each row becomes one
// job, enqueued through the producer of its queue, and the row is deleted
// after Redis accepted the job (after MinReplicas replicas did, when the
// producer asks for them). Several relays may run over the same table, in
// one process or many: a row is held by one at a time, and a row that one
// relay enqueued and another one claims again (the first died before
// deleting it) is not enqueued twice. See docs/outbox.md.
type Relay struct {
	store  Store
	cfg    RelayConfig
	sender sender
	log    *slog.Logger
}

// checkProducer refuses producer i, of a queue that keeps no done markers.
func checkProducer(i int, p *streamq.Producer) error {
	if !core.OfProducer(p).Queue.DB.KeepsDone() {
		return &streamq.ConfigError{Field: fmt.Sprintf("RelayConfig.Producers[%d]", i), Reason: fmt.Sprintf("is of queue %q, which keeps no done markers (QueueConfig.DoneRetention -1): a row claimed again after its job finished would be enqueued twice; give the queue a DoneRetention longer than the database may stay unreachable", p.Queue().Name())}
	}
	return nil
}

// NewRelay returns a relay of store (from outbox/postgres or
// outbox/sqlite) configured by cfg. It validates cfg without talking to
// Redis or the database, and never modifies *cfg.
func NewRelay(store Store, cfg *RelayConfig) (*Relay, error) {
	if store == nil {
		return nil, &streamq.ConfigError{Field: "store", Reason: "is nil: open one with outbox/postgres or outbox/sqlite"}
	}
	if cfg == nil {
		return nil, &streamq.ConfigError{Field: "RelayConfig", Reason: "is nil: give at least RelayConfig.Producers"}
	}
	r := &Relay{store: store, cfg: *cfg}
	c := &r.cfg
	producers := make(map[string]*streamq.Producer, len(c.Producers))
	for i, p := range c.Producers {
		if p == nil {
			return nil, &streamq.ConfigError{Field: fmt.Sprintf("RelayConfig.Producers[%d]", i), Reason: "is nil: remove it"}
		}
		if err := checkProducer(i, p); err != nil {
			return nil, err
		}
		name := p.Queue().Name()
		if producers[name] != nil {
			return nil, &streamq.ConfigError{Field: fmt.Sprintf("RelayConfig.Producers[%d]", i), Reason: fmt.Sprintf("is a second producer of queue %q: give one per queue name", name)}
		}
		producers[name] = p
	}
	if len(producers) == 0 {
		return nil, &streamq.ConfigError{Field: "RelayConfig.Producers", Reason: "is empty: give a producer of every queue the outbox's rows go to"}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"PollInterval", &c.PollInterval, DefaultPollInterval}} {
		if *f.v < 0 {
			return nil, &streamq.ConfigError{Field: "RelayConfig." + f.name, Reason: fmt.Sprintf("is negative (%s): use 0 for the default, %s", *f.v, f.def)}
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.Retention != 0 {
		return nil, &streamq.ConfigError{Field: "RelayConfig.Retention", Reason: fmt.Sprintf("is %s: the relay keeps no marks any more; remove it, and set QueueConfig.DoneRetention of the rows' queues (how long a job's ID stays taken after it finished)", c.Retention)}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"BatchSize", &c.BatchSize, DefaultBatchSize}, {"Batches", &c.Batches, DefaultBatches}} {
		if *f.v < 0 {
			return nil, &streamq.ConfigError{Field: "RelayConfig." + f.name, Reason: fmt.Sprintf("is negative (%d): use 0 for the default, %d", *f.v, f.def)}
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	c.Producers = append([]*streamq.Producer(nil), c.Producers...)
	r.log = c.Logger
	if r.log == nil {
		r.log = slog.Default()
	}
	r.sender = sender{producers: producers}
	return r, nil
}

// Run relays rows until ctx ends, then returns nil; a batch under way when
// ctx ends is given back to the table untouched or finished, never left
// half-done in a way that loses or doubles a job. Errors of Redis or of the
// database are logged and retried with a backoff (up to 5 s); rows that
// fail on their own (see [Backlog]) wait with a backoff of their own.
func (r *Relay) Run(ctx context.Context) error {
	waker, _ := r.store.(Waker)
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		full, err := r.runBatches(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			r.log.ErrorContext(ctx, "streamq: outbox relay", "error", err, "retry_in", backoff)
			sleep(ctx, backoff)
			continue
		case full:
			backoff = 0
			continue // more may be waiting
		}
		backoff = 0
		if waker == nil {
			sleep(ctx, r.cfg.PollInterval)
		} else if err := waker.Wait(ctx, r.cfg.PollInterval); err != nil && ctx.Err() == nil {
			r.log.WarnContext(ctx, "streamq: outbox notifications fail; polling", "error", err, "poll_interval", r.cfg.PollInterval)
			sleep(ctx, r.cfg.PollInterval)
		}
	}
	return nil
}

// runBatches runs RelayConfig.Batches batches at once, and reports whether
// one of them was full (more rows may wait) and the first error.
func (r *Relay) runBatches(ctx context.Context) (full bool, err error) {
	if r.cfg.Batches == 1 {
		n, err := r.RunOnce(ctx)
		return n == r.cfg.BatchSize, err
	}
	ns := make([]int, r.cfg.Batches)
	errs := make([]error, r.cfg.Batches)
	var wg sync.WaitGroup
	for i := range r.cfg.Batches {
		wg.Go(func() { ns[i], errs[i] = r.RunOnce(ctx) })
	}
	wg.Wait()
	return slices.Contains(ns, r.cfg.BatchSize), errors.Join(errs...)
}

// RunOnce relays one batch of up to RelayConfig.BatchSize rows and returns
// how many rows it removed from the table (their jobs are in Redis).
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	claim, err := r.store.Claim(ctx, r.cfg.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("streamq: outbox claim: %w", err)
	}
	rows := claim.Rows()
	if len(rows) == 0 {
		return 0, claim.Release(ctx)
	}
	// The rows' jobs are written even if ctx ends now: a batch stopped
	// half-way is safe (the rest waits) but wastes the claim.
	sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	errs := r.sender.send(sendCtx, rows)
	done := make([]string, 0, len(rows))
	var failed []Failure
	var redisErr error
	for i, err := range errs {
		switch {
		case err == nil:
			done = append(done, rows[i].ID)
		case errors.Is(err, errIDTaken):
			done = append(done, rows[i].ID)
			r.log.InfoContext(ctx, "streamq: outbox row's job ID taken", "queue", rows[i].Queue, "row_id", rows[i].ID, "error", err)
		case rowError(err):
			failed = append(failed, Failure{ID: rows[i].ID, Error: err.Error(), Retry: rowRetry(rows[i].Attempts)})
			r.log.WarnContext(ctx, "streamq: outbox row not enqueued", "queue", rows[i].Queue, "row_id", rows[i].ID, "attempt", rows[i].Attempts+1, "error", err)
		case redisErr == nil:
			redisErr = err
		}
	}
	removed, err := claim.Finish(sendCtx, done, failed)
	if err != nil {
		return 0, errors.Join(fmt.Errorf("streamq: outbox remove relayed rows: %w", err), redisErr)
	}
	if redisErr != nil {
		return len(removed), fmt.Errorf("streamq: outbox enqueue: %w", redisErr)
	}
	return len(removed), nil
}

// Backlog reports what waits in the relay's table.
func (r *Relay) Backlog(ctx context.Context) (*Backlog, error) { return r.store.Backlog(ctx) }

// rowRetry is how long a row that failed attempts times before waits: 1 s,
// doubling, up to 5 minutes.
func rowRetry(attempts int) time.Duration {
	if attempts >= 9 {
		return maxRowRetry
	}
	return min(time.Second<<attempts, maxRowRetry)
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
