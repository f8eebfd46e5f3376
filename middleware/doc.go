// Package middleware holds [streamq.Middleware] for consumers: panic recovery
// ([Recover]), per-job timeouts ([Timeout]), structured logging with log/slog
// ([Logging]), OpenTelemetry tracing ([Tracing] with [ProducerHook]) and
// metrics ([NewMetrics]), and a rate limit shared by every worker of a queue
// ([NewRateLimiter]).
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
// The producer injects the current trace context into the job's headers with
// [ProducerHook] (a [streamq.EnqueueHook] for ProducerConfig.Hooks); the
// consumer's [Tracing] middleware extracts it and starts a consumer span that
// is a child of the producer's span, so the job appears in the trace that
// enqueued it, even when it runs minutes later on another machine. Both sides
// must use the same propagator; see [TracingConfig.Propagator].
//
// # Metrics
//
// [Metrics] records, with the OpenTelemetry metrics API, the instruments
// listed in its documentation. Every measurement carries the queue name as
// the attribute messaging.destination.name. Export them with any
// OpenTelemetry exporter, including Prometheus (see the README).
package middleware
