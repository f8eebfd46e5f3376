package streamq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Flow control: concurrency caps per queue and per flow key, enforced in
// Redis across every consumer (see docs/guarantees.md, "Flow control").

// MaxFlowKeyLen is the longest accepted flow key, in bytes.
const MaxFlowKeyLen = 1024

// FlowKey names the key whose flow-control limits hold the job: a
// customer, a domain, an API token. Jobs of one key run at most
// [FlowLimits.PerKey] (or the key's own cap) at once across every consumer;
// the others wait aside in Redis, in enqueue order, and start as slots of
// their key free. A job without a flow key is held only by the queue's
// global cap. The key travels with the job through retries.
func FlowKey(key string) EnqueueOption {
	return func(o *EnqueueOptions) error {
		switch {
		case key == "":
			return configErr("FlowKey", "is empty: use a key that names who the job works for, e.g. \"customer:42\", or leave the option out")
		case len(key) > MaxFlowKeyLen:
			return configErr("FlowKey", "is %d bytes long: use at most %d", len(key), MaxFlowKeyLen)
		case strings.Contains(key, "\x00"):
			return configErr("FlowKey", "%q holds a NUL byte: use a key without one", key)
		}
		o.FlowKey = key
		return nil
	}
}

// FlowLimits are a queue's flow-control limits. They are data in Redis,
// under the queue's hash tag: set them with [Queue.SetFlowLimits] (or the
// CLI's "streamq flow set", or the dashboard), and change them while
// consumers run; consumers started after the queue has limits are exact
// from their first job, running consumers notice limits set on a queue
// that had none within min(MinIdle/4, 2s). The zero value is no limit.
type FlowLimits struct {
	// Global caps the jobs of the queue running at once across every
	// consumer (0: no cap). With a global cap, jobs waiting aside start
	// round robin between flow keys.
	Global int
	// PerKey caps the running jobs of each flow key (0: no cap). 1 runs the
	// jobs of a key one at a time, in enqueue order.
	PerKey int
	// Keys caps single flow keys, in place of PerKey.
	Keys map[string]int
	// Rate limits the starts of each flow key to this many jobs per second
	// (a token bucket in Redis with a burst of max(1, Rate); 0: no limit).
	// A job over its key's rate waits in the delayed set until its token is
	// due, uncharged.
	Rate float64
	// Rates limit single flow keys, in place of Rate.
	Rates map[string]float64
	// Kinds caps the running jobs of single kinds (see [WithKind]) across
	// every consumer, on top of the other caps: {"report.build": 2} runs at
	// most two report builds at once. Nil: no cap per kind.
	Kinds map[string]int
	// KindPerKey caps the running jobs of each flow key among the jobs of
	// single kinds, on top of PerKey and Keys: {"email.send": 1} sends one
	// email per customer at a time while other kinds of the customer run.
	// Nil: no such cap.
	//
	// The jobs of a kind in Kinds or KindPerKey wait aside in lists of
	// their own (per kind and key), so a kind at its cap holds up no other
	// kind; enqueue order is kept among the jobs of one kind and key.
	KindPerKey map[string]int
	// Weights give single flow keys more starts in the round robin between
	// waiting keys: a key of weight 3 starts up to 3 of its waiting jobs per
	// turn where a key of weight 1 (every key not listed) starts 1, so
	// while both wait it gets 3 times the starts. The round robin runs when
	// slots free under a global cap or caps per kind. Nil: all keys weigh 1.
	Weights map[string]int
}

func (l FlowLimits) validate() error {
	switch {
	case l.Global < 0:
		return configErr("FlowLimits.Global", "is %d: use 0 for no cap, or the most jobs to run at once", l.Global)
	case l.PerKey < 0:
		return configErr("FlowLimits.PerKey", "is %d: use 0 for no cap, or the most jobs of one key to run at once", l.PerKey)
	}
	if l.Rate < 0 {
		return configErr("FlowLimits.Rate", "is %g: use 0 for no limit, or jobs per second", l.Rate)
	}
	for k, r := range l.Rates {
		if k == "" || len(k) > MaxFlowKeyLen || r <= 0 {
			return configErr("FlowLimits.Rates", "limits %q at %g: name a key of 1 to %d bytes and a rate above 0 jobs per second", k, r, MaxFlowKeyLen)
		}
	}
	for k, n := range l.Keys {
		switch {
		case k == "" || len(k) > MaxFlowKeyLen:
			return configErr("FlowLimits.Keys", "has a key of %d bytes: use 1 to %d", len(k), MaxFlowKeyLen)
		case n < 1:
			return configErr("FlowLimits.Keys", "caps %q at %d: use at least 1 (remove the key to fall back to PerKey)", k, n)
		}
	}
	for k, n := range l.Weights {
		switch {
		case k == "" || len(k) > MaxFlowKeyLen:
			return configErr("FlowLimits.Weights", "has a key of %d bytes: use 1 to %d", len(k), MaxFlowKeyLen)
		case n < 1:
			return configErr("FlowLimits.Weights", "weighs %q at %d: use at least 1 (remove the key for the default weight 1)", k, n)
		}
	}
	for _, m := range []struct {
		name string
		caps map[string]int
	}{{"FlowLimits.Kinds", l.Kinds}, {"FlowLimits.KindPerKey", l.KindPerKey}} {
		for c, n := range m.caps {
			if err := checkName(m.name, "kind", c, MaxKindLen, `"email.send"`); err != nil {
				return err
			}
			if n < 1 {
				return configErr(m.name, "caps kind %q at %d: use at least 1 (remove the kind for no cap)", c, n)
			}
		}
	}
	return nil
}

// SetFlowLimits replaces the queue's flow-control limits (the zero
// FlowLimits removes them) and releases waiting jobs into the room a raised
// limit made. A lowered cap holds new starts until the running jobs are
// below it; it never stops a running job.
func (q *Queue) SetFlowLimits(ctx context.Context, l FlowLimits) error {
	if err := l.validate(); err != nil {
		return err
	}
	if err := q.db.SetFlowLimits(ctx, rdb.FlowLimits(l)); err != nil {
		return fmt.Errorf("streamq: set flow limits of %s: %w", q.name, err)
	}
	return nil
}

// FlowLimits returns the queue's flow-control limits.
func (q *Queue) FlowLimits(ctx context.Context) (FlowLimits, error) {
	l, err := q.db.GetFlowLimits(ctx)
	if err != nil {
		return FlowLimits{}, fmt.Errorf("streamq: flow limits of %s: %w", q.name, err)
	}
	return FlowLimits(l), nil
}

// flowReadBudget is the most entries one flow read reads (admitted or
// parked) for n handler slots.
func flowReadBudget(n int) int { return min(max(4*n, 256), 1000) }

// flowSweepBatch is the most slots one sweep call visits.
const flowSweepBatch = 100

// checkFlow puts the run under flow control once the queue has limits.
func (b *streamBackend) checkFlow(ctx context.Context) error {
	b.flowAt = b.q.db.Now().Add(b.scanEvery)
	if b.flow.Load() {
		return nil
	}
	on, err := b.q.db.FlowActive(ctx)
	if err != nil {
		return fmt.Errorf("streamq: flow limits of %s: %w", b.q.name, err)
	}
	if on {
		b.flow.Store(true)
		b.c.run.Mon.Log.InfoContext(ctx, "streamq: the queue has flow-control limits; jobs start within them")
	}
	return nil
}

// flowRead reads up to n new entries under flow control: a plain read
// (XREADGROUP, BLOCK up to block; block < 0: without), then one script
// that admits them by their IDs, flow keys and kinds (see
// rdb.Queue.FlowAdmitRead) and looks at the pause flag. Entries read while
// the queue is paused do not start: they are put back as a plain read's
// are (see putBack).
func (b *streamBackend) flowRead(ctx context.Context, n int, block time.Duration) ([]engine.Delivery, error) {
	args := b.readArgs(n)
	args.Block = block
	streams, err := b.q.client.XReadGroup(ctx, args).Result()
	if err != nil {
		return nil, b.readFailed(ctx, err)
	}
	ds := b.deliveries(streams)
	if len(ds) == 0 {
		return nil, nil
	}
	read := make([]rdb.FlowRead, 0, len(ds))
	for i := range ds {
		if r, ok := rdb.FlowReadOf(ds[i].Key, ds[i].Fields); ok {
			read = append(read, r)
		}
	}
	// Redis delivered the entries: admit them even when the run ended
	// meanwhile, so that they start or wait aside (see handBackContext).
	actx, cancel := handBackContext(ctx)
	skip, more, err := b.q.db.FlowAdmitRead(actx, rdb.FlowAdmitReadParams{Consumer: b.c.cfg.Name,
		First: ds[0].Key, Last: ds[len(ds)-1].Key, Read: read, N: n, Budget: flowReadBudget(n)})
	cancel()
	if errors.Is(err, rdb.ErrPaused) {
		b.putBack(ctx, ds)
		return nil, err
	}
	if err != nil {
		b.scanNow = true // they stay pending here: the look for them admits them (see admit)
		return nil, fmt.Errorf("streamq: flow read %s: %w", b.q.keys.Stream, err)
	}
	if len(skip) > 0 {
		out := ds[:0]
		for _, d := range ds {
			if !slices.Contains(skip, d.Key) {
				out = append(out, d)
			}
		}
		ds = out
	}
	for _, e := range more {
		ds = append(ds, engine.Delivery{Key: e.ID, ID: e.ID, Fields: e.Fields, Charged: true, Suspect: wire.Crashed(e.Fields)})
	}
	b.reads = ds
	return ds, nil
}

// admit admits entries taken over or taken back under flow control, and
// returns those that hold a slot (the others now wait aside).
func (b *streamBackend) admit(ctx context.Context, ds []engine.Delivery) ([]engine.Delivery, error) {
	if !b.flow.Load() {
		return ds, nil
	}
	ids := make([]string, len(ds))
	for i := range ds {
		ids[i] = ds[i].Key
	}
	parked, err := b.q.db.FlowAdmit(ctx, b.c.cfg.Name, ids)
	if err != nil {
		// They stay pending for this consumer: the reaper or the next look
		// for unseen entries takes them again.
		return nil, fmt.Errorf("streamq: admit jobs of %s under flow control: %w", b.q.keys.Stream, err)
	}
	if len(parked) == 0 {
		return ds, nil
	}
	out := ds[:0]
	for _, d := range ds {
		if !slices.Contains(parked, d.Key) {
			out = append(out, d)
		}
	}
	return out, nil
}

// flowSweepEvery is how often a run under flow control sweeps its slots.
func (b *streamBackend) flowSweepEvery() time.Duration {
	if b.c.cfg.ReclaimInterval > 0 {
		return b.c.cfg.ReclaimInterval
	}
	return b.c.cfg.MinIdle / 2
}

// sweepFlow gives back slots of entries that are gone and releases waiting
// jobs into free slots (see rdb.Queue.FlowSweep).
func (b *streamBackend) sweepFlow(ctx context.Context) (bool, error) {
	if !b.flow.Load() {
		return false, nil
	}
	freed, released, done, err := b.q.db.FlowSweep(ctx, flowSweepBatch)
	if err != nil {
		return false, fmt.Errorf("streamq: sweep flow slots of %s: %w", b.q.name, err)
	}
	if freed > 0 {
		b.c.run.Mon.Log.InfoContext(ctx, "streamq: gave back flow slots of jobs that are gone", "slots", freed, "released", released)
	}
	return !done, nil
}
