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
	"github.com/streamq/streamq/internal/wire"
)

// Reasons a job waits (see [Queue.Explain]). The set grows with the
// library: a caller shows a reason it does not know by its Detail.
const (
	WaitPaused       = "paused"        // the queue is paused
	WaitDelayed      = "delayed"       // scheduled for Until
	WaitRetryBackoff = "retry_backoff" // failed; its retry is due at Until
	WaitKeyCap       = "key_cap"       // its flow key runs Running of Cap jobs
	WaitGlobalCap    = "global_cap"    // the queue runs Running of Cap jobs
	WaitKindCap      = "kind_cap"      // its kind (and key) runs Running of Cap jobs
	WaitRateLimited  = "rate_limited"  // its flow key is over its rate until Until
	WaitBehind       = "behind"        // Ahead jobs are before it
	WaitNoConsumer   = "no_consumer"   // no consumer read the queue lately
	// WaitParent: a workflow node waits for its parent Parent to end (see
	// [Inspector.ExplainNode]); it has no job in a queue yet.
	WaitParent = "parent"
	// WaitRelease: a workflow node's parents allow it and its job is being
	// enqueued (the workflow re-drive enqueues it if a crash cut that short).
	WaitRelease = "release"
)

// WaitReasons lists the reasons a job waits, in the order Explain reports
// them when several hold.
func WaitReasons() []string {
	return []string{WaitPaused, WaitDelayed, WaitRetryBackoff, WaitRateLimited, WaitKeyCap, WaitKindCap, WaitGlobalCap, WaitBehind, WaitNoConsumer}
}

// WaitReason is one reason a job has not started, with its evidence.
type WaitReason struct {
	Reason string // one of the Wait… constants
	Detail string // the reason and its evidence in words
	// Key is the flow key (WaitKeyCap, WaitBehind of a job waiting aside,
	// WaitKindCap of a kind's cap per key).
	Key string
	// Kind is the kind whose cap holds the job (WaitKindCap).
	Kind string
	// Parent is the workflow node waited for (WaitParent).
	Parent string
	// Running and Cap: the jobs running and the cap (WaitKeyCap,
	// WaitKindCap, WaitGlobalCap).
	Running, Cap int64
	Until        time.Time // WaitDelayed, WaitRetryBackoff
	Ahead        int64     // WaitBehind: the jobs before it (a lower bound when AheadMore)
	AheadMore    bool
}

// Why is why a job has not started: Reasons is empty for a job that runs
// or ended.
type Why struct {
	Job     *Job
	Reasons []WaitReason
}

// liveWithin is how recently a consumer must have read for the queue to
// count as consumed.
const liveWithin = time.Minute

// maxAhead bounds the jobs Explain counts before a waiting one.
const maxAhead = 100_000

// asidePage is the page size of a scan of a wait list.
const asidePage = 500

// Explain returns why the job with stable ID (or entry ID) id has not
// started, with the evidence of each reason: paused; delayed or in retry
// backoff until T; its flow key at its cap (n of n running); the queue at
// its global cap; behind N jobs; no live consumer.
func (q *Queue) Explain(ctx context.Context, id string) (*Why, error) {
	j, err := q.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	w := &Why{Job: j}
	var rs []WaitReason
	switch {
	case j.State == StateDelayed && strings.HasPrefix(j.EntryID, rdb.RateLimitedPrefix):
		rs = append(rs, WaitReason{Reason: WaitRateLimited, Key: j.FlowKey, Until: j.DueAt,
			Detail: fmt.Sprintf("flow key %q is over its rate limit; its token is due at %s", j.FlowKey, j.DueAt.UTC().Format(time.RFC3339Nano))})
	case j.State == StateDelayed:
		rs = append(rs, WaitReason{Reason: WaitDelayed, Until: j.DueAt, Detail: "scheduled for " + j.DueAt.UTC().Format(time.RFC3339Nano)})
	case j.State == StateRetrying:
		rs = append(rs, WaitReason{Reason: WaitRetryBackoff, Until: j.DueAt,
			Detail: fmt.Sprintf("attempt %d failed (%s); the retry is due at %s", j.Attempt, j.LastError, j.DueAt.UTC().Format(time.RFC3339Nano))})
	case j.State == StateWaiting:
		if rs, err = q.waitingReasons(ctx, j); err != nil {
			return nil, fmt.Errorf("inspect: explain job %s of %s: %w", id, q.name, err)
		}
	default:
		return w, nil
	}
	paused, err := q.rdb().Exists(ctx, q.keys.Paused).Result()
	if err != nil {
		return nil, fmt.Errorf("inspect: explain job %s of %s: %w", id, q.name, err)
	}
	if paused == 1 {
		rs = append([]WaitReason{{Reason: WaitPaused, Detail: "the queue is paused: nothing starts until it is resumed"}}, rs...)
	}
	live, err := q.LiveConsumers(ctx, liveWithin)
	if err != nil {
		return nil, err
	}
	if len(live) == 0 {
		rs = append(rs, WaitReason{Reason: WaitNoConsumer, Detail: fmt.Sprintf("no consumer read the queue within %s", liveWithin)})
	}
	w.Reasons = rs
	return w, nil
}

// waitingReasons explains a waiting job: waiting aside for a cap, or in
// the stream behind other jobs.
func (q *Queue) waitingReasons(ctx context.Context, j *Job) ([]WaitReason, error) {
	if j.aside == nil {
		ahead, more, err := q.aheadInStream(ctx, j.EntryID)
		if err != nil {
			return nil, err
		}
		return []WaitReason{{Reason: WaitBehind, Ahead: ahead, AheadMore: more, Detail: aheadText(ahead, more, "in the stream")}}, nil
	}
	_, key := rdb.SplitLane(j.aside.lane)
	st, err := q.db.FlowStatus(ctx)
	if err != nil {
		return nil, err
	}
	var rs []WaitReason
	if capOf := keyCap(st.Limits, key); key != "" && capOf > 0 && st.PerKey[key] >= capOf {
		rs = append(rs, WaitReason{Reason: WaitKeyCap, Key: key, Running: st.PerKey[key], Cap: capOf,
			Detail: fmt.Sprintf("flow key %q is at its cap: %d of %d running", key, st.PerKey[key], capOf)})
	}
	kr, err := q.kindReasons(ctx, st, j.Kind, key)
	if err != nil {
		return nil, err
	}
	rs = append(rs, kr...)
	if g := int64(st.Limits.Global); g > 0 && st.Running >= g {
		rs = append(rs, WaitReason{Reason: WaitGlobalCap, Running: st.Running, Cap: g,
			Detail: fmt.Sprintf("the queue is at its global cap: %d of %d running", st.Running, g)})
	}
	if ahead := int64(j.aside.pos); ahead > 0 || len(rs) == 0 {
		where := fmt.Sprintf("of flow key %q waiting aside", key)
		if kind, _ := rdb.SplitLane(j.aside.lane); kind != "" {
			where = fmt.Sprintf("of kind %q and flow key %q waiting aside", kind, key)
		}
		rs = append(rs, WaitReason{Reason: WaitBehind, Key: key, Ahead: ahead, Detail: aheadText(ahead, false, where)})
	}
	return rs, nil
}

func aheadText(n int64, more bool, where string) string {
	s := strconv.FormatInt(n, 10)
	if more {
		s = "more than " + s
	}
	return fmt.Sprintf("behind %s jobs %s", s, where)
}

// aheadInStream counts the entries not yet delivered before entry id (at
// most maxAhead).
func (q *Queue) aheadInStream(ctx context.Context, id string) (int64, bool, error) {
	last, _, _, err := q.group(ctx)
	if err != nil {
		return 0, false, err
	}
	start := "-"
	if last != "" {
		start = "(" + last
	}
	var n int64
	for n < maxAhead {
		es, err := q.rdb().XRangeN(ctx, q.keys.Stream, start, "("+id, 1000).Result()
		if err != nil {
			return 0, false, err
		}
		n += int64(len(es))
		if len(es) < 1000 {
			return n, false, nil
		}
		start = "(" + es[len(es)-1].ID
	}
	return n, true, nil
}

// keyCap returns the cap of flow key key (0: none).
func keyCap(l FlowLimits, key string) int64 {
	if c, ok := l.Keys[key]; ok {
		return int64(c)
	}
	return int64(l.PerKey)
}

// kindReasons returns the caps of kind that hold a job of kind and key.
func (q *Queue) kindReasons(ctx context.Context, st rdb.FlowState, kind, key string) ([]WaitReason, error) {
	var rs []WaitReason
	if c := int64(st.Limits.Kinds[kind]); kind != "" && c > 0 && st.PerKind[kind] >= c {
		rs = append(rs, WaitReason{Reason: WaitKindCap, Kind: kind, Running: st.PerKind[kind], Cap: c,
			Detail: fmt.Sprintf("kind %q is at its cap: %d of %d running", kind, st.PerKind[kind], c)})
	}
	c := int64(st.Limits.KindPerKey[kind])
	if kind == "" || key == "" || c == 0 {
		return rs, nil
	}
	n, err := q.rdb().HGet(ctx, q.keys.Flow().KindCount, rdb.Lane(kind, key)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	if n >= c {
		rs = append(rs, WaitReason{Reason: WaitKindCap, Kind: kind, Key: key, Running: n, Cap: c,
			Detail: fmt.Sprintf("flow key %q is at the cap per key of kind %q: %d of %d running", key, kind, n, c)})
	}
	return rs, nil
}

// aside is where a job waiting aside for a cap is: its wait list (lane,
// see rdb.SplitLane) and the jobs of the list before it.
type aside struct {
	lane   string
	pos    int
	packed string // its fields as the wait list holds them
}

// asideJob finds the job with stable ID id in wait list lane (scanning at
// most maxAhead jobs); nil when it is not there.
func (q *Queue) asideJob(ctx context.Context, id, lane string) (*Job, error) {
	list := q.keys.Flow().Wait(lane)
	for start := int64(0); start < maxAhead; start += asidePage {
		page, err := q.rdb().LRange(ctx, list, start, start+asidePage-1).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for i, p := range page {
			f, err := wire.Unpack(p)
			if err != nil || f[wire.FieldJobID] != id {
				continue
			}
			j := jobFrom(f, id)
			j.ID, j.State = id, StateWaiting
			j.aside = &aside{lane: lane, pos: int(start) + i, packed: p}
			return &j, nil
		}
		if len(page) < asidePage {
			break
		}
	}
	return nil, nil
}

// WaitSummary returns how many jobs each reason holds (reasons that hold
// none are left out): jobs waiting aside per cap, jobs in the stream not yet
// delivered (behind, or no_consumer when no consumer read lately), delayed
// and retrying jobs; all waiting jobs count as paused while the queue is
// paused. It reads at most rdb.MaxFlowKeys flow keys.
func (q *Queue) WaitSummary(ctx context.Context) (map[string]int64, error) {
	o, err := q.Overview(ctx)
	if err != nil {
		return nil, err
	}
	st, err := q.db.FlowStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: flow state of %s: %w", q.name, err)
	}
	out := map[string]int64{}
	var aside int64
	for _, l := range st.Lanes {
		aside += l.Waiting
		switch capOf := keyCap(st.Limits, l.Key); {
		case l.Key != "" && capOf > 0 && st.PerKey[l.Key] >= capOf:
			out[WaitKeyCap] += l.Waiting
		case l.Kind != "":
			out[WaitKindCap] += l.Waiting
		default:
			out[WaitGlobalCap] += l.Waiting
		}
	}
	if o.Paused {
		clear(out)
		out[WaitPaused] = o.Waiting + aside
	} else if o.Waiting > 0 {
		live, err := q.LiveConsumers(ctx, liveWithin)
		if err != nil {
			return nil, err
		}
		if len(live) == 0 {
			out[WaitNoConsumer] = o.Waiting
		} else {
			out[WaitBehind] = o.Waiting
		}
	}
	out[WaitDelayed] = o.Delayed
	out[WaitRetryBackoff] = o.Retrying
	for r, n := range out {
		if n == 0 {
			delete(out, r)
		}
	}
	return out, nil
}

// FlowLimits are a queue's flow-control limits (see streamq.FlowLimits).
type FlowLimits = rdb.FlowLimits

// FlowState is what a queue's flow control holds: its limits, the jobs
// running in all and per flow key, and the jobs waiting aside per key.
type FlowState = rdb.FlowState

// Flow returns the queue's flow state.
func (q *Queue) Flow(ctx context.Context) (*FlowState, error) {
	st, err := q.db.FlowStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: flow state of %s: %w", q.name, err)
	}
	return &st, nil
}

// SetFlowLimits replaces the queue's flow-control limits (zero: none) and
// releases waiting jobs into the room a raised limit made. Running
// consumers apply them to the next jobs they start.
func (q *Queue) SetFlowLimits(ctx context.Context, l FlowLimits) error {
	if l.Global < 0 || l.PerKey < 0 || l.Rate < 0 {
		return fmt.Errorf("%w of %s: negative cap or rate (use 0 for none)", ErrInvalidFlowLimits, q.name)
	}
	for k, r := range l.Rates {
		if k == "" || r <= 0 {
			return fmt.Errorf("%w of %s: key %q limited at %g/s: name a key and a rate above 0", ErrInvalidFlowLimits, q.name, k, r)
		}
	}
	for k, n := range l.Keys {
		if k == "" || n < 1 {
			return fmt.Errorf("%w of %s: key %q capped at %d: name a key and cap it at 1 or more", ErrInvalidFlowLimits, q.name, k, n)
		}
	}
	for k, n := range l.Weights {
		if k == "" || n < 1 {
			return fmt.Errorf("%w of %s: key %q weighs %d: name a key and weigh it 1 or more", ErrInvalidFlowLimits, q.name, k, n)
		}
	}
	for _, m := range []map[string]int{l.Kinds, l.KindPerKey} {
		for c, n := range m {
			if c == "" || strings.ContainsAny(c, "\x00 \t\r\n") || n < 1 {
				return fmt.Errorf("%w of %s: kind %q capped at %d: name a kind and cap it at 1 or more", ErrInvalidFlowLimits, q.name, c, n)
			}
		}
	}
	if err := q.db.SetFlowLimits(ctx, l); err != nil {
		return fmt.Errorf("inspect: set flow limits of %s: %w", q.name, err)
	}
	return nil
}
