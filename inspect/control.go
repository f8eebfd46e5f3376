package inspect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/rdb"
)

// Pause pauses the queue: once it returns, no consumer or priority worker
// starts a job (the scripts that hand jobs out refuse while the flag is
// set, also to workers started or restarted during the pause); running jobs
// finish, and enqueueing keeps working.
//
// A consumer that holds a start lease starts the jobs of its reads without
// looking at the flag (it saves a command per read), so after setting the
// flag Pause waits until every consumer gave its lease back, which each
// does at its next control tick (ConsumerConfig.ControlInterval), or the
// lease ran out (rdb.StartLease, 3 s: a consumer that crashed or hangs).
// If ctx ends first, Pause returns its error: the queue is paused, but a
// consumer may still start a job read before the pause.
func (q *Queue) Pause(ctx context.Context) error {
	if err := q.rdb().Set(ctx, q.keys.Paused, "1", 0).Err(); err != nil {
		return fmt.Errorf("inspect: pause %s: %w", q.name, err)
	}
	// Every lease was granted before the flag was set, so it ended by the
	// process's clock at most rdb.StartLease from now: waiting that long
	// is enough even if Redis cannot be asked.
	end := time.Now().Add(rdb.StartLease)
	t := time.NewTicker(pausePoll)
	defer t.Stop()
	for time.Now().Before(end) {
		n, err := q.db.StartLeases(ctx)
		if err == nil && n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("inspect: pause %s: waiting for consumers to stop starting jobs: %w", q.name, context.Cause(ctx))
		case <-t.C:
		}
	}
	return nil
}

// pausePoll is how often Pause looks whether consumers gave their start
// leases back.
const pausePoll = 20 * time.Millisecond

// Resume undoes [Queue.Pause]. One DEL.
func (q *Queue) Resume(ctx context.Context) error {
	if err := q.rdb().Del(ctx, q.keys.Paused).Err(); err != nil {
		return fmt.Errorf("inspect: resume %s: %w", q.name, err)
	}
	return nil
}

// moves bounds the attempts of a control verb to catch a job that moves
// (promoted, retried, taken by a consumer) between its look-up and the
// script that acts on it.
const moves = 3

// Delete deletes a waiting, delayed, retrying, dead or cancelled job and
// releases its unique key. The check of its state and the deletion are one
// script: a waiting job is either deleted or delivered to a consumer, never
// both. A running job gives a [*StateError] (cancel it first); an unknown
// one a [*NotFoundError].
func (q *Queue) Delete(ctx context.Context, id string) error {
	return q.control(ctx, id, "delete", q.deleteJob)
}

// deleteJob deletes j, found in its state, with the script of that state:
// "ok", rdb.ReplyGone when it moved meanwhile, or the state it is in when
// it cannot be deleted.
func (q *Queue) deleteJob(ctx context.Context, j *Job) (string, error) {
	switch {
	case j.State == StateDead || j.State == StateCancelled:
		n, err := q.db.PurgeDead(ctx, []string{j.EntryID})
		if n == 0 {
			return rdb.ReplyGone, err
		}
		return "ok", err
	case q.kind == KindPriority && (j.State == StateWaiting || j.State == StateDelayed || j.State == StateRetrying):
		return q.priorityControl(ctx, "delete", j)
	case j.aside != nil:
		return q.db.FlowDelete(ctx, rdb.FlowDeleteParams{Key: j.aside.lane, JobID: j.ID, Packed: j.aside.packed})
	case j.State == StateWaiting:
		return q.db.DeleteWaiting(ctx, rdb.DeleteParams{ID: j.EntryID, JobID: j.ID, Key: j.Key})
	case j.State == StateDelayed || j.State == StateRetrying:
		key, token, found, err := q.db.DelayedKey(ctx, j.EntryID)
		if err != nil || !found {
			return rdb.ReplyGone, err
		}
		return q.db.DeleteDelayed(ctx, rdb.DeleteParams{ID: j.EntryID, JobID: j.ID, Key: key, Token: token})
	}
	return string(j.State), nil
}

// RunNow moves a delayed or retrying job to the front of its way: into the
// stream (or a priority queue's ready set) at once, in one script. Other
// states give a [*StateError].
func (q *Queue) RunNow(ctx context.Context, id string) error {
	return q.control(ctx, id, "run now", q.runJobNow)
}

// runJobNow makes j due now (see deleteJob for the reply).
func (q *Queue) runJobNow(ctx context.Context, j *Job) (string, error) {
	if j.State != StateDelayed && j.State != StateRetrying {
		return string(j.State), nil
	}
	if q.kind == KindPriority {
		return q.priorityControl(ctx, "run", j)
	}
	nid, err := q.db.RunNow(ctx, rdb.RunNowParams{ID: j.EntryID, JobID: j.ID})
	if nid == "" {
		return rdb.ReplyGone, err
	}
	return "ok", err
}

// Cancel asks the consumer (or priority worker) that runs a job to cancel
// it: its handler's context is cancelled with cause streamq.ErrCancelled
// within the runner's ControlInterval, and the job is dead-lettered with
// reason "cancelled" (not retried). The check that it runs and the request
// are one script. A job in another state gives a [*StateError].
func (q *Queue) Cancel(ctx context.Context, id string) error {
	return q.control(ctx, id, "cancel", q.cancelJob)
}

// cancelJob asks the runner of j to cancel it (see deleteJob for the
// reply).
func (q *Queue) cancelJob(ctx context.Context, j *Job) (string, error) {
	if j.State != StateRunning {
		return string(j.State), nil
	}
	if q.kind == KindPriority {
		return q.priorityControl(ctx, "cancel", j)
	}
	return q.db.RequestCancel(ctx, rdb.RequestCancelParams{ID: j.EntryID, JobID: j.ID})
}

// control looks job id up and runs act on it until act says "ok" (nil), a
// state the action does not apply to ([*StateError]), or the job is gone
// ([*NotFoundError]); a job that moved meanwhile is looked up again.
func (q *Queue) control(ctx context.Context, id, action string, act func(context.Context, *Job) (string, error)) error {
	for range moves {
		j, err := q.locate(ctx, id)
		if err != nil {
			return fmt.Errorf("inspect: %s job %s of %s: %w", action, id, q.name, err)
		}
		if j == nil {
			return &NotFoundError{What: "job", Name: id}
		}
		res, err := act(ctx, j)
		if err != nil {
			return fmt.Errorf("inspect: %s job %s of %s: %w", action, id, q.name, err)
		}
		switch res {
		case "ok":
			return nil
		case rdb.ReplyGone:
			continue
		case "delayed":
			if j.State == StateRetrying {
				res = string(StateRetrying)
			}
		}
		return &StateError{ID: id, State: State(res), Action: action}
	}
	return fmt.Errorf("inspect: %s job %s of %s: it kept moving between look-up and action; try again", action, id, q.name)
}

// priorityControl runs the priority set's control script for j.
func (q *Queue) priorityControl(ctx context.Context, action string, j *Job) (string, error) {
	m, where, err := q.findMember(ctx, j.EntryID, j.Priority)
	if err != nil {
		return "", err
	}
	if where == StateRunning {
		m = ""
	}
	return q.db.Priority().Control(ctx, rdb.PriorityControlParams{Action: action, Member: m, ID: j.EntryID, JobID: j.ID})
}

// deadRange returns the range of dead-letter IDs f selects by time.
func (f *DeadFilter) deadRange() (start, end string) {
	start, end = "-", "+"
	if !f.Since.IsZero() {
		start = strconv.FormatInt(f.Since.UnixMilli(), 10)
	}
	if !f.Until.IsZero() {
		end = "(" + strconv.FormatInt(f.Until.UnixMilli(), 10)
	}
	return start, end
}

// match reports whether dead letter j passes f (f.IDs aside).
func (f *DeadFilter) match(j *Job) bool {
	if f.Reason != "" && j.Reason != f.Reason {
		return false
	}
	if f.Error != "" && !strings.Contains(j.LastError, f.Error) {
		return false
	}
	if !f.Since.IsZero() && j.DeadAt.Before(f.Since) {
		return false
	}
	return f.Until.IsZero() || j.DeadAt.Before(f.Until)
}

// CountDead counts the dead letters (cancelled jobs included) that f
// selects, examining at most ScanLimit of them from f.Since on (oldest
// first): a larger count is a lower bound.
func (q *Queue) CountDead(ctx context.Context, f DeadFilter) (int, error) {
	n := 0
	err := q.eachDead(ctx, &f, q.in.opts.ScanLimit, func(ids []string) (int, error) {
		n += len(ids)
		return len(ids), nil
	})
	return n, err
}

// RequeueDead moves the dead letters that f selects back into the queue as
// fresh jobs (payload and headers kept, attempts reset), in script calls of
// at most 100 letters each, and returns how many it requeued. It walks the
// dead letters that exist when it starts (a requeued job that dies again is
// not requeued twice), calling progress (if not nil) after each batch with
// the running total.
func (q *Queue) RequeueDead(ctx context.Context, f DeadFilter, progress func(done int)) (int, error) {
	total := 0
	err := q.eachDead(ctx, &f, -1, func(ids []string) (int, error) {
		res, err := q.db.Requeue(ctx, rdb.RequeueParams{IDs: ids})
		n := 0
		for _, id := range res {
			if id != "" {
				n++
			}
		}
		total += n
		if progress != nil {
			progress(total)
		}
		return n, err
	})
	return total, err
}

// PurgeDead deletes the dead letters that f selects for good, in script
// calls of at most 100 letters each, and returns how many it deleted,
// calling progress like [Queue.RequeueDead].
func (q *Queue) PurgeDead(ctx context.Context, f DeadFilter, progress func(done int)) (int, error) {
	total := 0
	err := q.eachDead(ctx, &f, -1, func(ids []string) (int, error) {
		n, err := q.db.PurgeDead(ctx, ids)
		total += n
		if progress != nil {
			progress(total)
		}
		return n, err
	})
	return total, err
}

// eachDead calls batch with the IDs of the dead letters f selects, at most
// rdb.MaxControlBatch at a time, examining at most limit letters (-1: every
// letter up to the newest one when it starts).
func (q *Queue) eachDead(ctx context.Context, f *DeadFilter, limit int, batch func(ids []string) (int, error)) error {
	c := q.rdb()
	if len(f.IDs) > 0 {
		return q.eachDeadID(ctx, f, batch)
	}
	start, end := f.deadRange()
	if last, err := c.XRevRangeN(ctx, q.keys.Dead, "+", "-", 1).Result(); err != nil {
		return fmt.Errorf("inspect: dead letters of %s: %w", q.name, err)
	} else if len(last) == 0 {
		return nil
	} else if end == "+" || f.Until.After(idTime(last[0].ID)) {
		end = last[0].ID // the letters of now: requeued jobs that die again are not walked
	}
	seen := 0
	for limit < 0 || seen < limit {
		n := rdb.MaxControlBatch
		if limit >= 0 {
			n = min(n, limit-seen)
		}
		es, err := c.XRangeN(ctx, q.keys.Dead, start, end, int64(n)).Result()
		if err != nil {
			return fmt.Errorf("inspect: dead letters of %s: %w", q.name, err)
		}
		seen += len(es)
		var ids []string
		for _, e := range es {
			j := deadJob(e.Values, e.ID)
			if f.match(&j) {
				ids = append(ids, e.ID)
			}
		}
		if len(ids) > 0 {
			if _, err := batch(ids); err != nil {
				return fmt.Errorf("inspect: dead letters of %s: %w", q.name, err)
			}
		}
		if len(es) < n {
			return nil
		}
		start = "(" + es[len(es)-1].ID
	}
	return nil
}

// eachDeadID is eachDead for a filter with IDs: dead-letter entry IDs, or
// stable job IDs whose trail leads to a dead letter.
func (q *Queue) eachDeadID(ctx context.Context, f *DeadFilter, batch func(ids []string) (int, error)) error {
	c := q.rdb()
	for from := 0; from < len(f.IDs); from += rdb.MaxControlBatch {
		chunk := f.IDs[from:min(from+rdb.MaxControlBatch, len(f.IDs))]
		pipe := c.Pipeline()
		trails := make([]*redis.StringCmd, len(chunk))
		for i, id := range chunk {
			trails[i] = pipe.HGet(ctx, q.keys.Trail, id)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("inspect: dead letters of %s: %w", q.name, err)
		}
		pipe = c.Pipeline()
		cmds := make([]*redis.XMessageSliceCmd, 0, len(chunk))
		for i, id := range chunk {
			if loc, ok := strings.CutPrefix(trails[i].Val(), "x:"); ok {
				id = loc
			}
			if streamID(id) {
				cmds = append(cmds, pipe.XRange(ctx, q.keys.Dead, id, id))
			}
		}
		if len(cmds) == 0 {
			continue
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("inspect: dead letters of %s: %w", q.name, err)
		}
		var ids []string
		for _, cmd := range cmds {
			for _, e := range cmd.Val() {
				j := deadJob(e.Values, e.ID)
				if f.match(&j) {
					ids = append(ids, e.ID)
				}
			}
		}
		if len(ids) > 0 {
			if _, err := batch(ids); err != nil {
				return fmt.Errorf("inspect: dead letters of %s: %w", q.name, err)
			}
		}
	}
	return nil
}

// Stop ends job id in whichever state it has not finished: a running job is
// cancelled (as [Queue.Cancel]: its handler's context is cancelled within
// the runner's ControlInterval), a waiting, delayed or retrying one is
// deleted (as [Queue.Delete]). A job that already ended (done, dead,
// cancelled) or is gone is left alone. It returns what it did: "cancelled",
// "deleted", or "" when there was nothing to do.
func (q *Queue) Stop(ctx context.Context, id string) (string, error) {
	var did string
	err := q.control(ctx, id, "stop", func(ctx context.Context, j *Job) (string, error) {
		switch j.State {
		case StateRunning:
			did = "cancelled"
			return q.cancelJob(ctx, j)
		case StateWaiting, StateDelayed, StateRetrying:
			did = "deleted"
			return q.deleteJob(ctx, j)
		}
		did = ""
		return "ok", nil
	})
	if errors.Is(err, ErrJobNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return did, nil
}
