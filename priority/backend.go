package priority

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// backend is the engine's backend for a priority set (see engine.Backend).
// One exists per Run.
//
// Attempts: a lease counts as a handler start, and the reaper counts a
// lease that expires as a start cut short by a crash (the job's delivery
// counter). A job leased but made to wait (it must run alone) is marked
// waiting, so that its lease expires without counting anything, until the
// engine charges it right before it runs.
type backend struct {
	w  *Worker
	pq *Queue

	waiting atomic.Bool // Fetch waits for a wake-up

	// Owned by the fetch loop.
	run     string
	pops    uint64
	credits []int64
	bands   []rdb.PopBand // the weighted pop's bands, reused
	budget  *engine.FetchBudget
	notify  string // the wake-up stream's position at the latest empty pop
}

// Start warns when Redis may evict keys or lose jobs in a failover (see
// core.Queue.WarnEvictionPolicy and WarnFailoverLoss).
func (b *backend) Start(ctx context.Context) error {
	b.pq.core.WarnEvictionPolicy(ctx, b.w.run.Mon.Log)
	b.pq.core.WarnFailoverLoss(ctx, b.w.run.Mon.Log)
	err := b.pq.core.DB.Register(ctx, rdb.KindPriority)
	if err != nil && !rdb.IsOOM(err) {
		return fmt.Errorf("priority: register queue %s: %w", b.pq.core.Name, err)
	}
	return nil
}

// Fetch leases up to n jobs and waits for a wake-up when there are none.
// The pop script runs to completion even if ctx is cancelled meanwhile, so
// a shutdown does not strand leased jobs; a pop re-sent after a lost reply
// returns the same jobs (its token prefix is unique to the call).
func (b *backend) Fetch(ctx context.Context, n int, wait time.Duration, _ func(string) bool) (_ []engine.Delivery, err error) {
	defer func() { rdb.Heal(ctx, b.pq.core.RDB, err) }() // on Cluster, find a failed-over master at once
	w := b.w
	b.pops++
	prefix := w.cfg.Name + ":" + b.run + "." + strconv.FormatUint(b.pops, 36) + ":"
	b.bands = b.bands[:0]
	for i, bd := range w.bands {
		b.bands = append(b.bands, rdb.PopBand{Min: bd.lo, Max: bd.hi, Weight: bd.weight, Credit: b.credits[i]})
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	res, err := b.pq.db.Pop(pctx, rdb.PopParams{Run: b.run, Lease: w.cfg.Lease, N: b.budget.Count(min(n, MaxPopBatch)), Prefix: prefix, Bands: b.bands})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("priority: pop from %s: %w", b.pq.keys.Ready, err)
	}
	if len(res.Credits) == len(b.credits) {
		copy(b.credits, res.Credits)
	}
	if res.Missing > 0 {
		w.run.Mon.Log.ErrorContext(ctx, "priority: jobs in the ready set had no data (deleted by someone else); they are lost", "count", res.Missing)
		for range res.Missing {
			w.run.Mon.Event(ctx, engine.Event{Kind: engine.EventDeleted})
		}
	}
	if len(res.Jobs) == 0 {
		if res.Missing == 0 {
			if wait <= 0 { // a streamq.Worker's engine waits with WaitForWork
				b.notify = res.Notify
				return nil, nil
			}
			return nil, b.waitForWork(ctx, res.Notify, wait)
		}
		return nil, nil
	}
	ds := make([]engine.Delivery, len(res.Jobs))
	var largest int64
	for i, p := range res.Jobs {
		largest = max(largest, int64(len(p.Data)))
		id, score := parseLease(p.Lease)
		prio := int(score)
		if !b.pq.cfg.LowerFirst {
			prio = int(-score)
		}
		ds[i] = engine.Delivery{
			Key:     p.Lease,
			ID:      id,
			Packed:  p.Data,
			Prior:   p.Count,
			Charged: true,
			Suspect: p.Count > 0 || strings.Contains(p.Data, crashedMark),
			Headers: map[string]string{HeaderPriority: strconv.Itoa(prio)},
		}
	}
	b.budget.Observe(largest)
	return ds, nil
}

// crashedMark is how the crashed field and its value "1" look in packed
// data (two MessagePack fixstr): a match inside a payload only costs a
// decode of the job's attempt field.
const crashedMark = "\xa7crashed\xa11"

// parseLease returns the job ID and score in a lease member
// "<seq>:<score>:<id>|<token>".
func parseLease(lm string) (id string, score int64) {
	if i := strings.LastIndexByte(lm, '|'); i >= 0 {
		lm = lm[:i]
	}
	parts := strings.SplitN(lm, ":", 3)
	if len(parts) < 3 {
		return lm, 0
	}
	score, _ = strconv.ParseInt(parts[1], 10, 64)
	return parts[2], score
}

// WaitForWork waits, holding no job, for a wake-up newer than the latest
// empty pop (see engine.Waiter), for at most wait.
func (b *backend) WaitForWork(ctx context.Context, wait time.Duration) error {
	if b.notify == "" {
		return nil
	}
	from := b.notify
	b.notify = ""
	return b.waitForWork(ctx, from, wait)
}

// waitForWork blocks until a wake-up entry newer than from arrives, wait
// passes, or ctx is cancelled (Wake ends the read then).
func (b *backend) waitForWork(ctx context.Context, from string, wait time.Duration) error {
	b.waiting.Store(true)
	defer b.waiting.Store(false)
	// Checked after waiting is set, and Wake checks waiting after ctx is
	// cancelled: one of the two sees the other.
	if ctx.Err() != nil {
		return nil
	}
	err := b.pq.core.RDB.XRead(ctx, &redis.XReadArgs{
		Streams: []string{b.pq.keys.Notify, from},
		Count:   1,
		Block:   wait,
	}).Err()
	if err == nil || errors.Is(err, redis.Nil) || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("priority: wait for work on %s: %w", b.pq.keys.Notify, err)
}

// Wake ends a blocked wait for work by appending a wake-up entry. Other
// idle workers of the queue wake up too, look for work and wait again.
func (b *backend) Wake() {
	if !b.waiting.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := b.pq.core.RDB.XAdd(ctx, &redis.XAddArgs{
		Stream: b.pq.keys.Notify, MaxLen: 100, Approx: true, Values: []any{"w", "0"},
	}).Err()
	if err != nil {
		b.w.run.Mon.Log.Debug("priority: cannot wake the worker; it notices the shutdown within Block", "error", err)
	}
}

// Charge marks the lease charged (its expiry counts a crashed start) or
// waiting (its expiry counts nothing).
func (b *backend) Charge(ctx context.Context, d *engine.Delivery, charge bool) (bool, error) {
	return b.pq.db.MarkWaiting(ctx, rdb.MarkWaitingParams{Lease: d.Key, Waiting: !charge})
}

// Touch extends the leases of held jobs.
func (b *backend) Touch(ctx context.Context, leases []string) ([]string, error) {
	return b.pq.db.KeepAlive(ctx, rdb.KeepAliveParams{Lease: b.w.cfg.Lease, Leases: leases})
}

// Finish removes finished jobs.
func (b *backend) Finish(ctx context.Context, done []engine.Finished) error {
	leases := make([]string, len(done))
	ids := make([]string, len(done))
	var jids []string
	for i, f := range done {
		leases[i], ids[i] = f.Key, f.ID
		if f.Moved != "" {
			jids = append(jids, f.Moved)
		}
	}
	_, left, err := b.pq.db.Finish(ctx, rdb.FinishParams{Leases: leases, IDs: ids, JobIDs: jids})
	if err == nil && left > 0 {
		b.w.run.Mon.Log.Info("priority: finished jobs had expired leases and are held by other workers now; they run again there", "count", left)
	}
	return err
}

// Move puts the job back with new fields: into the delayed set, or straight
// into the ready set without delay; either way with its priority and place.
func (b *backend) Move(ctx context.Context, d *engine.Delivery, fields []any, delay time.Duration, st rdb.Settle) (bool, error) {
	return b.pq.db.Retry(ctx, rdb.RetryParams{Lease: d.Key, Delay: delay, Data: wire.Pack(fields), Settle: st})
}

// DeadLetter moves the job to the queue's dead-letter stream.
func (b *backend) DeadLetter(ctx context.Context, d *engine.Delivery, _, _ string, st rdb.Settle, fields []any) (string, error) {
	return b.pq.db.DeadLetter(ctx, rdb.PriorityDeadLetterParams{Lease: d.Key, Settle: st, Fields: fields})
}

// DropCancels removes cancel requests of jobs whose data is gone.
func (b *backend) DropCancels(ctx context.Context, ids []string) error {
	_, err := b.pq.db.DropCancels(ctx, ids)
	return err
}

// Abandon does nothing: the lease expires and the reaper returns the job.
func (b *backend) Abandon(string) {}

// Loops returns the reaper of expired leases and due retries.
func (b *backend) Loops() []engine.Loop {
	if b.w.cfg.ReapInterval <= 0 {
		return nil
	}
	return []engine.Loop{{Name: "reap expired leases and due retries", Every: b.w.cfg.ReapInterval, Do: b.reap}}
}

// reap returns expired leases and due retries to the ready set. Any number
// of workers may run it; the script moves each job exactly once.
func (b *backend) reap(ctx context.Context) (bool, error) {
	ids, due, err := b.pq.db.Reap(ctx, reapBatch)
	if err != nil {
		return false, err
	}
	if len(ids) > 0 {
		b.w.run.Mon.Log.InfoContext(ctx, "priority: returned jobs with expired leases to the ready set (their worker died, hung or lost Redis)", "count", len(ids))
		for _, id := range ids {
			b.w.run.Mon.Event(ctx, engine.Event{Kind: engine.EventReclaimed, ID: id})
		}
	}
	return len(ids) == reapBatch || due == reapBatch, nil
}
