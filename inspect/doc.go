// Package inspect reads and controls streamq queues: the API behind the
// streamq CLI and the dashboard, and what an operator's own tools call.
//
// An [Inspector] finds the queues of a key prefix in the registry that
// queues, producers and consumers keep (never KEYS or SCAN), and a [Queue]
// shows one queue: an [Overview] of its counts, throughput per minute, its
// jobs by [State] with paging and filters, one job by ID in whichever state
// it is, its consumers or priority workers, priority levels and write-behind
// status. Control verbs pause and resume a queue, delete a job, run a delayed
// job now, cancel a running job, and requeue or purge dead letters by
// filter.
//
// Every call does bounded work: a listing examines at most
// [Options].ScanLimit entries (reported in [Page].Scanned) and returns a
// cursor to continue from; every control verb is one Lua script (or one
// command) that checks the job's state and acts in the same step, so it is
// safe while consumers run: a job is either deleted or run, never both.
package inspect
