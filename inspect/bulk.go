package inspect

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/rdb"
)

// Count returns how many jobs are in state st, from the overview's
// counters; waiting jobs that the overview could only bound
// ([Overview.Estimated]) come from a walk over the stream that reads 200
// of them per Redis call: a bounded call each, so Redis is never blocked,
// but as many calls as it takes. StateDone is not counted (0).
func (q *Queue) Count(ctx context.Context, st State) (int64, error) {
	if _, err := ParseState(string(st)); err != nil {
		return 0, err
	}
	ov, err := q.Overview(ctx)
	if err != nil {
		return 0, err
	}
	if !ov.Estimated || st != StateWaiting {
		return ov.Count(st), nil
	}
	fetch, err := q.fetchFor(ctx, st)
	if err != nil {
		return 0, err
	}
	var n int64
	for cursor := ""; ; {
		items, more, err := fetch(ctx, cursor, pageSize)
		if err != nil {
			return 0, fmt.Errorf("inspect: count %s jobs of %s: %w", st, q.name, err)
		}
		for _, it := range items {
			cursor = it.pos
			if it.job != nil {
				n++
			}
		}
		if !more {
			return n, nil
		}
	}
}

// Count returns the overview's count of jobs in state st (0 for
// StateDone).
func (o *Overview) Count(st State) int64 {
	switch st {
	case StateWaiting:
		return o.Waiting
	case StateRunning:
		return o.Running
	case StateDelayed:
		return o.Delayed
	case StateRetrying:
		return o.Retrying
	case StateDead:
		return o.Dead
	case StateCancelled:
		return o.Cancelled
	case StateCompleted:
		return o.Completed
	}
	return 0
}

// DeleteAll deletes every job in state st: StateWaiting, StateDelayed or
// StateRetrying (dead letters: [Queue.PurgeDead]). It reads the jobs
// rdb.MaxControlBatch at a time and deletes each with the script of
// [Queue.Delete], so a job a consumer takes meanwhile runs and is not
// deleted, and calls progress (if not nil) after each batch with the number
// deleted so far, which it returns. It walks the jobs that are there when
// it starts: a job enqueued after that (a stream entry) is left alone, and
// it stops once it has deleted as many jobs as the state's structure held.
func (q *Queue) DeleteAll(ctx context.Context, st State, progress func(done int)) (int, error) {
	switch st {
	case StateWaiting, StateDelayed, StateRetrying:
		return q.bulk(ctx, st, "delete", q.deleteJob, progress)
	case StateDead, StateCancelled:
		return 0, fmt.Errorf("inspect: DeleteAll of %s jobs: use PurgeDead, which takes a DeadFilter", st)
	}
	return 0, badState("DeleteAll", st, StateWaiting, StateDelayed, StateRetrying)
}

// RunAllNow makes every job in state st (StateDelayed or StateRetrying) due
// now, as [Queue.RunNow] does for one, walking them like
// [Queue.DeleteAll]; it returns how many it moved.
func (q *Queue) RunAllNow(ctx context.Context, st State, progress func(done int)) (int, error) {
	if st != StateDelayed && st != StateRetrying {
		return 0, badState("RunAllNow", st, StateDelayed, StateRetrying)
	}
	return q.bulk(ctx, st, "run now", q.runJobNow, progress)
}

// CancelAll asks the runners of every running job to cancel it, as
// [Queue.Cancel] does for one, walking them like [Queue.DeleteAll]; it
// returns how many requests it recorded.
func (q *Queue) CancelAll(ctx context.Context, progress func(done int)) (int, error) {
	return q.bulk(ctx, StateRunning, "cancel", q.cancelJob, progress)
}

// badState is the error of a bulk action given a state it does not take.
func badState(call string, st State, want ...State) error {
	return fmt.Errorf("inspect: %s of %q jobs: use one of %v", call, st, want)
}

// bulk runs act on every job in state st that is there when it starts, a
// batch of rdb.MaxControlBatch at a time, calling progress after each
// batch with the number act said "ok" for. A job that moved between its
// read and act (act says another state, or gone) is skipped.
func (q *Queue) bulk(ctx context.Context, st State, verb string, act func(context.Context, *Job) (string, error), progress func(int)) (int, error) {
	fetch, err := q.fetchFor(ctx, st)
	if err != nil {
		return 0, err
	}
	size, end, err := q.extent(ctx, st)
	if err != nil || size == 0 {
		return 0, err
	}
	done := 0
	cursor := ""
	// Each element is read once, or twice when the walk restarts at the
	// score of an element it removed (see zpage): the bound ends the walk
	// even while producers add jobs as fast as it removes them.
	for seen := int64(0); seen < 2*size+pageSize; {
		if err := ctx.Err(); err != nil {
			return done, fmt.Errorf("inspect: %s all %s jobs of %s: %w", verb, st, q.name, err)
		}
		items, more, err := fetch(ctx, cursor, rdb.MaxControlBatch)
		if err != nil {
			return done, fmt.Errorf("inspect: %s all %s jobs of %s: %w", verb, st, q.name, err)
		}
		for _, it := range items {
			if end != "" && idLess(end, it.pos) {
				more = false // enqueued after the walk started
				break
			}
			seen++
			cursor = it.pos
			if it.job == nil {
				continue
			}
			res, err := act(ctx, it.job)
			if err != nil {
				return done, fmt.Errorf("inspect: %s job %s of %s: %w", verb, it.job.ID, q.name, err)
			}
			if res == "ok" {
				done++
			}
		}
		if progress != nil {
			progress(done)
		}
		if !more || int64(done) >= size {
			break
		}
	}
	return done, nil
}

// extent returns how many elements the structure of state st holds now
// and, for a stream queue's waiting and running jobs, the ID of the newest
// stream entry now ("" otherwise): a walk over st ends there.
func (q *Queue) extent(ctx context.Context, st State) (size int64, end string, err error) {
	c := q.rdb()
	if q.kind == KindPriority {
		size, err = c.ZCard(ctx, q.prioritySet(st)).Result()
		return size, "", err
	}
	if st == StateDelayed || st == StateRetrying {
		size, err = c.ZCard(ctx, q.keys.Delayed).Result()
		return size, "", err
	}
	pipe := c.Pipeline()
	n := pipe.XLen(ctx, q.keys.Stream)
	last := pipe.XRevRangeN(ctx, q.keys.Stream, "+", "-", 1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, "", fmt.Errorf("inspect: %s jobs of %s: %w", st, q.name, err)
	}
	if len(last.Val()) == 0 {
		return 0, "", nil
	}
	return n.Val(), last.Val()[0].ID, nil
}
