package middleware

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamq/streamq"
)

// ScopeName is the instrumentation scope name of the tracer and the meter
// this package uses.
const ScopeName = "github.com/streamq/streamq/middleware"

// DefaultMessagingSystem is the default value of the messaging.system
// attribute of spans and of the semantic-convention metrics. The
// OpenTelemetry semantic conventions register no value for Redis Streams or
// for job queues built on them, and messaging.system is an open enum, so
// streamq reports itself, as other job libraries on Redis report their own
// name rather than "redis": the messages' format, headers and delivery rules
// are streamq's, not Redis's, and "redis" already names the database in the
// spans of Redis client instrumentations (db.system.name). Set
// TracingConfig.System and MetricsConfig.System to change it (streamq before
// this version reported "redis").
const DefaultMessagingSystem = "streamq"

// streamq-specific span attributes, in the streamq namespace as the semantic
// conventions ask for attributes they do not define.
const (
	// AttrAttempt is the attempt number of the job, 1 on the first run
	// (see [streamq.Message.Attempt]).
	AttrAttempt = attribute.Key("streamq.job.attempt")
	// AttrPostponeDelay is the attribute of a [SpanEventPostponed] event:
	// the delay, in seconds, after which the job runs again.
	AttrPostponeDelay = attribute.Key("streamq.job.postpone.delay")
	// AttrPostponeReason is the attribute of a [SpanEventPostponed] event:
	// the reason given to [streamq.Postpone], if any.
	AttrPostponeReason = attribute.Key("streamq.job.postpone.reason")
)

// SpanEventPostponed is the name of the span event that [Tracing] adds when
// a job is postponed ([streamq.Postpone], for example by the rate limit)
// instead of failing; the span's status stays Unset.
const SpanEventPostponed = "streamq.job.postponed"

// TracingConfig configures [Tracing], [ProducerHook] and the send spans of
// [Producer] and [PriorityQueue]. The zero value is valid and uses the
// OpenTelemetry globals.
type TracingConfig struct {
	// TracerProvider creates the consumer ("process") and producer
	// ("send") spans. Defaults to
	// otel.GetTracerProvider() at the time Tracing is called (the global
	// provider delegates to one set later with otel.SetTracerProvider).
	TracerProvider trace.TracerProvider

	// Propagator injects the trace context into job headers (ProducerHook)
	// and extracts it (Tracing). Use the same one on both sides. Defaults to
	// otel.GetTextMapPropagator() at the time of the call; note that the
	// global propagator propagates nothing until otel.SetTextMapPropagator is
	// called, so either set it or pass one here, for example
	//
	//	propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	Propagator propagation.TextMapPropagator

	// System is the messaging.system attribute. Defaults to
	// DefaultMessagingSystem ("streamq").
	System string

	// Group is the messaging.consumer.group.name attribute of jobs whose
	// Message.Group is empty. The consumer sets Message.Group to the group
	// that delivered the job, which then takes precedence; Group is only a
	// fallback for runtimes that leave it empty. Defaults to "": such jobs'
	// spans have no messaging.consumer.group.name attribute.
	Group string

	// NoStartAttributes, if true, sets all the span's attributes only once
	// the sampler has decided, and only on spans that record. Samplers then
	// see none of them, against the semantic conventions' advice to give the
	// attributes that matter for sampling at the start; in exchange every
	// job costs less (one allocation of 320 bytes less for an unsampled
	// span, two for a sampled one; see docs/middleware.md, Cost). Use it when your
	// sampler ignores attributes, as ParentBased, TraceIDRatioBased,
	// AlwaysSample and NeverSample do. Defaults to false: the attributes that
	// are the same for every job of a queue are given at the start.
	NoStartAttributes bool

	// NewRoot, if true, starts every consumer span in a new trace, linked to
	// the job's creation context (the producer's span), instead of as that
	// span's child (and linked to it). Use it when a producer's trace would
	// otherwise grow without bound (one request enqueueing thousands of jobs)
	// or when producers are not trusted. Defaults to false (child spans).
	NewRoot bool
}

// ProducerHook returns a [streamq.EnqueueHook] for ProducerConfig.Hooks (or
// priority.QueueConfig.Hooks) that writes the trace context of the
// enqueueing call (its span and baggage, as far as the propagator carries
// them) into the job's headers, where [Tracing] finds it. With the W3C
// propagators the headers are "traceparent", "tracestate" and "baggage".
// cfg may be nil; only TracingConfig.Propagator is used.
//
// The hook carries whatever span is current in the enqueueing context, for
// example the HTTP request that enqueued the job. A job whose headers
// already hold a trace context (given by the caller with
// streamq.WithHeaders, or written by a [Producer]) keeps it: the semantic
// conventions ask not to change a creation context the user provided.
//
// For a PRODUCER span "send <queue>" per Enqueue call, as the messaging
// semantic conventions describe, enqueue through [Producer] or
// [PriorityQueue], which start that span and write its context into the
// headers themselves; the hook is then not needed (it would find their
// context and leave it).
func ProducerHook(cfg *TracingConfig) streamq.EnqueueHook {
	prop := propagatorOf(cfg)
	return func(ctx context.Context, headers map[string]string) {
		if len(headers) > 0 && hasSpanContext(prop, headers) {
			return // a creation context of the caller's, or of a Producer
		}
		prop.Inject(ctx, propagation.MapCarrier(headers))
	}
}

// hasSpanContext reports whether headers already hold a valid span context
// that prop can read.
func hasSpanContext(prop propagation.TextMapPropagator, headers map[string]string) bool {
	ctx := prop.Extract(context.Background(), propagation.MapCarrier(headers))
	return trace.SpanContextFromContext(ctx).IsValid()
}

func propagatorOf(cfg *TracingConfig) propagation.TextMapPropagator {
	if cfg != nil && cfg.Propagator != nil {
		return cfg.Propagator
	}
	return otel.GetTextMapPropagator()
}

// Tracing returns middleware that runs every job in a consumer span
// (SpanKindConsumer) named "process <queue>", as the OpenTelemetry messaging
// semantic conventions (1.27 and later) name the spans of push-based
// processing. When the job's headers hold a trace context (its creation
// context: the "send" span of a [Producer], or whatever span [ProducerHook]
// found), the span links to it, as the conventions ask of every "process"
// span, and is also its child, so that the job shows in the trace that
// enqueued it; with TracingConfig.NewRoot it starts a new trace and only
// links. Baggage from the headers is in the handler's context. cfg may be
// nil.
//
// Attributes follow the conventions: messaging.system,
// messaging.destination.name (the queue), messaging.consumer.group.name
// (Message.Group, or TracingConfig.Group when that is empty),
// messaging.operation.type and messaging.operation.name ("process") are set
// at the start, where samplers see them (unless
// TracingConfig.NoStartAttributes); messaging.message.id (the stream entry
// ID) and [AttrAttempt] are added only when the span is recording, so
// unsampled jobs cost less.
//
// A failed job's span records the error as an exception event, has status
// Error and the attribute error.type; a panic passing through is recorded
// with its stack and continues upwards. A postponed job ([streamq.Postpone],
// for example by [RateLimiter.Middleware]) did not fail: its span gets a
// [SpanEventPostponed] event and keeps status Unset.
func Tracing(cfg *TracingConfig) streamq.Middleware {
	var c TracingConfig
	if cfg != nil {
		c = *cfg
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	c.Propagator = propagatorOf(&c)
	if c.System == "" {
		c.System = DefaultMessagingSystem
	}
	t := &tracing{
		tracer: c.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   c.Propagator,
		system: semconv.MessagingSystemKey.String(c.System),
		group:  c.Group,
		late:   c.NoStartAttributes,
		root:   c.NewRoot,
	}
	return func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) (err error) {
			ctx, span := t.start(ctx, msg)
			defer func() {
				if r := recover(); r != nil {
					if span.IsRecording() {
						pe := &streamq.PanicError{Value: r, Stack: debug.Stack()}
						span.RecordError(pe, trace.WithAttributes(semconv.ExceptionStacktrace(string(pe.Stack))))
						span.SetStatus(codes.Error, pe.Error())
						span.SetAttributes(semconv.ErrorTypeKey.String(classPanic.String()))
					}
					span.End()
					panic(r)
				}
			}()
			err = next.Handle(ctx, msg)
			if err != nil && span.IsRecording() {
				// Only for recording spans: the error text and its class
				// are wasted on a span that is not sampled.
				recordFailure(ctx, span, err)
			}
			span.End()
			return err
		})
	}
}

// recordFailure records on span the error err that the handler returned:
// as an exception with status Error, or as a postponement.
func recordFailure(ctx context.Context, span trace.Span, err error) {
	if pe, ok := postponement(ctx, err); ok {
		attrs := make([]attribute.KeyValue, 0, 2)
		attrs = append(attrs, AttrPostponeDelay.Float64(pe.Delay.Seconds()))
		if pe.Err != nil {
			attrs = append(attrs, AttrPostponeReason.String(pe.Err.Error()))
		}
		span.AddEvent(SpanEventPostponed, trace.WithAttributes(attrs...))
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(semconv.ErrorTypeKey.String(classify(ctx, err).String()))
}

// maxCachedQueues bounds the cache of span names and start options per queue
// and group; further pairs get theirs built per job.
const maxCachedQueues = 1024

type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	system attribute.KeyValue
	group  string // fallback for messages without Message.Group
	late   bool   // NoStartAttributes
	root   bool

	queues sync.Map     // spanKey -> *queueSpan; lock-free reads
	cached atomic.Int32 // entries in queues, to bound it

	// last is the queueSpan of the job started last: a consumer runs jobs
	// of one queue and group, so this spares most jobs hashing both names
	// for the lookup in queues.
	last atomic.Pointer[queueSpan]
}

// spanKey identifies the spans that share a name and start options.
type spanKey struct{ queue, group string }

// queueSpan holds what every span of one queue and group shares, built once
// so that starting a span allocates nothing on this package's side.
type queueSpan struct {
	key   spanKey
	name  string                  // "process <queue>"
	opts  []trace.SpanStartOption // kind, and attrs unless NoStartAttributes
	attrs []attribute.KeyValue    // the attributes known before the job
}

func (t *tracing) queueSpan(queue, group string) *queueSpan {
	if qs := t.last.Load(); qs != nil && qs.key.queue == queue && qs.key.group == group {
		return qs
	}
	qs := t.loadQueueSpan(queue, group)
	t.last.Store(qs)
	return qs
}

func (t *tracing) loadQueueSpan(queue, group string) *queueSpan {
	k := spanKey{queue, group}
	if qs, ok := t.queues.Load(k); ok {
		return qs.(*queueSpan)
	}
	// The attributes a sampler may use: the same for every job of the queue
	// and group. Per-job attributes follow once the span records.
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, t.system, semconv.MessagingDestinationName(queue))
	if group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(group))
	}
	attrs = append(attrs, semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"))
	qs := &queueSpan{
		key:   k,
		name:  "process " + queue,
		opts:  []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)},
		attrs: attrs,
	}
	if !t.late {
		qs.opts = append(qs.opts, trace.WithAttributes(attrs...))
	}
	if t.root {
		qs.opts = append(qs.opts, trace.WithNewRoot())
	}
	if t.cached.Load() < maxCachedQueues {
		if v, loaded := t.queues.LoadOrStore(k, qs); loaded {
			return v.(*queueSpan)
		}
		t.cached.Add(1)
	}
	return qs
}

func (t *tracing) start(ctx context.Context, msg *streamq.Message) (context.Context, trace.Span) {
	// The creation context is the one extracted from the headers (remote),
	// not a span the runtime's context may hold. Without headers there is
	// none, and the context is not searched for one.
	var link trace.Link
	if len(msg.Headers) > 0 {
		ctx = t.prop.Extract(ctx, propagation.MapCarrier(msg.Headers))
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsRemote() {
			link.SpanContext = sc
		}
	}
	group := msg.Group
	if group == "" {
		group = t.group
	}
	qs := t.queueSpan(msg.Queue, group)
	opts := qs.opts
	if t.root && link.SpanContext.IsValid() {
		// A new root: the link is all samplers can go by, so it is given
		// at the start.
		opts = append(opts[:len(opts):len(opts)], trace.WithLinks(link))
	}
	ctx, span := t.tracer.Start(ctx, qs.name, opts...)
	if !span.IsRecording() {
		return ctx, span
	}
	if !t.root && link.SpanContext.IsValid() {
		// A child of the creation context: samplers see it as the parent,
		// so the link is only added to spans that record, which spares
		// unsampled jobs its cost.
		span.AddLink(link)
	}
	if t.late {
		// One call with every attribute: the span grows its slice once.
		attrs := make([]attribute.KeyValue, 0, len(qs.attrs)+2)
		attrs = append(attrs, qs.attrs...)
		attrs = append(attrs,
			semconv.MessagingMessageID(msg.ID),
			AttrAttempt.Int(msg.Attempt),
		)
		span.SetAttributes(attrs...)
		return ctx, span
	}
	span.SetAttributes(
		semconv.MessagingMessageID(msg.ID),
		AttrAttempt.Int(msg.Attempt),
	)
	return ctx, span
}
