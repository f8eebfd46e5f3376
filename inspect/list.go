package inspect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// pageSize is the most entries one Redis call of a filtered listing reads.
const pageSize = 200

// item is one examined entry: its position (the cursor after it), and the
// job when it belongs to the listing.
type item struct {
	pos string
	job *Job
}

// fetchFunc reads up to n entries after cursor ("" = from the start) and
// reports whether more may follow.
type fetchFunc func(ctx context.Context, cursor string, n int) (items []item, more bool, err error)

// Jobs lists the queue's jobs in state o.State, oldest (or, for waiting
// priority jobs, first to run; for completed jobs, last to finish) first,
// filtered by o.Header and o.Grep (completed jobs keep no headers or tags:
// filtering them by headers or tags is an error). One
// call examines at most the inspector's ScanLimit entries (Page.Scanned)
// and returns up to o.Limit jobs and a cursor to continue from. Listing
// StateDone returns an empty page: results are kept by job ID only (use
// [Queue.Job]). Sorted sets (delayed jobs, priority queues) are paged by
// rank after the cursor's member; when that member left the set meanwhile,
// the next page starts at the cursor's score and may repeat jobs of it.
func (q *Queue) Jobs(ctx context.Context, o ListOptions) (*Page, error) {
	switch {
	case o.Limit == 0:
		o.Limit = DefaultListLimit
	case o.Limit < 0 || o.Limit > MaxListLimit:
		return nil, fmt.Errorf("inspect: ListOptions.Limit %d: use 1 to %d, or 0 for the default (%d)", o.Limit, MaxListLimit, DefaultListLimit)
	}
	if err := q.checkCursor(o.State, o.Cursor); err != nil {
		return nil, err
	}
	if err := checkCompleted(&o); err != nil {
		return nil, err
	}
	if o.State == StateDone {
		return &Page{}, nil
	}
	fetch, err := q.fetchFor(ctx, o.State)
	if err != nil {
		return nil, err
	}
	return q.list(ctx, &o, fetch)
}

// fetchFor returns the fetch of the jobs in state st (not StateDone).
func (q *Queue) fetchFor(ctx context.Context, st State) (fetchFunc, error) {
	switch st {
	case StateWaiting, StateRunning, StateDelayed, StateRetrying:
		if q.kind == KindPriority {
			return q.priorityFetch(st), nil
		}
		return q.streamFetch(ctx, st)
	case StateDead, StateCancelled:
		return q.deadFetch(st == StateCancelled), nil
	case StateCompleted:
		return q.completedFetch(), nil
	}
	_, err := ParseState(string(st))
	if err == nil {
		err = fmt.Errorf("inspect: %s jobs are not listed: results are kept by job ID only", st)
	}
	return nil, err
}

// list runs fetch until o.Limit jobs matched or ScanLimit entries were
// examined.
func (q *Queue) list(ctx context.Context, o *ListOptions, fetch fetchFunc) (*Page, error) {
	page := &Page{Jobs: []Job{}}
	cursor := o.Cursor
	// A listing that skips entries (filters, or a state that shares its
	// structure with another: delayed and retrying, dead and cancelled)
	// reads full pages; one that keeps every entry reads what it returns.
	filtered := len(o.Header) > 0 || o.Grep != "" || o.Kind != "" || len(o.Tags) > 0 || o.State != StateWaiting && o.State != StateRunning || o.Dead.Reason != "" || o.Dead.Error != ""
	budget := q.in.opts.ScanLimit
	for page.Scanned < budget {
		n := min(pageSize, budget-page.Scanned)
		if !filtered {
			n = min(n, o.Limit-len(page.Jobs))
		}
		items, more, err := fetch(ctx, cursor, n)
		if err != nil {
			return nil, fmt.Errorf("inspect: list %s jobs of %s: %w", o.State, q.name, err)
		}
		page.Scanned += len(items)
		for i, it := range items {
			cursor = it.pos
			if it.job == nil || !matches(it.job, o) {
				continue
			}
			it.job.Queue = q.name
			page.Jobs = append(page.Jobs, *it.job)
			if len(page.Jobs) == o.Limit {
				if more || i < len(items)-1 {
					page.Cursor = cursor
				}
				return page, nil
			}
		}
		if !more {
			return page, nil
		}
	}
	page.Cursor = cursor
	return page, nil
}

// group returns the state of the inspector's group on the stream: its last
// delivered ID ("" when the group does not exist) and its lag (-1: unknown).
func (q *Queue) group(ctx context.Context) (last string, lag, pending int64, err error) {
	groups, err := q.rdb().XInfoGroups(ctx, q.keys.Stream).Result()
	if err != nil {
		if rdb.IsNoSuchKey(err) || errors.Is(err, redis.Nil) {
			return "", 0, 0, nil
		}
		return "", 0, 0, fmt.Errorf("xinfo groups %s: %w", q.keys.Stream, err)
	}
	for _, g := range groups {
		if g.Name == q.in.opts.Group {
			return g.LastDeliveredID, g.Lag, g.Pending, nil
		}
	}
	return "", -1, 0, nil
}

// streamFetch returns the fetch of a stream queue's state.
func (q *Queue) streamFetch(ctx context.Context, st State) (fetchFunc, error) {
	c := q.rdb()
	switch st {
	case StateWaiting:
		last, _, _, err := q.group(ctx)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, cursor string, n int) ([]item, bool, error) {
			after := last
			if cursor != "" && (after == "" || idLess(after, cursor)) {
				after = cursor
			}
			start := "-"
			if after != "" {
				start = "(" + after
			}
			es, err := c.XRangeN(ctx, q.keys.Stream, start, "+", int64(n)).Result()
			if err != nil {
				return nil, false, err
			}
			items := make([]item, len(es))
			for i, e := range es {
				j := jobFrom(e.Values, e.ID)
				j.State = StateWaiting
				items[i] = item{pos: e.ID, job: &j}
			}
			return items, len(es) == n, nil
		}, nil
	case StateRunning:
		return func(ctx context.Context, cursor string, n int) ([]item, bool, error) {
			start := "-"
			if cursor != "" {
				start = "(" + cursor
			}
			ps, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.keys.Stream, Group: q.in.opts.Group, Start: start, End: "+", Count: int64(n)}).Result()
			if err != nil {
				if rdb.IsNoSuchKey(err) || rdb.IsNoGroup(err) {
					return nil, false, nil
				}
				return nil, false, err
			}
			pipe := c.Pipeline()
			cmds := make([]*redis.XMessageSliceCmd, len(ps))
			for i, p := range ps {
				cmds[i] = pipe.XRange(ctx, q.keys.Stream, p.ID, p.ID)
			}
			if len(ps) > 0 {
				if _, err := pipe.Exec(ctx); err != nil {
					return nil, false, err
				}
			}
			items := make([]item, len(ps))
			for i, p := range ps {
				items[i].pos = p.ID
				es := cmds[i].Val()
				if len(es) == 0 {
					continue // deleted while pending: nothing to show
				}
				j := runningJob(es[0], p)
				items[i].job = &j
			}
			return items, len(ps) == n, nil
		}, nil
	default: // delayed, retrying
		wantRetry := st == StateRetrying
		return func(ctx context.Context, cursor string, n int) ([]item, bool, error) {
			zs, more, err := zpage(ctx, c, q.keys.Delayed, cursor, n, false)
			if err != nil || len(zs) == 0 {
				return nil, false, err
			}
			members := make([]string, len(zs))
			for i, z := range zs {
				members[i], _ = z.Member.(string)
			}
			data, err := c.HMGet(ctx, q.keys.DelayedJobs, members...).Result()
			if err != nil {
				return nil, false, err
			}
			items := make([]item, len(zs))
			for i, z := range zs {
				items[i].pos = zpos(z)
				s, ok := wire.Str(data[i])
				if !ok {
					continue
				}
				j, ok := delayedJob(s, members[i], z.Score)
				if ok && retrying(&j) == wantRetry {
					items[i].job = &j
				}
			}
			return items, more, nil
		}, nil
	}
}

// runningJob builds the Job of a pending entry.
func runningJob(e redis.XMessage, p redis.XPendingExt) Job {
	j := jobFrom(e.Values, e.ID)
	j.State = StateRunning
	j.Owner = p.Consumer
	j.RunTime = p.Idle
	j.StartedAt = time.Now().Add(-p.Idle)
	j.Attempt += int(p.RetryCount)
	return j
}

// delayedJob builds the Job of a delayed copy from its packed data.
func delayedJob(data, member string, score float64) (Job, bool) {
	m, err := wire.Unpack(data)
	if err != nil {
		return Job{}, false
	}
	j := jobFrom(m, member)
	j.State = StateDelayed
	if retrying(&j) {
		j.State = StateRetrying
	}
	j.DueAt = time.UnixMilli(int64(score))
	return j, true
}

// deadFetch lists the dead-letter stream: cancelled jobs or the others.
func (q *Queue) deadFetch(cancelled bool) fetchFunc {
	return func(ctx context.Context, cursor string, n int) ([]item, bool, error) {
		start := "-"
		if cursor != "" {
			start = "(" + cursor
		}
		es, err := q.rdb().XRangeN(ctx, q.keys.Dead, start, "+", int64(n)).Result()
		if err != nil {
			return nil, false, err
		}
		items := make([]item, len(es))
		for i, e := range es {
			items[i].pos = e.ID
			j := deadJob(e.Values, e.ID)
			if (j.State == StateCancelled) == cancelled {
				items[i].job = &j
			}
		}
		return items, len(es) == n, nil
	}
}

// prioritySet returns the sorted set of a priority queue that holds the
// jobs of state st: the ready set, the leases or the delayed set.
func (q *Queue) prioritySet(st State) string {
	switch st {
	case StateRunning:
		return q.pkeys.Leases
	case StateDelayed, StateRetrying:
		return q.pkeys.Delayed
	}
	return q.pkeys.Ready
}

// priorityFetch returns the fetch of a priority queue's state.
func (q *Queue) priorityFetch(st State) fetchFunc {
	c := q.rdb()
	key := q.prioritySet(st)
	return func(ctx context.Context, cursor string, n int) ([]item, bool, error) {
		zs, more, err := zpage(ctx, c, key, cursor, n, false)
		if err != nil || len(zs) == 0 {
			return nil, false, err
		}
		ids := make([]string, len(zs))
		for i, z := range zs {
			m, _ := z.Member.(string)
			ids[i] = memberID(m)
		}
		data, err := c.HMGet(ctx, q.pkeys.Jobs, ids...).Result()
		if err != nil {
			return nil, false, err
		}
		items := make([]item, len(zs))
		for i, z := range zs {
			items[i].pos = zpos(z)
			s, ok := wire.Str(data[i])
			if !ok {
				continue
			}
			fields, err := wire.Unpack(s)
			if err != nil {
				continue
			}
			j := jobFrom(fields, ids[i])
			m, _ := z.Member.(string)
			setPriority(&j, m)
			switch st {
			case StateWaiting:
				j.State = StateWaiting
			case StateRunning:
				j.State = StateRunning
				j.Owner = leaseOwner(m)
			default:
				j.State = StateDelayed
				if retrying(&j) {
					j.State = StateRetrying
				}
				if j.State != st {
					continue
				}
				j.DueAt = time.UnixMilli(int64(z.Score))
			}
			items[i].job = &j
		}
		return items, more, nil
	}
}

// checkCursor returns an error (errors.Is [ErrInvalidCursor]) when cursor
// is not "" and not of the form a page of state st returns: a stream entry
// ID, or "<score> <member>" for a sorted set.
func (q *Queue) checkCursor(st State, cursor string) error {
	if cursor == "" {
		return nil
	}
	zset := q.kind == KindPriority || st == StateDelayed || st == StateRetrying || st == StateCompleted
	if st == StateDead || st == StateCancelled {
		zset = false
	}
	ok := false
	if zset {
		score, member, found := strings.Cut(cursor, " ")
		f, err := strconv.ParseFloat(score, 64)
		ok = found && member != "" && err == nil && !math.IsNaN(f)
	} else {
		ms, seq, found := strings.Cut(cursor, "-")
		_, err1 := strconv.ParseUint(ms, 10, 64)
		_, err2 := strconv.ParseUint(seq, 10, 64)
		ok = found && err1 == nil && err2 == nil
	}
	if !ok {
		return fmt.Errorf("%w %q for %s jobs: pass the cursor of the previous page as it was given, or none to start at the beginning", ErrInvalidCursor, cursor, st)
	}
	return nil
}

// zpos is the cursor after sorted-set element z: "<score> <member>".
func zpos(z redis.Z) string {
	m, _ := z.Member.(string)
	return strconv.FormatFloat(z.Score, 'f', -1, 64) + " " + m
}

// zpage reads up to n elements of sorted set key after cursor (see zpos),
// in order, or in reverse order when desc. The cursor's member is found by
// rank (O(log n)); when it left the set, the page starts after the
// elements of lower (desc: higher) score.
func zpage(ctx context.Context, c redis.UniversalClient, key, cursor string, n int, desc bool) ([]redis.Z, bool, error) {
	var start int64
	if cursor != "" {
		score, member, _ := strings.Cut(cursor, " ")
		rank := c.ZRank
		if desc {
			rank = c.ZRevRank
		}
		r, err := rank(ctx, key, member).Result()
		switch {
		case err == nil:
			start = r + 1
		case errors.Is(err, redis.Nil):
			lo, hi := "-inf", "("+score
			if desc {
				lo, hi = "("+score, "+inf"
			}
			if start, err = c.ZCount(ctx, key, lo, hi).Result(); err != nil {
				return nil, false, err
			}
		default:
			return nil, false, err
		}
	}
	get := c.ZRangeWithScores
	if desc {
		get = c.ZRevRangeWithScores
	}
	zs, err := get(ctx, key, start, start+int64(n)-1).Result()
	if err != nil {
		return nil, false, err
	}
	return zs, len(zs) == n, nil
}
