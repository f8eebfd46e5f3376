package priority

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/pool"
)

// flushFinishes removes a batch of finished jobs in one script, trying up to
// three times. Jobs it cannot remove keep their lease until it expires and
// then run again (a duplicate, never a loss).
func (r *run) flushFinishes(batch []*pool.Job[item]) {
	w := r.w
	pq := w.pq
	args := make([]any, 2*len(batch))
	for i, j := range batch {
		args[i], args[len(batch)+i] = j.Key, j.Val.id
	}
	keys := []string{pq.keys.leases, pq.keys.ready, pq.keys.delayed, pq.keys.jobs, pq.keys.deliveries}
	var bo pool.Backoff
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		res, err := scriptFinish.Run(ctx, pq.q.Client(), keys, args...).Int64Slice()
		cancel()
		if err == nil {
			var left int64
			if len(res) == 2 {
				left = res[1]
			}
			r.finished(batch, left)
			return
		}
		if try == 3 {
			w.log.Error("priority: cannot remove finished jobs; they run again when their leases expire", "count", len(batch), "error", err)
			r.finished(batch, 0)
			return
		}
		time.Sleep(bo.Next())
	}
}

// finished unregisters finished jobs once they were removed (or could not
// be): their leases are no longer extended.
func (r *run) finished(batch []*pool.Job[item], left int64) {
	r.pool.UnregisterAll(batch)
	if left > 0 {
		r.w.log.Info("priority: finished jobs had expired leases and are held by other workers now; they run again there", "count", left)
	}
}

// keepAlive extends the leases of the jobs this run holds every Lease/4,
// and cancels running jobs whose lease was lost.
func (r *run) keepAlive(ctx context.Context) {
	w := r.w
	pq := w.pq
	every := max(w.cfg.Lease/4, 5*time.Millisecond)
	r.pool.KeepAlive(ctx, every, min(w.cfg.Lease/2, opTimeout),
		func(ctx context.Context, leases []string) ([]string, error) {
			args := make([]any, 0, 1+len(leases))
			args = append(args, w.cfg.Lease.Milliseconds())
			for _, lm := range leases {
				args = append(args, lm)
			}
			return scriptKeepAlive.Run(ctx, pq.q.Client(), []string{pq.keys.leases}, args...).StringSlice()
		},
		func(j *pool.Job[item]) {
			w.claimsLost.Add(1)
			w.log.Warn("priority: lease of a running job expired; it may run elsewhere, cancelling it here", "job_id", j.Val.id)
			w.event(ctx, streamq.Event{Kind: streamq.EventClaimLost, ID: j.Val.id})
		},
		func(err error) { w.log.Warn("priority: cannot extend the leases of running jobs", "error", err) })
}

// reapLoop returns expired leases and due retries to the ready set every
// ReapInterval. Any number of workers may run it; the script moves each job
// exactly once.
func (r *run) reapLoop(ctx context.Context) error {
	w := r.w
	pq := w.pq
	// Start at a random offset so that workers started together do not
	// reap in step.
	first := time.NewTimer(rand.N(w.cfg.ReapInterval))
	select {
	case <-ctx.Done():
		first.Stop()
		return nil
	case <-first.C:
	}
	t := time.NewTicker(w.cfg.ReapInterval)
	defer t.Stop()
	var bo pool.Backoff
	keys := []string{pq.keys.leases, pq.keys.delayed, pq.keys.ready, pq.keys.notify, pq.keys.deliveries}
	for {
		// Bounded: at most 100 batches per tick, then let other loops breathe.
		for range 100 {
			res, err := scriptReap.Run(ctx, pq.q.Client(), keys, DefaultReapBatch).Slice()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if pool.Fatal(err) {
					return err
				}
				w.log.WarnContext(ctx, "priority: cannot reap expired leases and due retries, retrying", "error", err)
				if !bo.Wait(ctx) {
					return nil
				}
				break
			}
			bo.Reset()
			var ids []any
			var due int64
			if len(res) == 2 {
				ids, _ = res[0].([]any)
				due, _ = res[1].(int64)
			}
			if len(ids) > 0 {
				w.expired.Add(int64(len(ids)))
				w.log.InfoContext(ctx, "priority: returned jobs with expired leases to the ready set (their worker died, hung or lost Redis)", "count", len(ids))
				for _, id := range ids {
					s, _ := id.(string)
					w.event(ctx, streamq.Event{Kind: streamq.EventReclaimed, ID: s})
				}
			}
			if len(ids) < DefaultReapBatch && due < DefaultReapBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
