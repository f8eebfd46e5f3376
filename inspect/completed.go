package inspect

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Completed jobs: the records of succeeded jobs that a queue's consumers
// keep when streamq.QueueConfig.CompletedRetention is set.

// CompletedRetention is what the consumers of a queue keep of its
// completed jobs, as the last one to start noted it.
type CompletedRetention struct {
	// Retention is how long a completed job is listed; 0 when no consumer
	// that keeps completed jobs started (the queue keeps none).
	Retention time.Duration
	// Max is the most completed jobs kept; 0 for no cap.
	Max int64
}

// CompletedRetention reports whether the queue keeps completed jobs, and
// for how long (one GET). Priority queues keep none.
func (q *Queue) CompletedRetention(ctx context.Context) (CompletedRetention, error) {
	if q.kind == KindPriority {
		return CompletedRetention{}, nil
	}
	cc, err := rdb.ReadCompletedConfig(ctx, q.rdb(), q.keys)
	if err != nil {
		return CompletedRetention{}, fmt.Errorf("inspect: completed retention of %s: %w", q.name, err)
	}
	return CompletedRetention{Retention: cc.Retention, Max: cc.Max}, nil
}

// completedFetch lists the completed jobs, newest first.
func (q *Queue) completedFetch() fetchFunc {
	c := q.rdb()
	return func(ctx context.Context, cursor string, n int) ([]item, bool, error) {
		zs, more, err := zpage(ctx, c, q.keys.Completed(), cursor, n, true)
		if err != nil || len(zs) == 0 {
			return nil, false, err
		}
		ids := make([]string, len(zs))
		for i, z := range zs {
			ids[i], _ = z.Member.(string)
		}
		data, err := c.HMGet(ctx, q.keys.CompletedJobs(), ids...).Result()
		if err != nil {
			return nil, false, err
		}
		items := make([]item, len(zs))
		for i, z := range zs {
			items[i].pos = zpos(z)
			if s, ok := wire.Str(data[i]); ok {
				if j, ok := completedJob(ids[i], s); ok {
					items[i].job = &j
				}
			}
		}
		return items, more, nil
	}
}

// completedJob builds the Job of the completed job id from its record.
func completedJob(id, data string) (Job, bool) {
	m, err := wire.Unpack(data)
	if err != nil {
		return Job{}, false
	}
	str := func(f string) string { s, _ := m[f].(string); return s }
	ms := func(f string) time.Time {
		n, err := strconv.ParseInt(str(f), 10, 64)
		if err != nil || n <= 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	j := Job{ID: id, EntryID: str(rdb.CompletedEntry), State: StateCompleted, Kind: str(rdb.CompletedKind),
		EnqueuedAt: ms(rdb.CompletedEnqueued), StartedAt: ms(rdb.CompletedStarted), FinishedAt: ms(rdb.CompletedFinished)}
	j.Attempt, _ = strconv.Atoi(str(rdb.CompletedAttempt))
	j.PayloadSize, _ = strconv.Atoi(str(rdb.CompletedSize))
	if p := str(rdb.CompletedPayload); len(p) == j.PayloadSize {
		j.Payload = []byte(p)
	}
	if !j.StartedAt.IsZero() && !j.FinishedAt.IsZero() {
		j.RunTime = j.FinishedAt.Sub(j.StartedAt)
	}
	return j, true
}

// checkCompleted refuses the filters a completed job cannot match: its
// record keeps no headers and no tags.
func checkCompleted(o *ListOptions) error {
	if o.State != StateCompleted {
		return nil
	}
	var bad []string
	if len(o.Header) > 0 {
		bad = append(bad, "headers")
	}
	if len(o.Tags) > 0 {
		bad = append(bad, "tags")
	}
	if len(bad) > 0 {
		return fmt.Errorf("inspect: completed jobs cannot be filtered by %s: their records keep none (filter by kind or payload instead)", strings.Join(bad, " or "))
	}
	return nil
}

// withRecord returns the completed job c, with what the job's acknowledged
// entry j (nil when trimmed) tells beyond its record: the whole payload,
// headers, tags and errors.
func withRecord(j *Job, c Job) *Job {
	if j == nil {
		return &c
	}
	out := *j
	out.ID, out.EntryID, out.State, out.Kind = c.ID, c.EntryID, c.State, c.Kind
	out.EnqueuedAt, out.StartedAt, out.FinishedAt, out.RunTime = c.EnqueuedAt, c.StartedAt, c.FinishedAt, c.RunTime
	out.Attempt, out.PayloadSize = c.Attempt, c.PayloadSize
	return &out
}
