package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/rdb"
)

// DefaultLiveWithin is DeleteQueueOptions.LiveWithin when it is zero.
const DefaultLiveWithin = time.Minute

// Batches of DeleteQueue: keys asked of one SCAN call, and deleted by one
// UNLINK.
const (
	scanCount   = 1000
	unlinkBatch = 100
)

// DeleteQueueOptions configures [Inspector.DeleteQueue]. The zero value (or
// nil) refuses a queue in use.
type DeleteQueueOptions struct {
	// Force deletes the queue although consumers or workers are live. They
	// do not stop: the next job a producer enqueues, or a consumer's next
	// read, makes the queue's stream again (and its registry entry, once
	// they restart). Defaults to false.
	Force bool
	// LiveWithin is how recently a consumer must have read (its idle time
	// in XINFO CONSUMERS) or a priority worker sent its heartbeat to count
	// as live. Defaults to DefaultLiveWithin.
	LiveWithin time.Duration
	// Progress, if not nil, is called after each batch of deleted keys with
	// the number deleted so far.
	Progress func(deleted int)
}

// DeleteQueue deletes queue name: every key of it (jobs in every state,
// dead letters, schedules, counters, results, locks), found by a SCAN of
// the queue's own keys ("<prefix>:{<name>}:*", on the node that holds them
// in a cluster) that asks for scanCount keys per call and unlinks them (the
// memory is freed in the background) in batches of unlinkBatch, then its
// entries in the registry and the write-behind registry. It returns the
// number of keys deleted.
//
// It refuses, with an [*InUseError] (errors.Is [ErrQueueInUse]), a queue
// whose consumers or workers are live, unless opts.Force is set. Stop them
// first: a producer or consumer that goes on makes the queue again. An
// unknown queue is a [*NotFoundError].
func (in *Inspector) DeleteQueue(ctx context.Context, name string, opts *DeleteQueueOptions) (int, error) {
	var o DeleteQueueOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case o.LiveWithin == 0:
		o.LiveWithin = DefaultLiveWithin
	case o.LiveWithin < 0:
		return 0, fmt.Errorf("inspect: DeleteQueueOptions.LiveWithin %s is negative: use a positive duration, or 0 for the default (%s)", o.LiveWithin, DefaultLiveWithin)
	}
	if strings.ContainsAny(name, "{}") {
		return 0, fmt.Errorf("inspect: queue name %q holds a brace, which no queue's keys can: remove its registry entry by hand (HDEL %s)", name, in.queue)
	}
	q, err := in.Queue(ctx, name)
	if err != nil {
		return 0, err
	}
	if !o.Force {
		live, err := q.LiveConsumers(ctx, o.LiveWithin)
		if err != nil {
			return 0, err
		}
		if len(live) > 0 {
			return 0, &InUseError{Queue: name, Live: live, Within: o.LiveWithin}
		}
	}
	n, err := in.deleteKeys(ctx, q.keys, o.Progress)
	if err != nil {
		return n, fmt.Errorf("inspect: delete queue %s after %d keys: %w", name, n, err)
	}
	pipe := in.rdb.Pipeline()
	pipe.HDel(ctx, in.queue, name)
	pipe.HDel(ctx, in.wb, name)
	if _, err := pipe.Exec(ctx); err != nil {
		return n, fmt.Errorf("inspect: delete queue %s from the registry %s: %w", name, in.queue, err)
	}
	return n, nil
}

// LiveConsumers returns the consumers of the queue's group that read
// within d (their idle time in XINFO CONSUMERS) and its priority workers
// whose last heartbeat is within d: what keeps [Inspector.DeleteQueue] from
// deleting the queue without Force. A consumer that stopped stays "live"
// until d passed.
func (q *Queue) LiveConsumers(ctx context.Context, d time.Duration) ([]Consumer, error) {
	c := q.rdb()
	var out []Consumer
	cs, err := c.XInfoConsumers(ctx, q.keys.Stream, q.in.opts.Group).Result()
	if err != nil && !rdb.IsNoSuchKey(err) && !rdb.IsNoGroup(err) {
		return nil, fmt.Errorf("inspect: consumers of %s: %w", q.name, err)
	}
	for _, x := range cs {
		if x.Idle < d {
			out = append(out, Consumer{Name: x.Name, Kind: "consumer", Pending: x.Pending, Idle: x.Idle, LastSeen: time.Now().Add(-x.Idle)})
		}
	}
	since := time.Now().Add(-d).UnixMilli()
	ws, err := c.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: q.keys.Workers, Start: since, Stop: "+inf", ByScore: true}).Result()
	if err != nil {
		return nil, fmt.Errorf("inspect: workers of %s: %w", q.name, err)
	}
	for _, w := range ws {
		name, _ := w.Member.(string)
		seen := time.UnixMilli(int64(w.Score))
		out = append(out, Consumer{Name: name, Kind: "worker", LastSeen: seen, Idle: max(time.Since(seen), 0)})
	}
	return out, nil
}

// deleteKeys unlinks every key of the queue of k and returns how many.
func (in *Inspector) deleteKeys(ctx context.Context, k rdb.Keys, progress func(int)) (int, error) {
	node := redis.Cmdable(in.rdb)
	if cc, ok := in.rdb.(*redis.ClusterClient); ok {
		// Every key of the queue shares its hash tag: one node holds them.
		m, err := cc.MasterForKey(ctx, k.Stream)
		if err != nil {
			return 0, err
		}
		node = m
	}
	pattern := globEscape(strings.TrimSuffix(k.Pattern(), "*")) + "*"
	deleted := 0
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, pattern, scanCount).Result()
		if err != nil {
			return deleted, err
		}
		for len(keys) > 0 {
			batch := keys[:min(unlinkBatch, len(keys))]
			keys = keys[len(batch):]
			n, err := in.rdb.Unlink(ctx, batch...).Result()
			if err != nil {
				return deleted, err
			}
			deleted += int(n)
			if progress != nil {
				progress(deleted)
			}
		}
		if next == 0 {
			return deleted, nil
		}
		cursor = next
	}
}

// globEscape escapes the characters SCAN MATCH reads as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// structural returns the keys that exist while a queue has anything in it:
// its jobs in every state, dead letters, pause flag, workers, schedules,
// trail, cancel requests and completed jobs. Per-job keys (results, progress, unique
// locks) and counters expire on their own and are left out.
func structural(k rdb.Keys) []string {
	pk := k.Priority()
	return []string{
		k.Stream, k.Dead, k.Delayed, k.DelayedJobs, k.Paused, k.Cancel, k.Trail, k.Workers,
		pk.Ready, pk.Leases, pk.Delayed, pk.Jobs, k.Part(rdb.PartSchedules),
		k.Retrying, k.Cancelled, pk.Retrying, k.Completed(),
	}
}

// PruneQueues removes the registry entries of "ghost" queues: registered
// queues none of whose keys (jobs in any state, dead letters, pause flag,
// workers, schedules) exist any more, as after their keys were deleted by
// hand or expired. It also removes write-behind registry entries of
// queues not registered. It returns the names it removed, sorted. One
// EXISTS per queue, pipelined; a queue that gets a job between the check
// and the removal is registered again at once.
func (in *Inspector) PruneQueues(ctx context.Context) ([]string, error) {
	pipe := in.rdb.Pipeline()
	reg := pipe.HGetAll(ctx, in.queue)
	wb := pipe.HKeys(ctx, in.wb)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("inspect: read the registry %s: %w", in.queue, err)
	}
	ghosts, err := in.ghosts(ctx, reg.Val())
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, g := range ghosts {
		if err := in.rdb.HDel(ctx, in.queue, g).Err(); err != nil {
			return removed, fmt.Errorf("inspect: prune %s from the registry: %w", g, err)
		}
		// A producer may have enqueued its first job since the check.
		again, err := in.ghosts(ctx, map[string]string{g: reg.Val()[g]})
		if err != nil {
			return removed, err
		}
		if len(again) == 0 {
			if err := in.rdb.HSetNX(ctx, in.queue, g, reg.Val()[g]).Err(); err != nil {
				return removed, fmt.Errorf("inspect: register %s again: %w", g, err)
			}
			continue
		}
		removed = append(removed, g)
	}
	var stale []string
	for _, n := range wb.Val() {
		if _, ok := reg.Val()[n]; !ok || slices.Contains(removed, n) {
			stale = append(stale, n)
		}
	}
	if len(stale) > 0 {
		if err := in.rdb.HDel(ctx, in.wb, stale...).Err(); err != nil {
			return removed, fmt.Errorf("inspect: prune the write-behind registry %s: %w", in.wb, err)
		}
		for _, n := range stale {
			if !slices.Contains(removed, n) {
				removed = append(removed, n)
			}
		}
	}
	slices.Sort(removed)
	return removed, nil
}

// ghosts returns the names of reg (name -> kind) whose structural keys are
// all gone, sorted.
func (in *Inspector) ghosts(ctx context.Context, reg map[string]string) ([]string, error) {
	names := make([]string, 0, len(reg))
	for n := range reg {
		if !strings.ContainsAny(n, "{}") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []string
	for from := 0; from < len(names); from += unlinkBatch {
		chunk := names[from:min(from+unlinkBatch, len(names))]
		pipe := in.rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(chunk))
		for i, n := range chunk {
			cmds[i] = pipe.Exists(ctx, structural(rdb.NewKeys(in.opts.Prefix, n))...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("inspect: look for the keys of the registered queues: %w", err)
		}
		for i, cmd := range cmds {
			if cmd.Val() == 0 {
				out = append(out, chunk[i])
			}
		}
	}
	return out, nil
}
