package streamq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dead-letter reasons, stored in the dl_reason field.
const (
	// ReasonMaxDeliveries: the job failed (or was abandoned by crashed workers)
	// MaxDeliveries times.
	ReasonMaxDeliveries = "max_deliveries"
	// ReasonPermanent: the handler returned a [Permanent] error.
	ReasonPermanent = "permanent"
	// ReasonMalformed: the stream entry does not follow the wire format.
	ReasonMalformed = "malformed"
)

// Dead-letter entry fields. A dead letter holds these fields followed by the
// original entry's fields unchanged (so a malformed entry is kept as it was).
const (
	dlQueue      = "dl_queue"
	dlID         = "dl_id"
	dlReason     = "dl_reason"
	dlError      = "dl_error"
	dlAttempts   = "dl_attempts"
	dlFirstFail  = "dl_first_failed"
	dlFailed     = "dl_failed"
	dlFieldsPref = "dl_"
)

// deadLetter moves a job to the dead-letter stream in one script (XADD to the
// dead-letter stream, XACK, XDEL, release of its unique-key lock). If Redis cannot be reached the job stays
// pending and is tried again after MinIdle.
// attempts is the number of attempts made, recorded in the dead letter.
func (r *run) deadLetter(msg *Message, reason string, cause error, attempts int) {
	c := r.c
	keys := []string{c.q.stream, c.q.dead}
	if msg.Key != "" {
		keys = append(keys, c.q.uniqueKey(msg.Key))
	}
	args := append([]any{c.q.group, c.cfg.Name, msg.ID, c.q.cfg.DeadLetterMaxLen, msg.keyToken},
		DeadLetterFields(msg, reason, cause, attempts, time.Now())...)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	id, err := scriptDeadLetter.Run(ctx, c.q.rdb, keys, args...).Text()
	switch {
	case errors.Is(err, redis.Nil):
		c.log.Info("streamq: job was taken over by another consumer before it could be dead-lettered; leaving it", "msg_id", msg.ID)
	case err != nil:
		c.log.Error("streamq: cannot dead-letter job; it stays pending and will be retried", "msg_id", msg.ID, "reason", reason, "error", err)
	default:
		c.dead.Add(1)
		c.log.Warn("streamq: job dead-lettered", "msg_id", msg.ID, "dead_letter_id", id, "reason", reason, "attempt", attempts, "error", cause)
		c.event(ctx, Event{Kind: EventDeadLettered, ID: msg.ID, Message: msg, Err: cause, Reason: reason})
	}
}

// DeadLetter is one entry of a queue's dead-letter stream.
type DeadLetter struct {
	ID            string            // entry ID in the dead-letter stream
	Queue         string            // queue the job came from
	OriginalID    string            // the job's stream entry ID when it was dead-lettered
	Reason        string            // ReasonMaxDeliveries, ReasonPermanent or ReasonMalformed
	Error         string            // the last error
	Attempts      int               // attempts made
	FirstFailedAt time.Time         // first failure
	FailedAt      time.Time         // when it was dead-lettered
	Payload       []byte            // the job's payload (nil for a malformed entry without one)
	Headers       map[string]string // the job's headers
	EnqueuedAt    time.Time         // when the job was first enqueued, if known
	Fields        map[string]string // the original entry's raw fields
}

// DeadLetters manages a queue's dead-letter stream. Dead letters are kept
// until requeued or purged (unless QueueConfig.DeadLetterMaxLen sets a cap).
type DeadLetters struct{ q *Queue }

// DeadLetters returns the queue's dead-letter store.
func (q *Queue) DeadLetters() *DeadLetters { return &DeadLetters{q: q} }

// Len returns the number of dead letters.
func (d *DeadLetters) Len(ctx context.Context) (int64, error) {
	n, err := d.q.rdb.XLen(ctx, d.q.dead).Result()
	if err != nil {
		return 0, fmt.Errorf("streamq: xlen %s: %w", d.q.dead, err)
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
	entries, err := d.q.rdb.XRangeN(ctx, d.q.dead, start, "+", count).Result()
	if err != nil {
		return nil, "", fmt.Errorf("streamq: xrange %s: %w", d.q.dead, err)
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
	entries, err := d.q.rdb.XRange(ctx, d.q.dead, id, id).Result()
	if err != nil {
		return nil, fmt.Errorf("streamq: xrange %s: %w", d.q.dead, err)
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
		chunk := ids[start:min(start+MaxBatchChunk, len(ids))]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		res, err := scriptRequeue.Run(ctx, d.q.rdb, []string{d.q.dead, d.q.stream}, args...).Slice()
		if err != nil {
			return out, fmt.Errorf("streamq: requeue from %s: %w", d.q.dead, err)
		}
		for _, v := range res {
			s, _ := v.(string)
			out = append(out, s)
		}
	}
	return out, nil
}

// RequeueAll requeues every dead letter that exists when it starts (letters
// dead-lettered again meanwhile are not picked up a second time) and returns
// how many it requeued.
func (d *DeadLetters) RequeueAll(ctx context.Context) (int, error) {
	last, err := d.q.rdb.XRevRangeN(ctx, d.q.dead, "+", "-", 1).Result()
	if err != nil {
		return 0, fmt.Errorf("streamq: xrevrange %s: %w", d.q.dead, err)
	}
	if len(last) == 0 {
		return 0, nil
	}
	end := last[0].ID
	total := 0
	for {
		page, err := d.q.rdb.XRangeN(ctx, d.q.dead, "-", end, MaxBatchChunk).Result()
		if err != nil {
			return total, fmt.Errorf("streamq: xrange %s: %w", d.q.dead, err)
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
	n, err := d.q.rdb.XDel(ctx, d.q.dead, ids...).Result()
	if err != nil {
		return 0, fmt.Errorf("streamq: xdel %s: %w", d.q.dead, err)
	}
	return n, nil
}

// PurgeBefore deletes dead letters that were dead-lettered before t and
// returns how many it deleted: the tool for explicit retention.
func (d *DeadLetters) PurgeBefore(ctx context.Context, t time.Time) (int64, error) {
	n, err := d.q.rdb.XTrimMinID(ctx, d.q.dead, strconv.FormatInt(millis(t), 10)).Result()
	if err != nil {
		return 0, fmt.Errorf("streamq: xtrim %s: %w", d.q.dead, err)
	}
	return n, nil
}

// PurgeAll deletes every dead letter.
func (d *DeadLetters) PurgeAll(ctx context.Context) error {
	if err := d.q.rdb.Del(ctx, d.q.dead).Err(); err != nil {
		return fmt.Errorf("streamq: del %s: %w", d.q.dead, err)
	}
	return nil
}

func parseDeadLetter(e redis.XMessage) DeadLetter {
	dl := DeadLetter{ID: e.ID, Fields: make(map[string]string, len(e.Values))}
	for k, v := range e.Values {
		s, _ := str(v)
		switch k {
		case dlQueue:
			dl.Queue = s
		case dlID:
			dl.OriginalID = s
		case dlReason:
			dl.Reason = s
		case dlError:
			dl.Error = s
		case dlAttempts:
			dl.Attempts, _ = strconv.Atoi(s)
		case dlFirstFail:
			dl.FirstFailedAt = parseMillis(s)
		case dlFailed:
			dl.FailedAt = parseMillis(s)
		default:
			dl.Fields[k] = s
		}
	}
	if p, ok := dl.Fields[fieldPayload]; ok {
		dl.Payload = []byte(p)
	}
	dl.EnqueuedAt = parseMillis(dl.Fields[fieldEnqueued])
	if h := dl.Fields[fieldHeaders]; h != "" {
		_ = json.Unmarshal([]byte(h), &dl.Headers) // malformed headers stay in Fields
	}
	if dl.Headers == nil {
		dl.Headers = map[string]string{}
	}
	return dl
}

func parseMillis(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}
