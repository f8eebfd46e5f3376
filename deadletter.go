package streamq

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Dead-letter reasons, stored in the dl_reason field.
const (
	// ReasonMaxDeliveries: the job made MaxDeliveries attempts: its handler
	// failed, or its worker died while the handler ran, that many times.
	ReasonMaxDeliveries = engine.ReasonMaxDeliveries
	// ReasonPermanent: the handler returned a [Permanent] error.
	ReasonPermanent = engine.ReasonPermanent
	// ReasonMalformed: the stream entry does not follow the wire format, or
	// a typed job's args do not decode (see [Register]).
	ReasonMalformed = engine.ReasonMalformed
	// ReasonCancelled: an operator cancelled the running job ([ErrCancelled]).
	ReasonCancelled = engine.ReasonCancelled
	// ReasonDeadline: the job's [Deadline] passed before it ran to success.
	ReasonDeadline = engine.ReasonDeadline
	// ReasonUnknownKind: no handler of the workers that took the job knew
	// its kind for its whole attempt budget (see [Mux]).
	ReasonUnknownKind = engine.ReasonUnknownKind
)

// DeadLetter is one entry of a queue's dead-letter stream.
type DeadLetter struct {
	ID            string            // entry ID in the dead-letter stream
	Queue         string            // queue the job came from
	OriginalID    string            // the job's stream entry ID when it was dead-lettered
	JobID         string            // the job's stable ID (see Message.ID)
	Reason        string            // one of the Reason constants
	Error         string            // the last error
	Attempts      int               // attempts made: handler starts charged to the job
	FirstFailedAt time.Time         // first failure
	FailedAt      time.Time         // when it was dead-lettered
	Payload       []byte            // the job's payload (nil for a malformed entry without one)
	Headers       map[string]string // the job's headers
	EnqueuedAt    time.Time         // when the job was first enqueued, if known
	Errors        []Failure         // the job's last failures, oldest first (at most 5)
	Fields        map[string]string // the original entry's raw fields
}

// Failure is one failed attempt of a job, from its error history.
type Failure struct {
	At      time.Time
	Attempt int
	Error   string // at most 512 bytes
}

// DeadLetters manages a queue's dead-letter stream. Dead letters are kept
// until requeued or purged (unless QueueConfig.DeadLetterMaxLen sets a cap).
type DeadLetters struct{ q *Queue }

// DeadLetters returns the queue's dead-letter store.
func (q *Queue) DeadLetters() *DeadLetters { return &DeadLetters{q: q} }

// Len returns the number of dead letters.
func (d *DeadLetters) Len(ctx context.Context) (int64, error) {
	n, err := d.q.client.XLen(ctx, d.q.keys.Dead).Result()
	if err != nil {
		return 0, fmt.Errorf("streamq: xlen %s: %w", d.q.keys.Dead, err)
	}
	return n, nil
}

// List returns up to count dead letters with IDs after the cursor, oldest
// first, and the cursor for the next page ("" when there are no more). Start
// with cursor "". Pages through everything: there is no hidden limit.
func (d *DeadLetters) List(ctx context.Context, cursor string, count int64) ([]DeadLetter, string, error) {
	if count <= 0 {
		return nil, "", configErr("count", "%d: ask for at least 1 dead letter per page", count)
	}
	start := "-"
	if cursor != "" {
		start = "(" + cursor
	}
	entries, err := d.q.client.XRangeN(ctx, d.q.keys.Dead, start, "+", count).Result()
	if err != nil {
		return nil, "", fmt.Errorf("streamq: xrange %s: %w", d.q.keys.Dead, err)
	}
	out := make([]DeadLetter, len(entries))
	for i, e := range entries {
		out[i] = parseDeadLetter(e)
	}
	next := ""
	if int64(len(entries)) == count {
		next = entries[len(entries)-1].ID
	}
	return out, next, nil
}

// Get returns one dead letter, or an error wrapping [ErrNotFound].
func (d *DeadLetters) Get(ctx context.Context, id string) (*DeadLetter, error) {
	entries, err := d.q.client.XRange(ctx, d.q.keys.Dead, id, id).Result()
	if err != nil {
		return nil, fmt.Errorf("streamq: xrange %s: %w", d.q.keys.Dead, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%w: dead letter %s in %s", ErrNotFound, id, d.q.name)
	}
	dl := parseDeadLetter(entries[0])
	return &dl, nil
}

// Requeue moves dead letters back into the queue as fresh jobs (attempts
// reset; payload and headers kept) atomically, and returns the new stream
// entry IDs in order ("" for an ID that was not found). It ignores the stream
// cap: requeueing is an operator's decision.
func (d *DeadLetters) Requeue(ctx context.Context, ids ...string) ([]string, error) {
	out := make([]string, 0, len(ids))
	for start := 0; start < len(ids); start += MaxBatchChunk {
		res, err := d.q.db.Requeue(ctx, rdb.RequeueParams{IDs: ids[start:min(start+MaxBatchChunk, len(ids))]})
		if err != nil {
			return out, fmt.Errorf("streamq: requeue from %s: %w", d.q.keys.Dead, err)
		}
		out = append(out, res...)
	}
	return out, nil
}

// RequeueAll requeues every dead letter that exists when it starts (letters
// dead-lettered again meanwhile are not picked up a second time) and returns
// how many it requeued.
func (d *DeadLetters) RequeueAll(ctx context.Context) (int, error) {
	last, err := d.q.client.XRevRangeN(ctx, d.q.keys.Dead, "+", "-", 1).Result()
	if err != nil {
		return 0, fmt.Errorf("streamq: xrevrange %s: %w", d.q.keys.Dead, err)
	}
	if len(last) == 0 {
		return 0, nil
	}
	end := last[0].ID
	total := 0
	for {
		page, err := d.q.client.XRangeN(ctx, d.q.keys.Dead, "-", end, MaxBatchChunk).Result()
		if err != nil {
			return total, fmt.Errorf("streamq: xrange %s: %w", d.q.keys.Dead, err)
		}
		if len(page) == 0 {
			return total, nil
		}
		ids := make([]string, len(page))
		for i, e := range page {
			ids[i] = e.ID
		}
		res, err := d.Requeue(ctx, ids...)
		for _, id := range res {
			if id != "" {
				total++
			}
		}
		if err != nil {
			return total, err
		}
	}
}

// Purge deletes the given dead letters for good and returns how many existed.
func (d *DeadLetters) Purge(ctx context.Context, ids ...string) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	// The markers of cancelled dead letters go in the same transaction
	// (see inspect.Overview).
	pipe := d.q.client.TxPipeline()
	del := pipe.XDel(ctx, d.q.keys.Dead, ids...)
	marks := make([]any, len(ids))
	for i, id := range ids {
		marks[i] = id
	}
	pipe.ZRem(ctx, d.q.keys.Cancelled, marks...)
	_, err := pipe.Exec(ctx)
	n := del.Val()
	if err != nil {
		return 0, fmt.Errorf("streamq: xdel %s: %w", d.q.keys.Dead, err)
	}
	return n, nil
}

// PurgeBefore deletes dead letters that were dead-lettered before t and
// returns how many it deleted: the tool for explicit retention.
func (d *DeadLetters) PurgeBefore(ctx context.Context, t time.Time) (int64, error) {
	ms := strconv.FormatInt(t.UnixMilli(), 10)
	pipe := d.q.client.TxPipeline()
	trim := pipe.XTrimMinID(ctx, d.q.keys.Dead, ms)
	pipe.ZRemRangeByScore(ctx, d.q.keys.Cancelled, "-inf", "("+ms)
	_, err := pipe.Exec(ctx)
	n := trim.Val()
	if err != nil {
		return 0, fmt.Errorf("streamq: xtrim %s: %w", d.q.keys.Dead, err)
	}
	return n, nil
}

// PurgeAll deletes every dead letter.
func (d *DeadLetters) PurgeAll(ctx context.Context) error {
	if err := d.q.client.Del(ctx, d.q.keys.Dead, d.q.keys.Cancelled).Err(); err != nil {
		return fmt.Errorf("streamq: del %s: %w", d.q.keys.Dead, err)
	}
	return nil
}

func parseDeadLetter(e redis.XMessage) DeadLetter {
	d, own := wire.ParseDeadLetter(e.Values)
	dl := DeadLetter{
		ID:            e.ID,
		Queue:         d.Queue,
		OriginalID:    d.ID,
		Reason:        d.Reason,
		Error:         d.Error,
		Attempts:      d.Attempts,
		FirstFailedAt: d.FirstFail,
		FailedAt:      d.Failed,
		Fields:        own,
	}
	if p, ok := own[wire.FieldPayload]; ok {
		dl.Payload = []byte(p)
	}
	dl.EnqueuedAt = wire.ParseMillis(own[wire.FieldEnqueued])
	dl.JobID = own[wire.FieldJobID]
	if dl.JobID == "" {
		dl.JobID = d.ID
	}
	for _, f := range wire.ParseFailures(own[wire.FieldErrors]) {
		dl.Errors = append(dl.Errors, Failure{At: time.UnixMilli(f.At), Attempt: f.Attempt, Error: f.Error})
	}
	if h := own[wire.FieldHeaders]; h != "" {
		_ = json.Unmarshal([]byte(h), &dl.Headers) // malformed headers stay in Fields
	}
	if dl.Headers == nil {
		dl.Headers = map[string]string{}
	}
	return dl
}
