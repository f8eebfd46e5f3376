package streamq

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/pool"
)

// DefaultReclaimBatch is the most entries one XAUTOCLAIM call takes over.
const DefaultReclaimBatch = 100

// reapLoop takes over entries that have been idle for MinIdle: their consumer
// crashed, hung or lost its connection. Reclaimed jobs go to the same handlers
// and share the same slots as new ones; the semaphore is FIFO, so the reaper
// and the reader take turns and neither starves the other.
func (r *run) reapLoop(ctx context.Context) error {
	c := r.c
	t := time.NewTicker(c.cfg.ReclaimInterval)
	defer t.Stop()
	var bo pool.Backoff
	cursor := "0-0"
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// One pass over the pending list, bounded in calls.
		for range 1000 {
			n, err := r.pool.Slots(ctx, DefaultReclaimBatch, false, 0, 0)
			if err != nil {
				return nil
			}
			next, started, alone, err := r.reclaim(ctx, cursor, n)
			r.pool.Release(n - started)
			if !r.pool.RunAlone(ctx, alone, r.handBack) {
				return nil
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if pool.Fatal(err) {
					return err
				}
				c.log.WarnContext(ctx, "streamq: reclaim failed, retrying", "error", err)
				if !bo.Wait(ctx) {
					return nil
				}
				break
			}
			bo.Reset()
			cursor = next
			if cursor == "0-0" {
				break
			}
		}
		if c.cfg.PruneIdle > 0 {
			r.prune(ctx)
		}
	}
}

// prune deletes consumers of the group that have been idle for PruneIdle
// and own no pending entry (their processes are gone), in one script that
// checks and deletes atomically. This consumer is never deleted.
func (r *run) prune(ctx context.Context) {
	c := r.c
	gone, err := scriptPrune.Run(ctx, c.q.rdb, []string{c.q.stream}, c.q.group, c.cfg.PruneIdle.Milliseconds(), c.cfg.Name).StringSlice()
	if err != nil {
		if ctx.Err() == nil && !isNoGroup(err) {
			c.log.WarnContext(ctx, "streamq: cannot prune departed consumers", "error", err)
		}
		return
	}
	if len(gone) > 0 {
		c.log.InfoContext(ctx, "streamq: removed departed consumers from the group", "count", len(gone), "consumers", gone)
	}
}

// reclaim runs one XAUTOCLAIM for up to n entries from cursor, starts the
// reclaimed jobs (the caller holds n slots, started of which are now owned by
// job goroutines), and settles entries whose data was deleted. Jobs about to
// make their last allowed attempt after crashes (see [LastAttemptAfterCrash])
// are registered but not started: they are returned in alone, to run alone.
func (r *run) reclaim(ctx context.Context, cursor string, n int64) (next string, started int64, alone []*pool.Job[entry], err error) {
	c := r.c
	res, err := c.q.rdb.Do(ctx, "XAUTOCLAIM", c.q.stream, c.q.group, c.cfg.Name,
		c.cfg.MinIdle.Milliseconds(), cursor, "COUNT", n).Slice()
	if err != nil {
		if isNoGroup(err) {
			return "0-0", 0, nil, nil // the read loop recreates the group
		}
		return cursor, 0, nil, fmt.Errorf("streamq: xautoclaim %s: %w", c.q.stream, err)
	}
	next, msgs, deleted, err := parseAutoClaim(res)
	if err != nil {
		return "0-0", 0, nil, fmt.Errorf("streamq: xautoclaim %s: %w", c.q.stream, err)
	}
	for _, m := range msgs {
		if m.Values == nil { // Redis 6.2 reports deleted entries inline
			deleted = append(deleted, m.ID)
		}
	}
	if len(deleted) > 0 {
		r.settleDeleted(ctx, deleted)
	}
	var counts map[string]int
	if len(msgs) > 0 {
		counts = r.deliveryCounts(ctx, msgs)
	}
	for _, m := range msgs {
		if m.Values == nil {
			continue
		}
		if r.pool.Owns(m.ID) {
			// Our own job whose claim went stale (for example Redis was
			// unreachable for MinIdle); it is still running here.
			continue
		}
		c.reclaimed.Add(1)
		d := counts[m.ID]
		if d < 2 {
			d = 2 // XAUTOCLAIM counted at least this delivery and the first one
		}
		c.event(ctx, Event{Kind: EventReclaimed, ID: m.ID})
		j := r.pool.Register(m.ID, entry{values: m.Values, deliveries: d})
		if c.cfg.Concurrency > 1 && LastAttemptAfterCrash(m.Values, d, c.cfg.MaxDeliveries) {
			c.log.InfoContext(ctx, "streamq: took over an abandoned job; its last attempt runs alone", "msg_id", m.ID, "deliveries", d)
			alone = append(alone, j)
			continue
		}
		c.log.InfoContext(ctx, "streamq: took over an abandoned job", "msg_id", m.ID, "deliveries", d)
		r.start(j, 1)
		started++
	}
	return next, started, alone, nil
}

// handBack returns a claimed job that did not run to the delayed set, due at
// once and without charging an attempt. A job that cannot be decoded stays
// pending; whoever reclaims it dead-letters it.
func (r *run) handBack(j *pool.Job[entry]) {
	defer r.pool.Unregister(j)
	msg, err := DecodeMessage(r.c.q.name, j.Key, j.Val.values, j.Val.deliveries)
	if err != nil {
		return
	}
	r.retry(msg, ErrShutdown, Verdict{Postponed: true}, EventRetried)
}

// settleDeleted acknowledges pending entries whose data is gone, so they leave
// the pending list, and reports them: a job was lost by someone deleting or
// trimming unacknowledged entries, which must never pass silently. (Redis 7
// already drops them from the pending list; the XACK makes 6.2 do the same.)
func (r *run) settleDeleted(ctx context.Context, ids []string) {
	c := r.c
	c.deleted.Add(int64(len(ids)))
	c.log.ErrorContext(ctx, "streamq: pending entries were deleted from the stream before they were processed; their jobs are lost",
		"count", len(ids), "msg_ids", ids)
	for _, id := range ids {
		c.event(ctx, Event{Kind: EventDeleted, ID: id})
	}
	if err := c.q.rdb.XAck(ctx, c.q.stream, c.q.group, ids...).Err(); err != nil {
		c.log.WarnContext(ctx, "streamq: cannot acknowledge deleted entries", "error", err)
	}
}

// deliveryCounts reads Redis's delivery counters of reclaimed entries, in
// one round trip and exactly (one XPENDING per entry inside a script).
func (r *run) deliveryCounts(ctx context.Context, msgs []redis.XMessage) map[string]int {
	c := r.c
	args := make([]any, 0, 1+len(msgs))
	args = append(args, c.q.group)
	for _, m := range msgs {
		args = append(args, m.ID)
	}
	res, err := scriptDeliveries.Run(ctx, c.q.rdb, []string{c.q.stream}, args...).Int64Slice()
	counts := make(map[string]int, len(msgs))
	if err != nil {
		c.log.WarnContext(ctx, "streamq: cannot read delivery counts of reclaimed jobs", "error", err)
		return counts
	}
	for i, n := range res {
		if i < len(msgs) && n > 0 {
			counts[msgs[i].ID] = int(n)
		}
	}
	return counts
}

// parseAutoClaim decodes an XAUTOCLAIM reply: [cursor, entries, deleted IDs].
func parseAutoClaim(res []any) (next string, msgs []redis.XMessage, deleted []string, err error) {
	if len(res) < 2 {
		return "", nil, nil, fmt.Errorf("unexpected reply with %d elements", len(res))
	}
	next, ok := res[0].(string)
	if !ok {
		return "", nil, nil, fmt.Errorf("unexpected cursor %T", res[0])
	}
	entries, _ := res[1].([]any)
	for _, e := range entries {
		pair, ok := e.([]any)
		if !ok || len(pair) != 2 {
			continue
		}
		id, _ := pair[0].(string)
		if id == "" {
			continue
		}
		var values map[string]any
		if kv, ok := pair[1].([]any); ok {
			values = make(map[string]any, len(kv)/2)
			for i := 0; i+1 < len(kv); i += 2 {
				k, _ := kv[i].(string)
				values[k] = kv[i+1]
			}
		}
		msgs = append(msgs, redis.XMessage{ID: id, Values: values})
	}
	if len(res) > 2 {
		ids, _ := res[2].([]any)
		for _, d := range ids {
			if s, ok := d.(string); ok {
				deleted = append(deleted, s)
			}
		}
	}
	return next, msgs, deleted, nil
}
