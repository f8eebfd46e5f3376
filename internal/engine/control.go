package engine

import (
	"context"
	"time"

	"github.com/streamq/streamq/internal/pool"
	"github.com/streamq/streamq/internal/rdb"
)

// control reads the queue's pause flag and cancel requests every
// ControlInterval, in one pipeline, until ctx ends: a paused queue stops the
// fetch loop (held jobs run on and keep their claims), a held job whose
// cancellation was requested has its context cancelled with CancelCause,
// and requests of jobs nobody holds any more are removed.
func (r *run[F]) control(ctx context.Context) {
	t := time.NewTicker(r.cfg.ControlInterval)
	defer t.Stop()
	defer r.setPaused(false) // a fetch loop still waiting must see the end
	for {
		r.controlOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// controlOnce is one tick of the control loop.
func (r *run[F]) controlOnce(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, min(opTimeout, 2*r.cfg.ControlInterval))
	defer cancel()
	r.renewLease(cctx)
	counts, lat := r.takeCounts(), r.lat.take()
	paused, ids, err := r.cfg.DB.Control(cctx, rdb.ControlParams{Processed: counts, Latency: lat, Worker: r.cfg.Heartbeat, Info: r.cfg.HeartbeatInfo})
	if err != nil {
		r.putCounts(counts)
		r.lat.put(lat, r.cfg.DB.Now())
		if ctx.Err() == nil {
			r.mon.Log.WarnContext(ctx, "streamq: cannot read the queue's pause flag and cancel requests", "error", err)
		}
		return
	}
	if paused != r.mon.paused.Load() {
		r.mon.Log.InfoContext(ctx, "streamq: queue "+map[bool]string{true: "paused", false: "resumed"}[paused])
	}
	r.setPaused(paused)
	if len(ids) == 0 {
		return
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = false
	}
	r.pool.Each(func(j *pool.Job[slot[F]]) {
		jid := stableID(&j.Val.d)
		if _, ok := want[jid]; !ok {
			return
		}
		want[jid] = true
		if r.pool.Cancel(j, r.cfg.CancelCause) {
			r.mon.Log.InfoContext(ctx, "streamq: cancelling a running job on request", "job_id", jid)
		}
	})
	var unheld []string
	for id, held := range want {
		if !held {
			unheld = append(unheld, id)
		}
	}
	if len(unheld) > 0 {
		if err := r.b.DropCancels(cctx, unheld); err != nil && ctx.Err() == nil {
			r.mon.Log.WarnContext(ctx, "streamq: cannot remove stale cancel requests", "error", err)
		}
	}
}

// counted adds n finished jobs to the counts of the current minute, which
// the next control tick adds to the queue's throughput counters (no command
// per job or per batch).
func (r *run[F]) counted(n int) {
	if r.cfg.ControlInterval <= 0 || r.cfg.DB == nil {
		return
	}
	m := rdb.Minute(r.cfg.DB.Now())
	r.countMu.Lock()
	if r.counts == nil {
		r.counts = make(map[int64]int64, 2)
	}
	r.counts[m] += int64(n)
	r.countMu.Unlock()
}

// takeCounts returns the counts not yet written and forgets them.
func (r *run[F]) takeCounts() map[int64]int64 {
	r.countMu.Lock()
	defer r.countMu.Unlock()
	c := r.counts
	r.counts = nil
	return c
}

// putCounts gives back counts that could not be written.
func (r *run[F]) putCounts(c map[int64]int64) {
	if len(c) == 0 {
		return
	}
	r.countMu.Lock()
	defer r.countMu.Unlock()
	if r.counts == nil {
		r.counts = make(map[int64]int64, len(c))
	}
	for m, n := range c {
		r.counts[m] += n
	}
}

// flushCounts writes the counts left when the run ends, and removes the
// run's heartbeat.
func (r *run[F]) flushCounts() {
	r.mon.FlushDeadLog()
	if r.cfg.DB == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if r.cfg.Heartbeat != "" && r.cfg.ControlInterval > 0 {
		if err := r.cfg.DB.Leave(ctx, r.cfg.Heartbeat); err != nil {
			r.mon.Log.Warn("streamq: cannot remove the heartbeat; the consumer shows as dead until pruned", "error", err)
		}
	}
	c, lat := r.takeCounts(), r.lat.take()
	if len(c) == 0 && len(lat) == 0 {
		return
	}
	if err := r.cfg.DB.AddProcessed(ctx, c, lat); err != nil {
		r.mon.Log.Warn("streamq: cannot write the throughput counters", "error", err)
	}
}

// setPaused pauses or resumes the fetch loop.
func (r *run[F]) setPaused(paused bool) {
	r.pauseMu.Lock() // the control loop and the fetch loop both call it
	defer r.pauseMu.Unlock()
	r.mon.paused.Store(paused)
	cur := r.resume.Load()
	switch {
	case paused && cur == nil:
		ch := make(chan struct{})
		r.resume.Store(&ch)
	case !paused && cur != nil:
		r.resume.Store(nil)
		close(*cur)
	}
}

// paused handles a fetch refused because the queue is paused (the backends'
// fetch scripts check the flag, so no job starts after Pause returned, even
// before the control loop saw it): with a control loop, the fetch loop waits
// for it to see the resume; without one, it tries again after wait. It
// reports false if ctx ended first.
func (r *run[F]) paused(ctx context.Context, wait time.Duration) bool {
	if r.cfg.ControlInterval > 0 && r.cfg.DB != nil {
		r.setPaused(true)
		return true
	}
	r.sig.Paused.Fire(struct{}{})
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// waitResumed waits while the queue is paused. It reports false if ctx
// ended first.
func (r *run[F]) waitResumed(ctx context.Context) bool {
	ch := r.resume.Load()
	if ch == nil {
		return true
	}
	if g := r.cfg.Gate; g != nil {
		g.Idle() // lower queues of a strict worker need not wait for it
	}
	r.sig.Paused.Fire(struct{}{})
	select {
	case <-ctx.Done():
		return false
	case <-*ch:
		return true
	}
}
