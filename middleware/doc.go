// Package middleware holds [streamq.Middleware] for consumers: panic recovery
// ([Recover]), per-job timeouts ([Timeout]), structured logging with log/slog
// ([Logging]), OpenTelemetry tracing ([Tracing], with [NewProducer] or
// [ProducerHook] on the producing side) and metrics ([NewMetrics]), and a
// rate limit shared by every worker of a queue ([NewRateLimiter]).
//
// The root package streamq depends only on the standard library, go-redis and
// x/sync; everything that needs OpenTelemetry lives here.
//
// # Chain order
//
// [streamq.Chain] and ConsumerConfig.Middleware run the first middleware
// outermost. The recommended order, which [Default] builds, is
//
//	Recover, Tracing, Metrics, Logging, RateLimit, Timeout
//
// for these reasons:
//
//   - Recover is outermost so that a panic anywhere in the chain becomes a
//     [*streamq.PanicError]. Tracing, Metrics and Logging see a panic that
//     passes through them: they record it as a failure and let it continue
//     to Recover, so they work in any order.
//   - Tracing comes before Metrics and Logging so that their context holds the
//     job's span: log records carry trace_id and span_id, and metric exemplars
//     point at the trace.
//   - Metrics and Logging measure the whole job, including the time it waited
//     for the rate limit.
//   - RateLimit comes before Timeout so that the time a job waits for a token
//     does not eat into its own timeout (the consumer's JobTimeout still
//     bounds both, and the rate limit never waits past it).
//
// The consumer itself recovers panics, applies ConsumerConfig.JobTimeout and
// logs retries and dead letters, so Recover and Timeout are mostly useful
// with other runtimes, or for a timeout shorter than JobTimeout on some
// handlers. Events that handler middleware cannot see (retries,
// postponements, dead letters, reclaims) reach [Metrics.OnEvent] through
// ConsumerConfig.OnEvent.
//
// The middleware depends only on [streamq.Handler] and [streamq.Message], so
// the same []streamq.Middleware works with any runtime that takes
// streamq.Middleware, such as a worker of the priority package, not only
// with [streamq.Consumer]. A runtime that leaves Message.Group empty gets the
// consumer group attribute from [TracingConfig.Group]; one that runs
// [RateLimiter.Middleware] must understand [streamq.Postpone] (the stream
// consumer and the priority worker do).
//
// # Tracing
//
// The spans follow the OpenTelemetry messaging semantic conventions (semconv
// 1.27 and later). A [Producer] (or [PriorityQueue]) wraps a streamq.Producer
// (or priority.Queue) and runs every Enqueue, EnqueueBatch, Push or PushBatch
// call in a PRODUCER span named "send <queue>", and writes that span's
// context into the headers of every job of the call: the span is the jobs'
// creation context. The consumer's [Tracing] middleware extracts it and runs
// each job in a CONSUMER span named "process <queue>" that links to it, as
// the conventions ask of every "process" span, and is also its child (a new
// root with only the link with [TracingConfig.NewRoot]), so that the job
// appears in the trace that enqueued it, even when it runs minutes later on
// another machine. Both sides must use the same propagator; see
// [TracingConfig.Propagator].
//
// [ProducerHook], a [streamq.EnqueueHook] for ProducerConfig.Hooks, writes
// the trace context current at the enqueue (for example an HTTP request's
// span) without a send span, for jobs that do not go through a [Producer]:
// periodic schedules, write-behind, or code that calls the streamq.Producer
// directly.
//
// messaging.system is "streamq" ([DefaultMessagingSystem]): the conventions
// register no value for Redis Streams, and streamq's messages are its own
// format on top of Redis.
//
// # Metrics
//
// [Metrics] records, with the OpenTelemetry metrics API, the streamq
// instruments listed in its documentation (streamq.jobs.processed and the
// others), where every measurement carries the queue name as the attribute
// messaging.destination.name, and beside them the instruments of the
// messaging semantic conventions: messaging.process.duration and
// messaging.client.consumed.messages from [Metrics.Middleware],
// messaging.client.sent.messages and messaging.client.operation.duration from
// a [Producer] or [PriorityQueue] given the Metrics in [SendConfig]. Export
// them with any OpenTelemetry exporter, including Prometheus (see docs/middleware.md).
package middleware
