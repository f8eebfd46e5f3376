package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Overview reads the queue's counts with O(1) and O(log n) commands only,
// whatever the queue's size: one pipeline of counters (XLEN, ZCARD, SCARD,
// ZCOUNT, ...), then XINFO GROUPS and the first waiting entry. The split of
// the delayed jobs (scheduled, retrying) and of the dead letters (cancelled,
// others) comes from markers the scripts keep beside them (see
// Overview.Retrying). Only a stream whose lag Redis cannot tell costs more:
// a bounded count (see Overview.Estimated).
func (q *Queue) Overview(ctx context.Context) (*Overview, error) {
	c := q.rdb()
	o := &Overview{Name: q.name, Kind: q.kind}
	pipe := c.Pipeline()
	paused := pipe.Exists(ctx, q.keys.Paused)
	wb := pipe.HExists(ctx, q.in.wb, q.name)
	dead := pipe.XLen(ctx, q.keys.Dead)
	cancelled := pipe.ZCard(ctx, q.keys.Cancelled)
	var xlen, delayed, retrying, ready, leases, completed *redis.IntCmd
	live := pipe.ZCount(ctx, q.keys.Workers, strconv.FormatInt(time.Now().Add(-LiveWithin).UnixMilli(), 10), "+inf")
	if q.kind == KindPriority {
		ready = pipe.ZCard(ctx, q.pkeys.Ready)
		leases = pipe.ZCard(ctx, q.pkeys.Leases)
		delayed = pipe.ZCard(ctx, q.pkeys.Delayed)
		retrying = pipe.SCard(ctx, q.pkeys.Retrying)
	} else {
		xlen = pipe.XLen(ctx, q.keys.Stream)
		delayed = pipe.ZCard(ctx, q.keys.Delayed)
		retrying = pipe.SCard(ctx, q.keys.Retrying)
		completed = pipe.ZCard(ctx, q.keys.Completed())
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("inspect: overview of %s: %w", q.name, err)
	}
	o.Paused, o.WriteBehind = paused.Val() == 1, wb.Val()
	// A marker left behind by a removal that does not know the markers (a
	// dead letter deleted by hand) may make a split too high, never more
	// than the whole.
	o.Retrying, o.Cancelled = min(retrying.Val(), delayed.Val()), min(cancelled.Val(), dead.Val())
	o.Delayed, o.Dead = delayed.Val()-o.Retrying, dead.Val()-o.Cancelled
	var err error
	if q.kind == KindPriority {
		o.Waiting, o.Running, o.Consumers = ready.Val(), leases.Val(), int(live.Val())
		o.Length = o.Waiting + o.Running + delayed.Val()
		if o.OldestWaiting, err = q.oldestReady(ctx); err != nil {
			return nil, fmt.Errorf("inspect: overview of %s: %w", q.name, err)
		}
		return o, nil
	}
	o.Length, o.Completed = xlen.Val(), completed.Val()
	last, lag, pending, err := q.group(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: overview of %s: %w", q.name, err)
	}
	o.Running, o.Consumers = pending, int(live.Val())
	start := "-"
	if last != "" {
		start = "(" + last
	}
	first, err := c.XRangeN(ctx, q.keys.Stream, start, "+", 1).Result()
	if err != nil {
		return nil, fmt.Errorf("inspect: overview of %s: %w", q.name, err)
	}
	if len(first) == 1 {
		o.OldestWaiting = max(time.Since(idTime(first[0].ID)), 0)
	}
	switch {
	case last == "":
		o.Waiting = o.Length // no group yet: every entry waits
	case lag >= 0:
		o.Waiting = lag
	case len(first) == 0:
		o.Waiting = 0
	default:
		// Redis cannot tell the lag (an entry at or after the last delivered
		// one was deleted): count the entries after it, bounded.
		n, err := c.XRangeN(ctx, q.keys.Stream, start, "+", int64(q.in.opts.ScanLimit)).Result()
		if err != nil {
			return nil, fmt.Errorf("inspect: overview of %s: %w", q.name, err)
		}
		o.Waiting, o.Estimated = int64(len(n)), o.Estimated || len(n) == q.in.opts.ScanLimit
	}
	return o, nil
}

// oldestReady returns the age of the oldest job of the ready set: the one
// with the lowest sequence number among the heads of the first maxLevels
// levels.
func (q *Queue) oldestReady(ctx context.Context) (time.Duration, error) {
	heads, err := q.levelHeads(ctx, maxLevels)
	if err != nil || len(heads) == 0 {
		return 0, err
	}
	oldest := ""
	for _, z := range heads {
		m, _ := z.Member.(string)
		if oldest == "" || m < oldest { // the padded sequence number leads
			oldest = m
		}
	}
	data, err := q.rdb().HGet(ctx, q.pkeys.Jobs, memberID(oldest)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	f, err := wire.Unpack(data)
	if err != nil {
		return 0, nil
	}
	if j := jobFrom(f, ""); !j.EnqueuedAt.IsZero() {
		return max(time.Since(j.EnqueuedAt), 0), nil
	}
	return 0, nil
}

// Throughput returns the processed and failed counts of the last minutes
// (1 to MaxThroughputMinutes), one Point per minute, oldest first, the
// current minute last. One pipeline of HMGET.
func (q *Queue) Throughput(ctx context.Context, minutes int) ([]Point, error) {
	if minutes < 1 || minutes > MaxThroughputMinutes {
		return nil, fmt.Errorf("inspect: Throughput of %d minutes: use 1 to %d (the counters are kept for two hours)", minutes, MaxThroughputMinutes)
	}
	now := time.Now().Unix() / 60
	pipe := q.rdb().Pipeline()
	cmds := make([]*redis.SliceCmd, minutes)
	for i := range cmds {
		m := now - int64(minutes-1-i)
		cmds[i] = pipe.HMGet(ctx, q.keys.Stats(m), "processed", "failed")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("inspect: throughput of %s: %w", q.name, err)
	}
	out := make([]Point, minutes)
	for i, cmd := range cmds {
		m := now - int64(minutes-1-i)
		out[i].At = time.Unix(m*60, 0)
		v := cmd.Val()
		if len(v) == 2 {
			out[i].Processed = toInt(v[0])
			out[i].Failed = toInt(v[1])
		}
	}
	return out, nil
}

func toInt(v any) int64 {
	s, _ := wire.Str(v)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// LiveWithin is how recent a consumer's or worker's last heartbeat must be
// for it to count as alive (see [Consumer.Alive]): 15 control intervals at
// the default of one second.
const LiveWithin = 15 * time.Second

// maxListedConsumers bounds the consumers [Queue.Consumers] lists.
const maxListedConsumers = 1000

// Consumers lists the consumers and workers of the queue: those with a
// heartbeat (alive, or dead after a crash until pruned; see
// [Consumer.Alive]), with the jobs each holds, and for a stream queue also
// the consumers of its group that have none (older versions). Sorted by
// name; at most 1,000.
func (q *Queue) Consumers(ctx context.Context) ([]Consumer, error) {
	c := q.rdb()
	ws, err := c.ZRangeWithScores(ctx, q.keys.Workers, 0, maxListedConsumers-1).Result()
	if err != nil {
		return nil, fmt.Errorf("inspect: consumers of %s: %w", q.name, err)
	}
	now := time.Now()
	kind := "consumer"
	if q.kind == KindPriority {
		kind = "worker"
	}
	out := make([]Consumer, len(ws))
	byName := make(map[string]int, len(ws))
	keys := make([]string, len(ws))
	for i, w := range ws {
		name, _ := w.Member.(string)
		seen := time.UnixMilli(int64(w.Score))
		out[i] = Consumer{Name: name, Kind: kind, LastSeen: seen, Idle: max(now.Sub(seen), 0)}
		byName[name], keys[i] = i, q.keys.Heartbeat(name)
	}
	if len(keys) > 0 {
		infos, err := c.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, fmt.Errorf("inspect: heartbeats of %s: %w", q.name, err)
		}
		for i, v := range infos {
			fillHeartbeat(&out[i], v, now)
		}
	}
	if q.kind == KindPriority {
		held, err := q.leasesByOwner(ctx)
		if err != nil {
			return nil, err
		}
		for i := range out {
			out[i].Pending = held[out[i].Name]
		}
		return out, nil
	}
	cs, err := c.XInfoConsumers(ctx, q.keys.Stream, q.in.opts.Group).Result()
	if err != nil && !rdb.IsNoSuchKey(err) && !rdb.IsNoGroup(err) {
		return nil, fmt.Errorf("inspect: consumers of %s: %w", q.name, err)
	}
	for _, x := range cs {
		if i, ok := byName[x.Name]; ok {
			out[i].Pending, out[i].Idle = x.Pending, x.Idle
			continue
		}
		if len(out) >= maxListedConsumers {
			continue
		}
		out = append(out, Consumer{Name: x.Name, Kind: "consumer", Pending: x.Pending, Idle: x.Idle, LastSeen: now.Add(-x.Idle), Alive: x.Idle < LiveWithin})
	}
	slices.SortFunc(out, func(a, b Consumer) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// fillHeartbeat sets what the heartbeat record v (nil when it expired) says
// of c, and whether c is alive.
func fillHeartbeat(c *Consumer, v any, now time.Time) {
	every := time.Duration(0)
	if s, ok := v.(string); ok {
		var hb rdb.Heartbeat
		if json.Unmarshal([]byte(s), &hb) == nil {
			if hb.Role != "" {
				c.Kind = hb.Role
			}
			c.Host, c.PID, c.Concurrency, c.Version = hb.Host, hb.PID, hb.Concurrency, hb.Version
			if hb.Started > 0 {
				c.Started = time.UnixMilli(hb.Started)
			}
			every = time.Duration(hb.Every) * time.Millisecond
		}
	}
	c.Alive = now.Sub(c.LastSeen) < max(LiveWithin, 3*every)
}

// leasesByOwner counts the leases of each worker among the first ScanLimit.
func (q *Queue) leasesByOwner(ctx context.Context) (map[string]int64, error) {
	ls, err := q.rdb().ZRange(ctx, q.pkeys.Leases, 0, int64(q.in.opts.ScanLimit)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("inspect: leases of %s: %w", q.name, err)
	}
	held := map[string]int64{}
	for _, l := range ls {
		held[leaseOwner(l)]++
	}
	return held, nil
}

// PruneConsumers deletes the consumers idle for at least idle that hold no
// job, and returns their names. For a stream queue, the check and the
// deletion from the group are one script (a consumer that holds a job is
// never deleted: its jobs would vanish from the pending list). It also
// forgets the heartbeats (see [Consumer.Alive]) older than idle of
// consumers and workers that hold no job or lease: those of crashed
// processes (a consumer that stops cleanly removes its own).
func (q *Queue) PruneConsumers(ctx context.Context, idle time.Duration) ([]string, error) {
	if idle <= 0 {
		return nil, fmt.Errorf("inspect: PruneConsumers idle %s: use a positive duration, longer than the consumers' keep-alive", idle)
	}
	c := q.rdb()
	var gone []string
	held := map[string]int64{}
	if q.kind != KindPriority {
		var err error
		gone, err = q.db.Prune(ctx, rdb.PruneParams{Idle: idle})
		if err != nil && !rdb.IsNoSuchKey(err) && !rdb.IsNoGroup(err) {
			return nil, fmt.Errorf("inspect: prune consumers of %s: %w", q.name, err)
		}
		cs, err := c.XInfoConsumers(ctx, q.keys.Stream, q.in.opts.Group).Result()
		if err != nil && !rdb.IsNoSuchKey(err) && !rdb.IsNoGroup(err) {
			return nil, fmt.Errorf("inspect: consumers of %s: %w", q.name, err)
		}
		for _, x := range cs {
			held[x.Name] = x.Pending
		}
	} else {
		var err error
		if held, err = q.leasesByOwner(ctx); err != nil {
			return nil, err
		}
	}
	// Heartbeats older than idle of consumers and workers that hold no job.
	cutoff := strconv.FormatInt(time.Now().Add(-idle).UnixMilli(), 10)
	ws, err := c.ZRangeArgs(ctx, redis.ZRangeArgs{Key: q.keys.Workers, Start: "-inf", Stop: cutoff, ByScore: true, Count: maxListedConsumers}).Result()
	if err != nil {
		return nil, fmt.Errorf("inspect: prune workers of %s: %w", q.name, err)
	}
	var stale []string
	for _, w := range ws {
		if held[w] == 0 {
			stale = append(stale, w)
		}
	}
	if len(stale) == 0 {
		return gone, nil
	}
	pipe := c.TxPipeline()
	for _, w := range stale {
		pipe.ZRem(ctx, q.keys.Workers, w)
		pipe.Del(ctx, q.keys.Heartbeat(w))
		if !slices.Contains(gone, w) {
			gone = append(gone, w)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("inspect: prune workers of %s: %w", q.name, err)
	}
	return gone, nil
}

// maxLevels bounds the levels Levels returns.
const maxLevels = 1000

// Levels returns the priorities of a priority queue's ready jobs and how
// many wait at each, first to run first: one script that finds the head of
// each level (a ZRANGE BYSCORE each, O(log n)) and a pipeline of ZCOUNT, at
// most 1000 levels. A stream queue has none.
func (q *Queue) Levels(ctx context.Context) ([]Level, error) {
	if q.kind != KindPriority {
		return []Level{}, nil
	}
	c := q.rdb()
	heads, err := q.levelHeads(ctx, maxLevels)
	if err != nil {
		return nil, fmt.Errorf("inspect: levels of %s: %w", q.name, err)
	}
	pipe := c.Pipeline()
	counts := make([]*redis.IntCmd, len(heads))
	data := make([]*redis.StringCmd, len(heads))
	for i, z := range heads {
		s := strconv.FormatFloat(z.Score, 'f', -1, 64)
		m, _ := z.Member.(string)
		counts[i] = pipe.ZCount(ctx, q.pkeys.Ready, s, s)
		data[i] = pipe.HGet(ctx, q.pkeys.Jobs, memberID(m))
	}
	if len(heads) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("inspect: levels of %s: %w", q.name, err)
		}
	}
	out := make([]Level, len(heads))
	for i, z := range heads {
		j := Job{}
		if f, err := wire.Unpack(data[i].Val()); err == nil {
			j = jobFrom(f, "")
		}
		m, _ := z.Member.(string)
		setPriority(&j, m)
		out[i] = Level{Priority: j.Priority, Count: counts[i].Val()}
	}
	return out, nil
}

// WriteBehind reads the state of a queue fed by a writebehind.Writer:
// changes not yet persisted (waiting or running), the age of the oldest,
// retrying and dead ones, and the newest error.
func (q *Queue) WriteBehind(ctx context.Context) (*WriteBehindStatus, error) {
	o, err := q.Overview(ctx)
	if err != nil {
		return nil, err
	}
	s := &WriteBehindStatus{Unpersisted: o.Waiting + o.Running, Retrying: o.Retrying + o.Delayed, Dead: o.Dead + o.Cancelled, OldestAge: o.OldestWaiting}
	c := q.rdb()
	if o.Running > 0 && q.kind == KindStream {
		ps, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.keys.Stream, Group: q.in.opts.Group, Start: "-", End: "+", Count: 1}).Result()
		if err == nil && len(ps) == 1 {
			s.OldestAge = max(s.OldestAge, time.Since(idTime(ps[0].ID)))
		}
	}
	if last, err := c.XRevRangeN(ctx, q.keys.Dead, "+", "-", 1).Result(); err == nil && len(last) == 1 {
		s.LastError = deadJob(last[0].Values, last[0].ID).LastError
	}
	if s.LastError == "" && o.Retrying > 0 {
		p, err := q.Jobs(ctx, ListOptions{State: StateRetrying, Limit: 1})
		if err == nil && len(p.Jobs) == 1 {
			s.LastError = p.Jobs[0].LastError
		}
	}
	return s, nil
}
