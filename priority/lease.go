package priority

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/streamq/streamq"
)

// finishLoop removes finished jobs in batches until the finishes channel is
// closed. A finished job stays registered, so its lease is kept fresh, until
// it is removed.
func (r *run) finishLoop() {
	batch := make([]*job, 0, DefaultFinishBatch)
	want := min(r.w.cfg.Concurrency, DefaultFinishBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for j := range r.finishes {
		var open bool
		batch, open = r.gatherFinishes(append(batch[:0], j), want, linger)
		r.flushFinishes(batch)
		if !open {
			return
		}
	}
}

// gatherFinishes adds queued finished jobs to batch. While the batch is
// smaller than want (the number of handlers that may finish soon) it lingers
// up to finishLinger for more, which under load turns many small scripts
// into a few large ones. Handlers never wait for it: they only send on the
// channel, which is drained while lingering. It reports false when the
// channel was closed.
func (r *run) gatherFinishes(batch []*job, want int, linger *time.Timer) ([]*job, bool) {
	lingering, expired := false, false
	defer func() {
		if lingering {
			linger.Stop()
		}
	}()
	for len(batch) < DefaultFinishBatch {
		if len(batch) >= want || expired {
			select {
			case j, ok := <-r.finishes:
				if !ok {
					return batch, false
				}
				batch = append(batch, j)
				continue
			default:
				return batch, true
			}
		}
		if !lingering {
			linger.Reset(finishLinger)
			lingering = true
		}
		select {
		case j, ok := <-r.finishes:
			if !ok {
				return batch, false
			}
			batch = append(batch, j)
		case <-linger.C:
			lingering, expired = false, true
		}
	}
	return batch, true
}

// flushFinishes removes a batch of finished jobs in one script, trying up to
// three times. Jobs it cannot remove keep their lease until it expires and
// then run again (a duplicate, never a loss).
func (r *run) flushFinishes(batch []*job) {
	w := r.w
	pq := w.pq
	args := make([]any, 2*len(batch))
	for i, j := range batch {
		args[i], args[len(batch)+i] = j.lease, j.id
	}
	keys := []string{pq.keys.leases, pq.keys.ready, pq.keys.delayed, pq.keys.jobs, pq.keys.deliveries}
	var bo backoff
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
		t := time.NewTimer(bo.next())
		<-t.C
	}
}

// finished unregisters finished jobs once they were removed (or could not
// be): their leases are no longer extended.
func (r *run) finished(batch []*job, left int64) {
	for _, j := range batch {
		r.unregister(j)
	}
	if left > 0 {
		r.w.log.Info("priority: finished jobs had expired leases and are held by other workers now; they run again there", "count", left)
	}
}

// keepAliveLoop extends the leases of the jobs this run holds every Lease/4,
// and cancels running jobs whose lease was lost.
func (r *run) keepAliveLoop(ctx context.Context) {
	w := r.w
	pq := w.pq
	every := max(w.cfg.Lease/4, 5*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	args := make([]any, 0, w.cfg.Concurrency+1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		args = append(args[:0], w.cfg.Lease.Milliseconds())
		r.mu.Lock()
		for lm := range r.inflight {
			args = append(args, lm)
		}
		r.mu.Unlock()
		if len(args) == 1 {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, max(every, opTimeout))
		lost, err := scriptKeepAlive.Run(tctx, pq.q.Client(), []string{pq.keys.leases}, args...).StringSlice()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("priority: cannot extend the leases of running jobs", "error", err)
			}
			continue
		}
		for _, lm := range lost {
			r.mu.Lock()
			j := r.inflight[lm]
			lostRunning := j != nil && !j.settling
			r.mu.Unlock()
			if lostRunning {
				w.claimsLost.Add(1)
				w.log.Warn("priority: lease of a running job expired; it may run elsewhere, cancelling it here", "job_id", j.id)
				w.event(ctx, streamq.Event{Kind: streamq.EventClaimLost, ID: j.id})
				j.cancel(streamq.ErrClaimLost)
			}
		}
	}
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
	var bo backoff
	keys := []string{pq.keys.leases, pq.keys.delayed, pq.keys.ready, pq.keys.notify, pq.keys.deliveries}
	for {
		// Bounded: at most 100 batches per tick, then let other loops breathe.
		for range 100 {
			res, err := scriptReap.Run(ctx, pq.q.Client(), keys, DefaultReapBatch).Slice()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if isFatal(err) {
					return err
				}
				w.log.WarnContext(ctx, "priority: cannot reap expired leases and due retries, retrying", "error", err)
				if !bo.wait(ctx) {
					return nil
				}
				break
			}
			bo.reset()
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
