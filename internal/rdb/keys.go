package rdb

import "strconv"

// Keys builds the Redis keys of one queue, "<prefix>:{<name>}:<part>".
type Keys struct {
	base string // "<prefix>:{<name>}:"

	Stream      string // the job stream
	Dead        string // the dead-letter stream
	Delayed     string // delayed jobs (scheduled and retrying), scored by due time (Unix ms)
	DelayedJobs string // the fields of delayed jobs, by delayed-set ID
	Retrying    string // SET the delayed-set IDs of the delayed jobs that wait for a retry (see markLib)
	Cancelled   string // ZSET the IDs of the cancelled dead letters, scored by time (Unix ms; see markLib)

	// Inspection and control (see docs/operations.md, "Progress, results and
	// cancellation").
	Paused      string // STRING "1" while the queue is paused
	Cancel      string // HASH stable job ID -> cancel request time (Unix ms)
	Trail       string // HASH stable job ID -> where a moved job lives now (see Trail*)
	Workers     string // ZSET consumer or worker name -> last heartbeat (Unix ms)
	StartLeases string // ZSET consumer name -> end of its start lease (Unix ms, server's clock)
}

// Prefixes of the locations in the trail hash: a stream entry, a delayed
// job, a dead letter, a priority job.
const (
	TrailStream   = "s:"
	TrailDelayed  = "d:"
	TrailDead     = "x:"
	TrailPriority = "p:"
)

// Queue kinds in the registry hash (see [Registry]).
const (
	KindStream   = "stream"
	KindPriority = "priority"
)

// StatsTTL is how long a throughput counter key is kept (seconds; statsLib
// writes the same number).
const StatsTTL = 2 * 60 * 60

// Registry returns the key of the registry of the queues of prefix: a hash
// queue name -> kind. It has no hash tag: it is written with single
// commands, never in a script with a queue's keys.
func Registry(prefix string) string { return prefix + ":queues" }

// WriteBehindRegistry returns the key of the hash of the queues fed by a
// write-behind Writer (name -> "1").
func WriteBehindRegistry(prefix string) string { return prefix + ":writebehind" }

// Result returns the key of the result of job id.
func (k Keys) Result(id string) string { return k.base + "result:" + id }

// Progress returns the key of the progress of job id.
func (k Keys) Progress(id string) string { return k.base + "progress:" + id }

// Stats returns the key of the throughput counters of one minute (Unix
// seconds / 60): a hash with the fields "processed" and "failed".
func (k Keys) Stats(minute int64) string {
	return k.base + "stats:" + strconv.FormatInt(minute, 10)
}

// NewKeys returns the keys of queue name under prefix.
func NewKeys(prefix, name string) Keys {
	k := Keys{base: prefix + ":{" + name + "}:"}
	k.Stream = k.Part("stream")
	k.Dead = k.Part("dead")
	k.Delayed = k.Part("delayed")
	k.DelayedJobs = k.Part("delayed:jobs")
	k.Retrying = k.Delayed + ":retrying"
	k.Cancelled = k.Dead + ":cancelled"
	k.Paused = k.Part("paused")
	k.Cancel = k.Part("cancel")
	k.Trail = k.Part("trail")
	k.Workers = k.Part("workers")
	k.StartLeases = k.Part("start-leases")
	return k
}

// Part returns the key of part of the queue.
func (k Keys) Part(part string) string { return k.base + part }

// Heartbeat is the key of the heartbeat record of the consumer or worker
// name: a JSON object ([Heartbeat]) that lives WorkerForget after its last
// control tick.
func (k Keys) Heartbeat(name string) string { return k.base + "hb:" + name }

// Pattern matches every key of the queue (for a bounded SCAN in tests and
// tools; the library itself never scans).
func (k Keys) Pattern() string { return k.base + "*" }

// Unique returns the lock key of unique key u.
func (k Keys) Unique(u string) string { return k.base + "unique:" + u }

// OutboxMark returns the key of the marks named id under the queue's
// "outbox:" keys: the jobs released into the queue once each (see
// WorkflowMarks), in the queue's slot.
func (k Keys) OutboxMark(id string) string { return k.base + "outbox:" + id }

// Claims returns the key that remembers the last reclaim of a consumer, so
// that a reclaim re-sent after a lost reply returns the same jobs.
func (k Keys) Claims(consumer string) string { return k.base + "claims:" + consumer }

// PriorityKeys are the keys of a queue's priority set.
type PriorityKeys struct {
	Ready      string // jobs waiting to run, by score (priority) and member (FIFO)
	Leases     string // leased jobs, scored by lease deadline (server time, ms)
	Waiting    string // leases whose start is not charged yet (see scriptUncharge)
	Delayed    string // jobs waiting for a retry, scored by due time
	Retrying   string // SET the members of Delayed that wait for a retry (see markLib)
	Jobs       string // job fields by job ID
	Deliveries string // charged starts of each job's current copy that ended in crashes
	Seq        string // sequence counter (FIFO order and job IDs)
	Notify     string // wake-up stream for idle workers
	Trail      string // the queue's trail hash (see Keys.Trail)
	Cancel     string // the queue's cancel requests (see Keys.Cancel)
	Dead       string // the queue's dead-letter stream (see Keys.Dead)
	keys       Keys
	base       string
}

// Stats returns the key of the queue's throughput counters of minute.
func (k PriorityKeys) Stats(minute int64) string { return k.keys.Stats(minute) }

// Priority returns the keys of the queue's priority set.
func (k Keys) Priority() PriorityKeys {
	return PriorityKeys{
		Ready:      k.Part("priority"),
		Leases:     k.Part("leases"),
		Waiting:    k.Part("priority:waiting"),
		Delayed:    k.Part("priority:delayed"),
		Retrying:   k.Part("priority:delayed:retrying"),
		Jobs:       k.Part("priority:jobs"),
		Deliveries: k.Part("priority:deliveries"),
		Seq:        k.Part("priority:seq"),
		Notify:     k.Part("priority:notify"),
		Trail:      k.Trail,
		Cancel:     k.Cancel,
		Dead:       k.Dead,
		keys:       k,
		base:       k.base,
	}
}

// Pops returns the key that remembers the last pop of a worker run, so that
// a pop re-sent after a lost reply returns the same jobs.
func (k PriorityKeys) Pops(run string) string { return k.base + "priority:pop:" + run }
