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
package rdb

// Keys builds the Redis keys of one queue, "<prefix>:{<name>}:<part>".
type Keys struct {
	base string // "<prefix>:{<name>}:"

	Stream      string // the job stream
	Dead        string // the dead-letter stream
	Delayed     string // delayed jobs (scheduled and retrying), scored by due time (Unix ms)
	DelayedJobs string // the fields of delayed jobs, by delayed-set ID
}

// NewKeys returns the keys of queue name under prefix.
func NewKeys(prefix, name string) Keys {
	k := Keys{base: prefix + ":{" + name + "}:"}
	k.Stream = k.Part("stream")
	k.Dead = k.Part("dead")
	k.Delayed = k.Part("delayed")
	k.DelayedJobs = k.Part("delayed:jobs")
	return k
}

// Part returns the key of part of the queue.
func (k Keys) Part(part string) string { return k.base + part }

// Pattern matches every key of the queue (for a bounded SCAN in tests and
// tools; the library itself never scans).
func (k Keys) Pattern() string { return k.base + "*" }

// Unique returns the lock key of unique key u.
func (k Keys) Unique(u string) string { return k.base + "unique:" + u }

// Claims returns the key that remembers the last reclaim of a consumer, so
// that a reclaim re-sent after a lost reply returns the same jobs.
func (k Keys) Claims(consumer string) string { return k.base + "claims:" + consumer }

// PriorityKeys are the keys of a queue's priority set.
type PriorityKeys struct {
	Ready      string // jobs waiting to run, by score (priority) and member (FIFO)
	Leases     string // leased jobs, scored by lease deadline (server time, ms)
	Waiting    string // leases whose start is not charged yet (see scriptUncharge)
	Delayed    string // jobs waiting for a retry, scored by due time
	Jobs       string // job fields by job ID
	Deliveries string // charged starts of each job's current copy that ended in crashes
	Seq        string // sequence counter (FIFO order and job IDs)
	Notify     string // wake-up stream for idle workers
	base       string
}

// Priority returns the keys of the queue's priority set.
func (k Keys) Priority() PriorityKeys {
	return PriorityKeys{
		Ready:      k.Part("priority"),
		Leases:     k.Part("leases"),
		Waiting:    k.Part("priority:waiting"),
		Delayed:    k.Part("priority:delayed"),
		Jobs:       k.Part("priority:jobs"),
		Deliveries: k.Part("priority:deliveries"),
		Seq:        k.Part("priority:seq"),
		Notify:     k.Part("priority:notify"),
		base:       k.base,
	}
}

// Pops returns the key that remembers the last pop of a worker run, so that
// a pop re-sent after a lost reply returns the same jobs.
func (k PriorityKeys) Pops(run string) string { return k.base + "priority:pop:" + run }
