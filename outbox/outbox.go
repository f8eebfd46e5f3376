package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
)

// DefaultTable is the outbox table's name when a driver's config leaves it
// empty.
const DefaultTable = "streamq_outbox"

// Row is one job waiting in an outbox table: what [Prepare] makes for a
// driver to insert, and what a [Claim] hands to the relay.
type Row struct {
	// ID is the row's identity, 32 lowercase hex digits of a random 128-bit
	// number made by Prepare. The relay enqueues the job once per ID, with
	// the job ID [JobID](ID) unless the caller chose one.
	ID string
	// Queue is the name of the queue the job goes to.
	Queue string
	// Payload is the job's payload.
	Payload []byte
	// Options are the job's enqueue options, encoded by Prepare (JSON; ""
	// for none).
	Options string

	// Set by Claim only:

	// Age is how long ago the row was inserted, by the database's clock.
	Age time.Duration
	// Attempts counts the relay's earlier failures to enqueue the row.
	Attempts int
}

// Store is an outbox table as a [Relay] uses it. Packages outbox/postgres
// and outbox/sqlite implement it; users call their constructors, not these
// methods.
type Store interface {
	// Claim takes up to n rows that are due (their available time is
	// past) and that no other relay holds, oldest first. The rows stay in
	// the table until Finish removes them; a relay that dies holding a
	// claim loses it (PostgreSQL: its transaction ends; SQLite: its lease
	// expires) and another relay takes the rows.
	Claim(ctx context.Context, n int) (Claim, error)
	// Backlog reports the rows waiting, per queue.
	Backlog(ctx context.Context) (*Backlog, error)
}

// Claim is a set of rows that one relay holds.
type Claim interface {
	// Rows returns the claimed rows.
	Rows() []Row
	// Finish removes the rows of done, puts back the rows of failed with
	// their errors, due again after their backoff, and releases every
	// other claimed row untouched; it returns the IDs of the rows it
	// removed (a row whose claim this relay lost is not removed).
	Finish(ctx context.Context, done []string, failed []Failure) (removed []string, err error)
	// Release gives every claimed row back untouched.
	Release(ctx context.Context) error
}

// Failure is a row that the relay could not enqueue, for [Claim.Finish].
type Failure struct {
	ID    string
	Error string
	// Retry is how long the row waits before the next attempt.
	Retry time.Duration
}

// Waker is implemented by a [Store] that can tell a relay that rows were
// committed (PostgreSQL's LISTEN/NOTIFY), so that it need not poll.
type Waker interface {
	// Wait returns when rows may have been committed since the last call,
	// after d at the latest, or when ctx ends. An error means notifications
	// do not work now; the relay polls then.
	Wait(ctx context.Context, d time.Duration) error
}

// Backlog is what waits in an outbox table.
type Backlog struct {
	// Rows is the number of rows waiting, in every queue.
	Rows int64
	// Oldest is the age of the oldest row (by the database's clock); 0
	// when there is none.
	Oldest time.Duration
	// Lag is how long the oldest row that is due and has not failed has
	// been due (by the database's clock): how far the relays are behind;
	// 0 when there is none. Rows that wait for a delay or a retry after a
	// failure do not count.
	Lag time.Duration
	// Failing counts the rows that the relay failed to enqueue at least
	// once (see [QueueBacklog.LastError]).
	Failing int64
	// Queues is the backlog per queue, by queue name.
	Queues []QueueBacklog
}

// QueueBacklog is the backlog of one queue.
type QueueBacklog struct {
	Queue   string
	Rows    int64
	Oldest  time.Duration
	Lag     time.Duration
	Failing int64
	// LastError is the error of a failing row of the queue, if any.
	LastError string
}

// Total sums the queues' backlogs into b's totals.
func (b *Backlog) Total() {
	b.Rows, b.Oldest, b.Lag, b.Failing = 0, 0, 0, 0
	for _, q := range b.Queues {
		b.Rows += q.Rows
		b.Failing += q.Failing
		b.Oldest = max(b.Oldest, q.Oldest)
		b.Lag = max(b.Lag, q.Lag)
	}
}

// rowOptions are the enqueue options a row carries (its Options column,
// JSON); durations and times in milliseconds.
type rowOptions struct {
	Headers     map[string]string `json:"headers,omitempty"`
	At          int64             `json:"at,omitempty"` // due time, Unix ms
	In          int64             `json:"in,omitempty"` // delay after the insert
	Kind        string            `json:"kind,omitempty"`
	MaxAttempts int               `json:"ma,omitempty"`
	Timeout     int64             `json:"to,omitempty"`
	Deadline    int64             `json:"dl,omitempty"` // Unix ms
	Retention   int64             `json:"rr,omitempty"`
	Tags        []string          `json:"tags,omitempty"`
	ID          string            `json:"id,omitempty"` // a job ID of the caller's
}

// Prepare checks a job for queue q and returns its row, for a driver to
// insert: opts as [streamq.Producer.Enqueue] checks them, and the payload
// and headers against q's limits. Options the outbox cannot keep exactly
// once, or cannot apply, fail with an error that says so: [streamq.Unique]
// (its lock ends with the job, so it cannot stop a second relay of the
// row), a flow key (not supported by this version), a priority (the relay
// writes into the stream; forward it with the priority.WithPriority header
// instead).
//
// The job's ID is [JobID] of the row's ID, or the caller's own with
// [streamq.WithJobID]: then a row whose ID names a job that lives or
// finished within the queue's QueueConfig.DoneRetention is removed by the
// relay without a new job, as [streamq.Producer.Enqueue] returns
// [streamq.ErrDuplicate] (the transaction has committed: the relay logs
// it).
func Prepare(q *streamq.Queue, payload []byte, opts []streamq.EnqueueOption) (*Row, error) {
	if q == nil {
		return nil, &streamq.ConfigError{Field: "queue", Reason: "is nil: pass the *streamq.Queue the job goes to"}
	}
	var o streamq.EnqueueOptions
	if err := apply(&o, opts); err != nil {
		return nil, fmt.Errorf("streamq: outbox enqueue on %s: %w", q.Name(), err)
	}
	return prepare(q, payload, &o)
}

// PrepareArgs is [Prepare] for typed args: the payload is args encoded with
// codec (nil: streamq.JSONCodec), the kind args.Kind(), and the options
// those of args (see [streamq.JobArgsWithOptions]), then opts.
func PrepareArgs(q *streamq.Queue, args streamq.JobArgs, codec streamq.Codec, opts []streamq.EnqueueOption) (*Row, error) {
	if q == nil {
		return nil, &streamq.ConfigError{Field: "queue", Reason: "is nil: pass the *streamq.Queue the job goes to"}
	}
	if args == nil {
		return nil, &streamq.ConfigError{Field: "args", Reason: "is nil: pass a value of a JobArgs type"}
	}
	var o streamq.EnqueueOptions
	if wo, ok := args.(streamq.JobArgsWithOptions); ok {
		if err := apply(&o, wo.InsertOpts()); err != nil {
			return nil, fmt.Errorf("streamq: outbox enqueue on %s: InsertOpts of %T: %w", q.Name(), args, err)
		}
	}
	if err := apply(&o, append(opts, streamq.WithKind(args.Kind()))); err != nil {
		return nil, fmt.Errorf("streamq: outbox enqueue on %s: %w", q.Name(), err)
	}
	if codec == nil {
		codec = streamq.JSONCodec{}
	}
	payload, err := codec.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("streamq: outbox enqueue on %s: encode args of kind %q: %w", q.Name(), args.Kind(), err)
	}
	return prepare(q, payload, &o)
}

// apply applies opts to o.
func apply(o *streamq.EnqueueOptions, opts []streamq.EnqueueOption) error {
	for i, opt := range opts {
		if opt == nil {
			return &streamq.ConfigError{Field: fmt.Sprintf("options[%d]", i), Reason: "is nil: remove it"}
		}
		if err := opt(o); err != nil {
			return err
		}
	}
	return nil
}

// prepare checks o and the job and returns its row.
func prepare(q *streamq.Queue, payload []byte, o *streamq.EnqueueOptions) (*Row, error) {
	refuse := func(field, reason string) (*Row, error) {
		return nil, fmt.Errorf("streamq: outbox enqueue on %s: %w", q.Name(), &streamq.ConfigError{Field: field, Reason: reason})
	}
	switch {
	case o.UniqueKey != "":
		return refuse("Unique", "is not supported by the outbox: its lock ends with the job, so it cannot keep a relayed row from being enqueued twice; enqueue unique jobs with a Producer")
	case o.JobID != "" && rdb.JobIDProblem(o.JobID) != "":
		return refuse("EnqueueOptions.JobID", rdb.JobIDProblem(o.JobID))
	case o.FlowKey != "":
		return refuse("EnqueueOptions.FlowKey", "is not supported by this version: leave it empty")
	case o.Priority != nil:
		return refuse("priority.WithPriority", "is not supported by the outbox: enqueue with a Producer of a queue that has a priority set")
	case !o.Deadline.IsZero() && !o.Deadline.After(core.Of(q).DB.Now()):
		return refuse("Deadline", fmt.Sprintf("%s has passed: pass a time in the future", o.Deadline.Format(time.RFC3339Nano)))
	}
	cq := core.Of(q)
	if err := cq.CheckJob(payload, o.Headers); err != nil {
		return nil, fmt.Errorf("streamq: outbox enqueue on %s: %w", q.Name(), err)
	}
	ro := rowOptions{
		Headers: o.Headers, In: millis(o.In), Kind: o.Kind, MaxAttempts: o.MaxAttempts,
		Timeout: millis(o.Timeout), Retention: millis(o.ResultRetention), Tags: o.Tags, ID: o.JobID,
	}
	if !o.At.IsZero() {
		ro.At = max(o.At.UnixMilli(), 1)
	}
	if !o.Deadline.IsZero() {
		ro.Deadline = o.Deadline.UnixMilli()
	}
	row := &Row{ID: NewID(), Queue: q.Name(), Payload: payload}
	if b, err := json.Marshal(&ro); err != nil {
		return nil, fmt.Errorf("streamq: outbox enqueue on %s: %w", q.Name(), err)
	} else if string(b) != "{}" {
		row.Options = string(b)
	}
	if row.Payload == nil {
		row.Payload = []byte{} // NOT NULL in the table
	}
	return row, nil
}

// millis returns d in whole milliseconds, rounded up (0 for 0 or less).
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// NewID returns a new row ID: 32 hex digits of a random 128-bit number.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// errBadRow marks a row whose columns do not decode.
var errBadRow = errors.New("streamq: malformed outbox row")

// decodeOptions decodes a row's Options column.
func decodeOptions(s string) (rowOptions, error) {
	var o rowOptions
	if s == "" {
		return o, nil
	}
	if err := json.Unmarshal([]byte(s), &o); err != nil {
		return o, fmt.Errorf("%w: options %q: %v", errBadRow, s, err)
	}
	return o, nil
}
