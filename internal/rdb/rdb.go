// Package rdb is streamq's one home for Redis: the key layout of a queue,
// every Lua script (each with a header naming its KEYS, ARGV and reply), and
// the translation of Redis error replies. Every script touches only keys of
// one queue, which share the queue's Cluster hash tag "{name}", so all of
// them run on Redis Cluster.
//
// Scripts follow two rules that make every move of a job lose nothing:
// a job is written to its new place before it is removed from the old one
// (a script aborted half-way by an error can duplicate, never lose), and
// the work of one call is bounded (no script blocks Redis for long).
//
// The calls of one queue are methods of a [Queue] (its client, keys, caps
// and clock), made once per streamq.Queue; the priority set's are methods
// of its [PrioritySet]. A call takes its parameters in one …Params struct
// (a call with a single parameter takes it as it is), so that the compiler
// and the reader can tell its many strings apart. Calls that need no queue
// (the registry, the token bucket) are plain functions.
//
// Every script's work is bounded: by a limit of the call (Promote's Limit,
// Reclaim's Count, Pop's N, Reap's limit, MaxControlBatch, the census
// sample, trim_budget and trim_nodes of the cap), by one job, or by the
// list of IDs the caller passes (Ack, Touch, Adopt, Finish, KeepAlive,
// Requeue, DropCancels), which the callers bound (the engine's batches,
// MaxBatchChunk).
//
// The files follow the concerns: enqueue.go (adding jobs under the cap),
// delayed.go (the delayed set), settle.go (acknowledge, retry, dead-letter,
// requeue), claim.go (claims of stream entries), priority.go (the priority
// set), inspect.go (the operators' verbs), control.go (pause, cancel,
// throughput counters), progress.go, periodic.go, writebehind.go,
// ratelimit.go; lib.go and memo.go hold what the scripts share.
package rdb

import (
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Clock tells the time of day. Every reading of the process's clock in
// this package goes through the [Queue]'s clock: the minutes of the
// throughput counters, progress times, cancel requests, memo buckets, the
// workers' heartbeats. No due time reads it: delayed jobs, retries and
// postponements, promotion, periodic ticks, leases and idleness are the
// server's clock (TIME in the scripts, see timeLib). Tests replace it (see
// [Queue.SetClock]) to run one process ahead of or behind the others.
type Clock interface {
	Now() time.Time
}

// SystemClock is the process's clock, [time.Now].
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Config is what a [Queue] needs to know of its streamq.Queue.
type Config struct {
	Prefix string // the key prefix (QueueConfig.KeyPrefix)
	Name   string // the queue's name
	Group  string // the consumer group of the stream
	// MaxLen caps the jobs the group has not acknowledged (0 or less:
	// none), as every enqueue script applies it.
	MaxLen int64
	// DeadLetterMaxLen caps the dead-letter stream (0: keep every letter).
	DeadLetterMaxLen int64
	// Clock is the queue's clock. Defaults to SystemClock.
	Clock Clock
	// DoneRetention is how long a finished job with a chosen ID keeps its
	// ID taken (its done marker lives); 0 or less: no done markers.
	DoneRetention time.Duration
	// Completed is how long and how many records of completed jobs the
	// queue keeps (zero: none; see completed.go).
	Completed CompletedConfig
	// SlotProbe runs the scripts that touch keys they do not declare with
	// their slot probe (slotProbe) even when the client is not a
	// *redis.ClusterClient: for tests that talk to one Cluster node.
	SlotProbe bool
}

// Queue makes the Redis calls of one queue. It is safe for concurrent use.
type Queue struct {
	client redis.UniversalClient
	keys   Keys
	prio   PrioritySet
	clock  Clock
	probe  bool // run the probed scripts' Cluster variants (see probedScript)
	prefix string
	name   string
	group  string
	maxLen any  // the cap as a script argument (0: none), boxed once
	capped bool // the queue has a cap (MaxLen > 0)
	dlCap  int64
	// doneTTL is the done markers' TTL (ms; 0: none).
	doneTTL int64
	// completedTTL and completedMax are the retention (ms; 0: none) and
	// the cap (0: none) of the records of completed jobs.
	completedTTL, completedMax int64
	memo                       memoState
}

// New returns the calls of the queue cfg describes on client.
func New(client redis.UniversalClient, cfg Config) *Queue {
	q := &Queue{
		client:  client,
		keys:    NewKeys(cfg.Prefix, cfg.Name),
		clock:   cfg.Clock,
		prefix:  cfg.Prefix,
		name:    cfg.Name,
		group:   cfg.Group,
		maxLen:  max(cfg.MaxLen, 0),
		capped:  cfg.MaxLen > 0,
		dlCap:   max(cfg.DeadLetterMaxLen, 0),
		doneTTL: max(cfg.DoneRetention.Milliseconds(), 0),

		completedTTL: max(cfg.Completed.Retention.Milliseconds(), 0),
		completedMax: max(cfg.Completed.Max, 0),
	}
	if q.clock == nil {
		q.clock = SystemClock{}
	}
	_, cluster := client.(*redis.ClusterClient)
	q.probe = cluster || cfg.SlotProbe
	q.prio = PrioritySet{q: q, k: q.keys.Priority()}
	return q
}

// sc returns the variant of s this queue runs: with the slot probe on a
// Redis Cluster, without it elsewhere.
func (q *Queue) sc(s probedScript) *redis.Script {
	if q.probe {
		return s.cluster
	}
	return s.plain
}

// SetClock replaces the queue's clock. Call it before the queue is used
// (it is not synchronised with calls in flight): tests use it to move one
// process's time.
func (q *Queue) SetClock(c Clock) { q.clock = c }

// Now returns the time of the queue's clock.
func (q *Queue) Now() time.Time { return q.clock.Now() }

// SystemClock reports whether the queue's clock is [SystemClock], so that a
// time read with [time.Now] is a time of its clock.
func (q *Queue) SystemClock() bool {
	_, ok := q.clock.(SystemClock)
	return ok
}

// Client returns the queue's Redis client.
func (q *Queue) Client() redis.UniversalClient { return q.client }

// Keys returns the queue's keys.
func (q *Queue) Keys() Keys { return q.keys }

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Group returns the queue's consumer group.
func (q *Queue) Group() string { return q.group }

// KeepsDone reports whether the queue keeps done markers: whether a job
// with a chosen ID keeps its ID taken after it finished
// (Config.DoneRetention).
func (q *Queue) KeepsDone() bool { return q.doneTTL > 0 }

// Priority returns the calls of the queue's priority set.
func (q *Queue) Priority() *PrioritySet { return &q.prio }

// minute returns the throughput counters' minute of now.
func (q *Queue) minute() int64 { return Minute(q.clock.Now()) }

// DueMillis returns t in Unix milliseconds, rounded up, so that a job due
// at t is never moved into the stream before its time.
func DueMillis(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// DueArg returns the due-time argument of a script (see due_at in timeLib):
// with in > 0, in after the server's clock (rounded up to the millisecond);
// else at, an absolute time (rounded up), or "0" when at is zero. A delay
// is never turned into an absolute time by the process's clock, so a
// process whose clock is off moves no job early or late.
func DueArg(at time.Time, in time.Duration) string {
	switch {
	case in > 0:
		return "+" + strconv.FormatInt(int64((in+time.Millisecond-1)/time.Millisecond), 10)
	case at.IsZero():
		return "0"
	}
	return strconv.FormatInt(DueMillis(at), 10)
}
