// Package priority runs the jobs of a streamq queue in priority order, on a
// Redis sorted set, without giving up streamq's durability: some jobs must
// jump the line (a password-reset mail before a weekly digest).
//
// A [Queue] is the priority set of a [streamq.Queue]. Jobs get into it by
// [Queue.Push] and [Queue.PushBatch], or from the queue's stream: producers
// enqueue stream jobs with [WithPriority], and a [streamq.Consumer] running
// the [Forward] handler moves each one into the priority set. A [Worker]
// runs a normal [streamq.Handler] over the set, most urgent job first, with
// the stream consumer's middleware, retries, dead letters and shutdown.
//
//	pq, _ := priority.NewQueue(q, nil)
//	id, err := pq.Push(ctx, priority.Job{Priority: 10, Payload: []byte("reset")})
//
//	w, _ := priority.NewWorker(pq, handler, &priority.WorkerConfig{Concurrency: 16})
//	err = w.Run(ctx)
//
// # Order
//
// Higher priorities run first (QueueConfig.LowerFirst reverses that).
// Priorities are integers from [MinPriority] to [MaxPriority] (the int32
// range). Jobs of equal priority run in the order they were pushed or
// forwarded (FIFO): a sequence number from one counter per queue, zero-padded
// to 20 digits in the sorted-set member, orders them for every int64 value
// (not only up to 2^32 or 2^53). A job that is retried, or whose lease
// expired, goes back with its original priority and its original place.
// With several workers, or Concurrency above 1, jobs start in this order but
// may finish in any order.
//
// Weighted mode (WorkerConfig.Bands) trades strict priority for fairness:
// the worker shares its pops between bands of priorities by weight (for
// example 6:3:1), so low priorities keep moving while high ones are busy.
// Within a band the order stays priority, then FIFO. A band without jobs
// gives its share to the others. The cost: a job of a less urgent band may
// start while more urgent jobs wait, and each pop counts the jobs of every
// band (one ZCOUNT per band).
//
// # Guarantees
//
// The guarantees of streamq hold for priority jobs too: at least once, and
// nothing lost.
//
//   - Reliable pop: one Lua script takes jobs from the ready set and puts
//     them into the lease set with a deadline (the Redis server's clock). A
//     running job's lease is extended every Lease/4; finishing removes the
//     job. A lease that expires (its worker was SIGKILLed, hung, or lost
//     Redis) is returned to the ready set, with the job's original priority
//     and place, by the reaper of any worker. No job is lost if a worker
//     dies at any instruction; duplicates are bounded by the jobs it held
//     leased.
//   - Atomic moves: push, forward (add to the set and XACK the stream
//     entry), pop, finish, retry (lease to delayed set to ready set), dead
//     letter (lease to the queue's dead-letter stream) and lease expiry are
//     each one script, on keys that share the queue's hash tag.
//   - Forward is idempotent: it forwards an entry only while the entry is
//     pending in the group, and acknowledges it in the same script, so
//     neither a crash between reading and forwarding nor any retry can lose
//     or double a job.
//   - The rules of the stream consumer apply: the worker runs on the same
//     engine. Failed jobs are retried with backoff (through the delayed set)
//     or dead-lettered after MaxDeliveries or on a [streamq.Permanent]
//     error; an attempt is charged when a handler starts (a lease that
//     expires while its handler ran counts as one), a job whose runs were
//     cut short by crashes makes its last allowed attempt alone, so a job
//     that crashes its worker ends in the dead-letter stream instead of
//     killing workers forever, while its neighbours are not blamed; a pop
//     re-sent after a lost reply returns the jobs the first one leased;
//     panics are recovered into
//     [*streamq.PanicError]; JobTimeout cancels the handler's context with
//     [streamq.ErrJobTimeout]. Dead letters go to the queue's own
//     dead-letter stream, where [streamq.Queue.DeadLetters] lists, requeues
//     (into the stream, from where Forward brings them back at their
//     priority) and purges them.
//   - Shutdown: [Worker.Run] stops taking jobs at once when its context is
//     cancelled, also while it waits for work, lets running handlers finish
//     for ShutdownTimeout with a context detached from the cancel, then
//     cancels them with [streamq.ErrShutdown] and waits for every one to
//     return. A job whose handler returned because of the shutdown goes back
//     to the ready set at once without being charged an attempt; no job is
//     handed back while its handler may still run.
//   - Bounded: a worker never leases more jobs than it has free handler
//     slots, so no leased job waits in a local buffer.
//
// # Waiting for work
//
// An idle worker does not poll. Every script that makes jobs ready appends
// an entry to a small notify stream (capped at about 100 entries), and a pop
// that finds the set empty returns the newest entry's ID in the same atomic
// step; the worker then waits with XREAD BLOCK for an entry after that ID.
// A job pushed at any moment after the empty pop wakes it at once, and the
// pop itself stays reliable (unlike BZPOPMIN, which removes the job before
// the worker could lease it). WorkerConfig.Block only bounds a wait with no
// wake-up.
//
// # Redis keys
//
// All keys share the queue's hash tag, so every script runs on Redis
// Cluster:
//
//   - <prefix>:{<queue>}:priority: the ready set; members
//     "<seq>:<score>:<job ID>", score -priority (priority with LowerFirst).
//   - <prefix>:{<queue>}:leases: the lease set; members "<member>|<token>",
//     score the lease deadline in Unix milliseconds; the token is
//     "<worker name>:<run>.<pop>:<n>".
//   - <prefix>:{<queue>}:priority:delayed: jobs waiting for a retry; score
//     the due time in Unix milliseconds.
//   - <prefix>:{<queue>}:priority:jobs: a hash of job ID to the job's
//     fields (stream wire format version 1, as one MessagePack array).
//   - <prefix>:{<queue>}:priority:deliveries: a hash of job ID to the
//     number of its runs that were cut short since its last retry.
//   - <prefix>:{<queue>}:priority:waiting: leases whose job waits,
//     uncharged, to run alone; their expiry counts nothing.
//   - <prefix>:{<queue>}:priority:pop:<run>: a worker run's last pop, so a
//     re-sent pop returns the same jobs; it expires with the lease.
//   - <prefix>:{<queue>}:priority:seq: the sequence counter; never delete it
//     while jobs wait.
//   - <prefix>:{<queue>}:priority:notify: the wake-up stream.
//
// A job's data lives until it is finished or dead-lettered. Pushed jobs get
// their sequence number as ID; forwarded jobs keep their stream entry ID.
//
// # Limits
//
// A stream job enqueued with [streamq.Unique] holds its unique key only
// until it is forwarded: the stream consumer releases the key when Forward
// returns. Redis 6.2 or newer is needed (ZRANGE
// BYSCORE, ZMSCORE); streamq itself needs 7.0.
package priority
