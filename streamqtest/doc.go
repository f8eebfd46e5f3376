// Package streamqtest helps test code that uses streamq: handlers, and code
// that enqueues jobs.
//
// Unit tests of a handler need no Redis. A [Worker] runs the handler the way
// a [streamq.Consumer] configured alike would, by the same engine, through
// the consumer's middleware, with its job timeout, panic recovery, backoff
// and outcome rules, and returns the verdict: acknowledged, retried after a
// delay, postponed, or dead-lettered with a reason.
//
//	w := streamqtest.NewWorker(t, handler, &streamq.ConsumerConfig{MaxDeliveries: 3})
//	res, err := w.Work(ctx, &streamqtest.Job{Payload: []byte(`{"id":42}`), Attempt: 3})
//	// if the handler failed: res.Outcome == streamqtest.DeadLettered,
//	// res.Reason == streamq.ReasonMaxDeliveries, res.Err is its error
//
// Integration tests get a real Redis with [NewRedis] or [NewQueue]: the
// server at REDIS_ADDR, else a private redis-server on a free loopback
// port (or the server binary that STREAMQ_REDIS_SERVER names, such as a
// valkey-server), found once per test binary (see [Main]). For a Docker fallback (a
// redis:7 container through testcontainers-go), call containers.Main from
// package [github.com/streamq/streamq/streamqtest/containers] in TestMain
// instead: this package alone links no Docker client. Each test gets a key prefix of its own, whose
// keys are deleted when it ends, so tests run in parallel on one server and
// none is ever flushed.
//
// [RequireEnqueued], [RequireEnqueuedN], [RequireNotEnqueued] and [Enqueued]
// check what code under test enqueued: payloads, headers, unique keys, due times of scheduled
// jobs. Their failure messages list the jobs found.
package streamqtest
