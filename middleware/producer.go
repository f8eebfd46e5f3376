package middleware

import (
	"context"
	"maps"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/priority"
)

// SendConfig configures [NewProducer] and [NewPriorityQueue]. The zero value
// is valid: send spans with the OpenTelemetry globals, no metrics.
type SendConfig struct {
	// Tracing configures the send spans: TracerProvider, Propagator and
	// System are used. Use the same TracingConfig as the consumers' Tracing.
	// Defaults to nil (the TracingConfig zero value: the globals).
	Tracing *TracingConfig

	// NoTracing, if true, starts no send span and writes no trace context
	// into the jobs' headers. Defaults to false.
	NoTracing bool

	// Metrics, if set, records MetricSentMessages and
	// MetricOperationDuration for every call. Defaults to nil (no metrics).
	Metrics *Metrics
}

// sender runs one send (Enqueue, EnqueueBatch, Push, PushBatch) of a queue
// in a PRODUCER span and records its metrics. Everything that is the same
// for every call of the queue is built once, at construction.
type sender struct {
	queue   string
	tracer  trace.Tracer // nil: NoTracing
	prop    propagation.TextMapPropagator
	name    string                  // "send <queue>"
	opts    []trace.SpanStartOption // kind and the queue's attributes
	metrics *Metrics
}

func newSender(queue string, cfg *SendConfig) *sender {
	var c SendConfig
	if cfg != nil {
		c = *cfg
	}
	s := &sender{queue: queue, metrics: c.Metrics}
	if c.NoTracing {
		return s
	}
	var tc TracingConfig
	if c.Tracing != nil {
		tc = *c.Tracing
	}
	if tc.TracerProvider == nil {
		tc.TracerProvider = otel.GetTracerProvider()
	}
	if tc.System == "" {
		tc.System = DefaultMessagingSystem
	}
	s.tracer = tc.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))
	s.prop = propagatorOf(&tc)
	s.name = "send " + queue
	s.opts = []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String(tc.System),
			semconv.MessagingDestinationName(queue),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("send"),
		),
	}
	return s
}

// send runs do, which enqueues n jobs (batch: through a batch API), in a
// send span. do gets the context holding the span and the trace headers to
// give every job (nil without tracing, or when the propagator writes
// nothing).
func (s *sender) send(ctx context.Context, n int, batch bool,
	do func(ctx context.Context, headers map[string]string) ([]string, error)) ([]string, error) {
	start := time.Now()
	var span trace.Span
	var headers map[string]string
	if s.tracer != nil {
		opts := s.opts
		if batch {
			opts = append(opts[:len(opts):len(opts)], trace.WithAttributes(semconv.MessagingBatchMessageCount(n)))
		}
		ctx, span = s.tracer.Start(ctx, s.name, opts...)
		headers = make(map[string]string, 2)
		s.prop.Inject(ctx, propagation.MapCarrier(headers))
		if len(headers) == 0 {
			headers = nil
		}
	}
	ids, err := do(ctx, headers)
	if s.metrics != nil {
		s.metrics.recordSend(ctx, s.queue, n, ids, err, time.Since(start))
	}
	if span == nil {
		return ids, err
	}
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 2)
		if !batch && err == nil && len(ids) == 1 {
			attrs = append(attrs, semconv.MessagingMessageID(ids[0]))
		}
		if err != nil {
			attrs = append(attrs, semconv.ErrorTypeKey.String(sendClass(err)))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.SetAttributes(attrs...)
	}
	span.End()
	return ids, err
}

// Producer enqueues jobs through a [streamq.Producer] as the OpenTelemetry
// messaging semantic conventions describe a producer: every Enqueue or
// EnqueueBatch call runs in a PRODUCER span named "send <queue>" (one span
// per call, with messaging.batch.message_count for EnqueueBatch and
// messaging.message.id for Enqueue), and the span's context is written into
// every job's headers, where the consumer's [Tracing] finds it: the
// consumer's "process <queue>" span links to it and is its child. With
// SendConfig.Metrics, each call is counted in MetricSentMessages and timed
// in MetricOperationDuration.
//
// A job's own trace headers, given with streamq.WithHeaders or in Job.Headers
// (a creation context of the caller's choosing), are kept; the send span's
// context fills in only the headers a job does not have. Jobs enqueued
// directly on the streamq.Producer, by a periodic schedule or by write-behind
// get no send span (their trace context comes from the producer's hooks, for
// example [ProducerHook]).
//
// A Producer is safe for concurrent use.
type Producer struct {
	p *streamq.Producer
	s *sender
}

// NewProducer returns a Producer that enqueues through p. cfg may be nil.
func NewProducer(p *streamq.Producer, cfg *SendConfig) (*Producer, error) {
	if p == nil {
		return nil, &streamq.ConfigError{Field: "producer", Reason: "p is nil: create one with streamq.NewProducer"}
	}
	return &Producer{p: p, s: newSender(p.Queue().Name(), cfg)}, nil
}

// Unwrap returns the streamq.Producer that p enqueues through.
func (p *Producer) Unwrap() *streamq.Producer { return p.p }

// Enqueue is [streamq.Producer.Enqueue] in a send span.
func (p *Producer) Enqueue(ctx context.Context, payload []byte, opts ...streamq.EnqueueOption) (string, error) {
	ids, err := p.s.send(ctx, 1, false, func(ctx context.Context, h map[string]string) ([]string, error) {
		id, err := p.p.Enqueue(ctx, payload, withTraceHeaders(opts, h)...)
		return []string{id}, err
	})
	return ids[0], err
}

// EnqueueBatch is [streamq.Producer.EnqueueBatch] in one send span for the
// whole batch.
func (p *Producer) EnqueueBatch(ctx context.Context, jobs []streamq.Job, opts ...streamq.EnqueueOption) ([]string, error) {
	return p.s.send(ctx, len(jobs), true, func(ctx context.Context, h map[string]string) ([]string, error) {
		return p.p.EnqueueBatch(ctx, jobs, withTraceHeaders(opts, h)...)
	})
}

// withTraceHeaders returns opts with the trace headers h added first, so that
// the caller's own headers (later options, and each job's Headers) win.
func withTraceHeaders(opts []streamq.EnqueueOption, h map[string]string) []streamq.EnqueueOption {
	if len(h) == 0 {
		return opts
	}
	out := make([]streamq.EnqueueOption, 0, len(opts)+1)
	out = append(out, streamq.WithHeaders(h))
	return append(out, opts...)
}

// PriorityQueue pushes jobs into a [priority.Queue] as [Producer] enqueues
// them: every Push or PushBatch call runs in a PRODUCER span "send <queue>"
// (the stream queue's name, which the priority worker reports as the
// destination of its "process" spans too), whose context every job carries
// in its headers, and is counted with SendConfig.Metrics.
//
// A PriorityQueue is safe for concurrent use.
type PriorityQueue struct {
	pq *priority.Queue
	s  *sender
}

// NewPriorityQueue returns a PriorityQueue that pushes into pq. cfg may be
// nil.
func NewPriorityQueue(pq *priority.Queue, cfg *SendConfig) (*PriorityQueue, error) {
	if pq == nil {
		return nil, &streamq.ConfigError{Field: "priority queue", Reason: "pq is nil: create one with priority.NewQueue"}
	}
	return &PriorityQueue{pq: pq, s: newSender(pq.Queue().Name(), cfg)}, nil
}

// Unwrap returns the priority.Queue that q pushes into.
func (q *PriorityQueue) Unwrap() *priority.Queue { return q.pq }

// Push is [priority.Queue.Push] in a send span.
func (q *PriorityQueue) Push(ctx context.Context, job priority.Job) (string, error) {
	ids, err := q.s.send(ctx, 1, false, func(ctx context.Context, h map[string]string) ([]string, error) {
		job.Headers = mergeTraceHeaders(job.Headers, h)
		id, err := q.pq.Push(ctx, job)
		return []string{id}, err
	})
	return ids[0], err
}

// PushBatch is [priority.Queue.PushBatch] in one send span for the whole
// batch.
func (q *PriorityQueue) PushBatch(ctx context.Context, jobs []priority.Job) ([]string, error) {
	return q.s.send(ctx, len(jobs), true, func(ctx context.Context, h map[string]string) ([]string, error) {
		if len(h) > 0 {
			jobs = append([]priority.Job(nil), jobs...) // never change the caller's jobs
			for i := range jobs {
				jobs[i].Headers = mergeTraceHeaders(jobs[i].Headers, h)
			}
		}
		return q.pq.PushBatch(ctx, jobs)
	})
}

// mergeTraceHeaders returns a copy of own with the trace headers h added
// where own has no header of that name, or own itself when h is empty.
func mergeTraceHeaders(own, h map[string]string) map[string]string {
	if len(h) == 0 {
		return own
	}
	out := make(map[string]string, len(own)+len(h))
	maps.Copy(out, h)
	maps.Copy(out, own)
	return out
}
