package middleware

import (
	"context"
	"runtime/debug"
	"sync"

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

// DefaultMessagingSystem is the default value of the messaging.system span
// attribute. The OpenTelemetry semantic conventions list no value for Redis
// Streams (their list covers brokers such as kafka and rabbitmq), so streamq
// reports the server it runs on, "redis"; set TracingConfig.System to change it.
const DefaultMessagingSystem = "redis"

// streamq-specific span attributes, in the streamq namespace as the semantic
// conventions ask for attributes they do not define.
const (
	// AttrAttempt is the attempt number of the job, 1 on the first run
	// (see [streamq.Message.Attempts]).
	AttrAttempt = attribute.Key("streamq.job.attempt")
	// AttrDeliveries is Redis's delivery counter of the stream entry (above 1
	// when the job was taken over from a crashed worker).
	AttrDeliveries = attribute.Key("streamq.message.delivery_count")
)

// TracingConfig configures [Tracing] and [ProducerHook]. The zero value is
// valid and uses the OpenTelemetry globals.
type TracingConfig struct {
	// TracerProvider creates the consumer spans. Defaults to
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
	// DefaultMessagingSystem ("redis").
	System string

	// Group is the messaging.consumer.group.name attribute: the consumer
	// group of the queue (QueueConfig.Group). Defaults to
	// streamq.DefaultGroup; set it when the queue uses another group.
	Group string

	// NewRoot, if true, starts every consumer span in a new trace with a link
	// to the producer's span, instead of as the producer span's child. Use it
	// when a producer's trace would otherwise grow without bound (one request
	// enqueueing thousands of jobs) or when producers are not trusted.
	// Defaults to false (child spans).
	NewRoot bool
}

// ProducerHook returns a [streamq.EnqueueHook] for ProducerConfig.Hooks that
// writes the trace context of the enqueueing call (its span and baggage, as
// far as the propagator carries them) into the job's headers, where
// [Tracing] finds it. With the W3C propagators the headers are
// "traceparent", "tracestate" and "baggage". cfg may be nil; only
// TracingConfig.Propagator is used.
func ProducerHook(cfg *TracingConfig) streamq.EnqueueHook {
	prop := propagatorOf(cfg)
	return func(ctx context.Context, headers map[string]string) {
		prop.Inject(ctx, propagation.MapCarrier(headers))
	}
}

func propagatorOf(cfg *TracingConfig) propagation.TextMapPropagator {
	if cfg != nil && cfg.Propagator != nil {
		return cfg.Propagator
	}
	return otel.GetTextMapPropagator()
}

// Tracing returns middleware that runs every job in a consumer span
// (SpanKindConsumer) named "<queue> process". The span is a child of the
// trace context found in the job's headers (see [ProducerHook]), or a new
// root linked to it with TracingConfig.NewRoot; baggage from the headers is
// in the handler's context. cfg may be nil.
//
// Attributes follow the OpenTelemetry messaging semantic conventions:
// messaging.system, messaging.destination.name (the queue),
// messaging.consumer.group.name, messaging.operation.type and
// messaging.operation.name ("process") are set at the start, where samplers
// see them; messaging.message.id (the stream entry ID), [AttrAttempt] and
// [AttrDeliveries] are added when the span is recording (so unsampled jobs
// cost less). A failed job's span records the error as an exception event,
// has status Error and the attribute error.type; a panic passing through is
// recorded with its stack and continues upwards.
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
	if c.Group == "" {
		c.Group = streamq.DefaultGroup
	}
	t := &tracing{
		tracer: c.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   c.Propagator,
		system: semconv.MessagingSystemKey.String(c.System),
		group:  semconv.MessagingConsumerGroupName(c.Group),
		root:   c.NewRoot,
		queues: make(map[string]*queueSpan),
	}
	return func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) (err error) {
			ctx, span := t.start(ctx, msg)
			defer func() {
				if r := recover(); r != nil {
					pe := &streamq.PanicError{Value: r, Stack: debug.Stack()}
					span.RecordError(pe, trace.WithAttributes(semconv.ExceptionStacktrace(string(pe.Stack))))
					span.SetStatus(codes.Error, pe.Error())
					span.SetAttributes(semconv.ErrorTypeKey.String(classPanic.String()))
					span.End()
					panic(r)
				}
			}()
			err = next.Handle(ctx, msg)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				span.SetAttributes(semconv.ErrorTypeKey.String(classify(ctx, err).String()))
			}
			span.End()
			return err
		})
	}
}

// maxCachedQueues bounds the per-queue cache of span names and start
// options; further queues get theirs built per job.
const maxCachedQueues = 1024

type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	system attribute.KeyValue
	group  attribute.KeyValue
	root   bool

	mu     sync.RWMutex
	queues map[string]*queueSpan
}

// queueSpan holds what every span of one queue shares, built once so that
// starting a span allocates nothing on this package's side.
type queueSpan struct {
	name string                  // "<queue> process"
	opts []trace.SpanStartOption // kind and the attributes known before the job
}

func (t *tracing) queueSpan(queue string) *queueSpan {
	t.mu.RLock()
	qs, ok := t.queues[queue]
	t.mu.RUnlock()
	if ok {
		return qs
	}
	qs = &queueSpan{
		name: queue + " process",
		opts: []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindConsumer),
			// The attributes a sampler may use: the same for every job of
			// the queue. Per-job attributes follow once the span records.
			trace.WithAttributes(
				t.system,
				semconv.MessagingDestinationName(queue),
				t.group,
				semconv.MessagingOperationTypeProcess,
				semconv.MessagingOperationName("process"),
			),
		},
	}
	t.mu.Lock()
	if len(t.queues) < maxCachedQueues {
		t.queues[queue] = qs
	}
	t.mu.Unlock()
	return qs
}

func (t *tracing) start(ctx context.Context, msg *streamq.Message) (context.Context, trace.Span) {
	if len(msg.Headers) > 0 {
		ctx = t.prop.Extract(ctx, propagation.MapCarrier(msg.Headers))
	}
	qs := t.queueSpan(msg.Queue)
	opts := qs.opts
	if t.root {
		opts = append(opts[:len(opts):len(opts)], trace.WithNewRoot())
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, span := t.tracer.Start(ctx, qs.name, opts...)
	if span.IsRecording() {
		span.SetAttributes(
			semconv.MessagingMessageID(msg.ID),
			AttrAttempt.Int(msg.Attempts()),
			AttrDeliveries.Int(msg.Deliveries),
		)
	}
	return ctx, span
}
