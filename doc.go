// Package streamq runs durable background jobs on Redis Streams.
//
// A [Queue] names one Redis stream with its consumer group, dead-letter stream
// and delayed set; all of its keys share one Redis Cluster hash tag. A
// [Producer] enqueues jobs ([Producer.Enqueue], [Producer.EnqueueBatch]),
// optionally delayed ([ProcessAt], [ProcessIn]) or unique ([Unique]). A
// [Consumer] runs a [Handler] for every job with a bounded pool of goroutines
// ([Consumer.Run]).
//
// # Guarantees
//
// Delivery is at least once, and nothing is lost: a job whose Enqueue returned
// nil is handled to completion at least once or ends in the dead-letter stream
// with the reason ([DeadLetters]).
//
//   - A worker that crashes (even SIGKILL) leaves its jobs pending; any other
//     consumer's reaper takes them over after ConsumerConfig.MinIdle
//     (XAUTOCLAIM). Running jobs keep their claim fresh, so a healthy worker's
//     long job is not taken over.
//   - A failed job is retried with backoff by moving it to the delayed set in
//     one script; after MaxDeliveries attempts, or on a [Permanent] error, it
//     is moved to the dead-letter stream in one script.
//   - A panicking handler counts as a failed attempt ([PanicError]).
//   - An entry that does not follow the wire format is dead-lettered with
//     reason [ReasonMalformed]; the consumer keeps going.
//   - The stream cap (QueueConfig.MaxLen) only trims acknowledged history;
//     when it would have to delete unacknowledged jobs, Enqueue returns
//     [ErrQueueFull] instead.
//   - On shutdown, running handlers get ShutdownTimeout to finish; jobs that
//     did not finish stay pending. A job is never handed to another worker
//     while its handler may still be running here.
//
// Duplicates are possible (at least once): a job whose handler finished but
// whose acknowledgement was lost in a crash runs again. Make handlers
// idempotent.
//
// # Testing
//
// Package [github.com/streamq/streamq/streamqtest] runs a handler through a
// consumer's own rules without Redis and returns the verdict (acknowledged,
// retried after a delay, postponed, dead-lettered with the reason), gives
// integration tests a Redis with a key prefix of their own, and checks what
// code under test enqueued.
//
// # Redis
//
// Every function takes a [github.com/redis/go-redis/v9.UniversalClient], so a
// standalone server, Sentinel and Cluster all work. The caller owns the client.
// Redis 7.0 or newer is required (XAUTOCLAIM with deleted-entry reporting).
// Run it with maxmemory-policy noeviction: consumers and workers warn at
// start when it evicts keys, and keep draining while it is at maxmemory.
package streamq
