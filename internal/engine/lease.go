package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamq/streamq/internal/rdb"
)

// startLease is a consumer's start lease (see rdb.StartLease): while it
// lasts, the jobs of a plain read start without a look at the pause flag.
// The control loop renews it at every tick that finds the queue running
// and revokes it at the first tick that finds it paused, and only then
// gives it back in Redis, which is what a pause waits for. The fetch loop
// holds it (a read lock) from the check after a read until the read's jobs
// are launched, so a revoke, and so the end of a pause, comes after any
// start it allowed.
type startLease struct {
	mu    sync.RWMutex
	base  time.Time    // the origin of until (monotonic)
	until atomic.Int64 // end, in ns after base; 0: no lease
	held  bool         // owned by the fetch loop
}

// valid reports whether the lease lasts at now.
func (l *startLease) valid(now time.Time) bool {
	u := l.until.Load()
	return u > 0 && now.Sub(l.base) < time.Duration(u)
}

// extend makes the lease last until end.
func (l *startLease) extend(end time.Time) {
	if l.base.IsZero() {
		return // not made by NewMonitor
	}
	l.until.Store(int64(end.Sub(l.base)))
}

// revoke ends the lease once no start it allowed is under way.
func (l *startLease) revoke() {
	l.mu.Lock()
	l.until.Store(0)
	l.mu.Unlock()
}

// release ends the fetch loop's hold, if any.
func (l *startLease) release() {
	if l.held {
		l.held = false
		l.mu.RUnlock()
	}
}

// Leased reports whether the consumer holds a start lease now: a read may
// skip the look at the pause flag, if [Monitor.HoldLease] confirms after
// the read that the lease still lasts.
func (m *Monitor) Leased() bool { return m.lease.valid(time.Now()) }

// HoldLease, called by the fetch loop's backend after a read that did not
// look at the pause flag, reports whether the read's jobs may start: the
// lease still lasts. If so, the lease cannot be revoked (so a pause cannot
// end) until the engine launched them; if not, the backend must look at
// the flag as a read without a lease does.
func (m *Monitor) HoldLease() bool {
	l := &m.lease
	if l.held {
		return true
	}
	l.mu.RLock()
	if l.valid(time.Now()) {
		l.held = true
		return true
	}
	l.mu.RUnlock()
	return false
}

// renewLease takes or renews the run's start lease, or, when the queue is
// paused, revokes it and then gives it back in Redis. On an error the
// lease runs out on its own.
func (r *run[F]) renewLease(ctx context.Context) {
	if !r.leasing() {
		return
	}
	sent := time.Now() // the lease counts from before Redis granted it
	flag, err := r.cfg.DB.TakeStartLease(ctx, r.cfg.Heartbeat)
	if err != nil {
		return
	}
	if flag == "" {
		r.mon.lease.extend(sent.Add(rdb.StartLease - rdb.StartLeaseSlack))
		return
	}
	r.setPaused(true) // before the revoke: no job waiting alone starts after it
	r.mon.lease.revoke()
	if err := r.cfg.DB.DropStartLease(ctx, r.cfg.Heartbeat); err != nil && ctx.Err() == nil {
		r.mon.Log.WarnContext(ctx, "streamq: cannot give back the start lease; a pause waits until it runs out", "error", err)
	}
}
