package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/streamq/streamq/internal/pool"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
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
	counts := r.takeCounts()
	paused, ids, err := rdb.Control(cctx, r.cfg.Client, r.cfg.Keys, counts, r.cfg.Heartbeat)
	if err != nil {
		r.putCounts(counts)
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
	if r.cfg.ControlInterval <= 0 || r.cfg.Client == nil {
		return
	}
	m := rdb.Minute(time.Now())
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

// flushCounts writes the counts left when the run ends.
func (r *run[F]) flushCounts() {
	c := r.takeCounts()
	if len(c) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := rdb.AddProcessed(ctx, r.cfg.Client, r.cfg.Keys, c); err != nil {
		r.mon.Log.Warn("streamq: cannot write the throughput counters", "error", err)
	}
}

// setPaused pauses or resumes the fetch loop.
func (r *run[F]) setPaused(paused bool) {
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

// waitResumed waits while the queue is paused. It reports false if ctx
// ended first.
func (r *run[F]) waitResumed(ctx context.Context) bool {
	ch := r.resume.Load()
	if ch == nil {
		return true
	}
	r.sig.Paused.Fire(struct{}{})
	select {
	case <-ctx.Done():
		return false
	case <-*ch:
		return true
	}
}

// Limits of progress and results.
const (
	// MaxProgressMessage bounds the message of a progress report (bytes).
	MaxProgressMessage = 256
)

// ErrNotHandler is returned by [SetProgress] and [SetResult] when ctx is
// not (derived from) the context of a running handler.
var ErrNotHandler = errors.New("streamq: ctx is not a handler's context: pass the ctx the handler got (or one derived from it)")

// cfgKey is the context key of a run's *Config, in the contexts of its
// jobs.
type cfgKey struct{}

// jobRef is how a handler's context leads back to its job.
type jobRef interface{ jobID() string }

func (s *slot[F]) jobID() string { return stableID(&s.d) }

// current returns the engine's config and the stable ID of the job whose
// handler runs with ctx.
func current(ctx context.Context) (*Config, string, bool) {
	ref, ok := ctx.Value(pool.ValKey{}).(jobRef)
	if !ok {
		return nil, "", false
	}
	cfg, ok := ctx.Value(cfgKey{}).(*Config)
	if !ok || cfg.Client == nil {
		return nil, "", false
	}
	return cfg, ref.jobID(), true
}

// JobID returns the stable ID of the job whose handler runs with ctx.
func JobID(ctx context.Context) (string, bool) {
	_, id, ok := current(ctx)
	return id, ok
}

// SetProgress records the progress of the job whose handler runs with ctx:
// percent from 0 to 100 and a short message, kept for ResultRetention.
func SetProgress(ctx context.Context, percent int, msg string) error {
	cfg, id, ok := current(ctx)
	if !ok {
		return ErrNotHandler
	}
	if percent < 0 || percent > 100 {
		return fmt.Errorf("streamq: progress %d is out of range: use 0 to 100", percent)
	}
	if len(msg) > MaxProgressMessage {
		return fmt.Errorf("%w: the progress message is %d bytes, the limit is %d", wire.ErrTooLarge, len(msg), MaxProgressMessage)
	}
	if !utf8.ValidString(msg) {
		return fmt.Errorf("%w: the progress message is not valid UTF-8", wire.ErrInvalidHeader)
	}
	p := rdb.Progress{Percent: percent, Message: msg, At: time.Now().UnixMilli()}
	if err := rdb.SetProgress(ctx, cfg.Client, cfg.Keys, id, p, cfg.ResultRetention); err != nil {
		return fmt.Errorf("streamq: set progress of job %s: %w", id, err)
	}
	return nil
}

// SetResult records the result of the job whose handler runs with ctx, kept
// for ResultRetention; it must be at most MaxResultBytes.
func SetResult(ctx context.Context, result []byte) error {
	cfg, id, ok := current(ctx)
	if !ok {
		return ErrNotHandler
	}
	if cfg.MaxResultBytes >= 0 && int64(len(result)) > cfg.MaxResultBytes {
		return fmt.Errorf("%w: the result is %d bytes, the limit is %d (MaxResultBytes): store large results elsewhere and record a reference",
			wire.ErrTooLarge, len(result), cfg.MaxResultBytes)
	}
	if err := rdb.SetResult(ctx, cfg.Client, cfg.Keys, id, result, cfg.ResultRetention); err != nil {
		return fmt.Errorf("streamq: set result of job %s: %w", id, err)
	}
	return nil
}
