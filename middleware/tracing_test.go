package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/middleware"
)

// tracingSetup returns a tracer provider recording into the returned
// recorder, and a TracingConfig using it with the W3C propagators.
func tracingSetup(t testing.TB) (*tracetest.SpanRecorder, *sdktrace.TracerProvider, *middleware.TracingConfig) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := &middleware.TracingConfig{
		TracerProvider: tp,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
	return sr, tp, cfg
}

// consumerSpans returns the ended spans of kind consumer, by message ID.
func consumerSpans(sr *tracetest.SpanRecorder) map[string]sdktrace.ReadOnlySpan {
	spans := make(map[string]sdktrace.ReadOnlySpan)
	for _, s := range sr.Ended() {
		if s.SpanKind() != trace.SpanKindConsumer {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "messaging.message.id" {
				spans[kv.Value.AsString()] = s
			}
		}
	}
	return spans
}

func attrMap(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// withBaggage returns ctx carrying the baggage member key=value.
func withBaggage(t testing.TB, ctx context.Context, key, value string) context.Context {
	t.Helper()
	member, err := baggage.NewMember(key, value)
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	return baggage.ContextWithBaggage(ctx, bag)
}

func TestTracing_EndToEnd(t *testing.T) {
	t.Parallel()
	q := setup(t)
	sr, tp, tcfg := tracingSetup(t)
	p := newProducer(t, q, middleware.ProducerHook(tcfg))

	ctx := withBaggage(t, context.Background(), "tenant", "acme")
	ctx, parent := tp.Tracer("test").Start(ctx, "enqueue", trace.WithSpanKind(trace.SpanKindProducer))
	okID := enqueue(t, ctx, p, "ok")
	failID := enqueue(t, ctx, p, "fail")
	parent.End()

	type seen struct {
		tenant string
		span   trace.SpanContext
	}
	seenc := make(chan seen, 2)
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		seenc <- seen{baggage.FromContext(ctx).Member("tenant").Value(), trace.SpanContextFromContext(ctx)}
		if string(msg.Payload) == "fail" {
			return streamq.Permanent(errors.New("boom"))
		}
		return nil
	})
	runConsumer(t, q, h, consumerConfig(middleware.Tracing(tcfg)))
	redistest.WaitFor(t, waitTimeout, "two consumer spans", func() bool { return len(consumerSpans(sr)) == 2 })

	spans := consumerSpans(sr)
	for i := range 2 {
		s := <-seenc
		if s.tenant != "acme" {
			t.Errorf("handler %d: baggage tenant = %q, want acme", i, s.tenant)
		}
		if s.span.TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("handler %d: context holds trace %s, want the producer's %s", i, s.span.TraceID(), parent.SpanContext().TraceID())
		}
	}
	for _, id := range []string{okID, failID} {
		s, ok := spans[id]
		if !ok {
			t.Fatalf("no consumer span for job %s", id)
		}
		if got, want := s.Name(), "process "+q.Name(); got != want {
			t.Errorf("span name = %q, want %q", got, want)
		}
		if s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span of %s is in trace %s, want the producer's %s", id, s.SpanContext().TraceID(), parent.SpanContext().TraceID())
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() || !s.Parent().IsRemote() {
			t.Errorf("span of %s has parent %v, want the producer span %s (remote)", id, s.Parent(), parent.SpanContext().SpanID())
		}
		if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span of %s has links %+v, want one link to the creation context %s", id, l, parent.SpanContext().SpanID())
		}
		attrs := attrMap(s.Attributes())
		want := map[attribute.Key]attribute.Value{
			"messaging.system":              attribute.StringValue("streamq"),
			"messaging.destination.name":    attribute.StringValue(q.Name()),
			"messaging.consumer.group.name": attribute.StringValue(q.Group()),
			"messaging.message.id":          attribute.StringValue(id),
			"messaging.operation.type":      attribute.StringValue("process"),
			"messaging.operation.name":      attribute.StringValue("process"),
			middleware.AttrAttempt:          attribute.IntValue(1),
		}
		for k, v := range want {
			if attrs[k] != v {
				t.Errorf("span of %s: %s = %v, want %v", id, k, attrs[k].String(), v.String())
			}
		}
	}

	if s := spans[okID]; s.Status().Code != codes.Unset || len(s.Events()) != 0 {
		t.Errorf("successful job: status %v, events %v; want unset status and no events", s.Status(), s.Events())
	}
	fs := spans[failID]
	if fs.Status().Code != codes.Error || fs.Status().Description != "permanent: boom" {
		t.Errorf("failed job: status %+v, want Error with the error text", fs.Status())
	}
	if ev := fs.Events(); len(ev) != 1 || ev[0].Name != "exception" ||
		attrMap(ev[0].Attributes)["exception.message"].AsString() != "permanent: boom" {
		t.Errorf("failed job: events %+v, want one exception event with the error", ev)
	}
	if got := attrMap(fs.Attributes())["error.type"].AsString(); got != "permanent" {
		t.Errorf("failed job: error.type = %q, want permanent", got)
	}
}

// run calls h with a message enqueued (headers only) inside ctx.
func runWithHeaders(ctx context.Context, hook streamq.EnqueueHook, h streamq.Handler) error {
	headers := map[string]string{}
	hook(ctx, headers)
	return h.Handle(context.Background(), &streamq.Message{ID: "1-0", Queue: "orders", Headers: headers, Payload: []byte("x")})
}

func TestTracing_NewRoot(t *testing.T) {
	t.Parallel()
	sr, tp, tcfg := tracingSetup(t)
	tcfg.NewRoot = true
	tcfg.Group = "billing"
	ctx, parent := tp.Tracer("test").Start(context.Background(), "enqueue")
	h := streamq.Chain(streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }), middleware.Tracing(tcfg))
	if err := runWithHeaders(ctx, middleware.ProducerHook(tcfg), h); err != nil {
		t.Fatal(err)
	}
	parent.End()
	s, ok := consumerSpans(sr)["1-0"]
	if !ok {
		t.Fatal("no consumer span")
	}
	if s.SpanContext().TraceID() == parent.SpanContext().TraceID() || s.Parent().IsValid() {
		t.Errorf("span is in the producer's trace (parent %v), want a new root", s.Parent())
	}
	if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("links = %+v, want one link to the producer span", l)
	}
	if got := attrMap(s.Attributes())["messaging.consumer.group.name"].AsString(); got != "billing" {
		t.Errorf("messaging.consumer.group.name = %q, want billing", got)
	}
}

func TestTracing_Postponed(t *testing.T) {
	t.Parallel()
	sr, _, tcfg := tracingSetup(t)
	h := streamq.Chain(streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		return streamq.Postpone(1500*time.Millisecond, errors.New("busy"))
	}), middleware.Tracing(tcfg))
	if err := h.Handle(context.Background(), &streamq.Message{ID: "1-0", Queue: "orders"}); err == nil {
		t.Fatal("the Postpone error was swallowed")
	}
	s, ok := consumerSpans(sr)["1-0"]
	if !ok {
		t.Fatal("no consumer span")
	}
	if s.Status().Code != codes.Unset {
		t.Errorf("status %+v, want Unset: a postponed job did not fail", s.Status())
	}
	if _, ok := attrMap(s.Attributes())["error.type"]; ok {
		t.Errorf("attributes %v, want no error.type", s.Attributes())
	}
	ev := s.Events()
	if len(ev) != 1 || ev[0].Name != middleware.SpanEventPostponed {
		t.Fatalf("events %+v, want one %s event", ev, middleware.SpanEventPostponed)
	}
	a := attrMap(ev[0].Attributes)
	if a[middleware.AttrPostponeDelay].AsFloat64() != 1.5 || a[middleware.AttrPostponeReason].AsString() != "busy" {
		t.Errorf("event attributes %v, want delay 1.5 and reason busy", ev[0].Attributes)
	}
}

func TestTracing_ConsumerGroup(t *testing.T) {
	t.Parallel()
	sr, _, tcfg := tracingSetup(t)
	q := setupQueue(t, &streamq.QueueConfig{Group: "billing"})
	id := enqueue(t, context.Background(), newProducer(t, q), "x")
	runConsumer(t, q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }),
		consumerConfig(middleware.Tracing(tcfg))) // TracingConfig.Group unset
	redistest.WaitFor(t, waitTimeout, "the consumer span", func() bool { _, ok := consumerSpans(sr)[id]; return ok })
	if got := attrMap(consumerSpans(sr)[id].Attributes())["messaging.consumer.group.name"].AsString(); got != "billing" {
		t.Errorf("messaging.consumer.group.name = %q, want the queue's group billing", got)
	}
}

func TestTracing_GroupFallback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		msgGroup string
		cfgGroup string
		want     string // "" means no attribute
	}{
		{"message group wins", "billing", "fallback", "billing"},
		{"config as fallback", "", "fallback", "fallback"},
		{"neither", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sr, _, tcfg := tracingSetup(t)
			tcfg.Group = tt.cfgGroup
			h := streamq.Chain(streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }), middleware.Tracing(tcfg))
			if err := h.Handle(context.Background(), &streamq.Message{ID: "1-0", Queue: "orders", Group: tt.msgGroup}); err != nil {
				t.Fatal(err)
			}
			got, ok := attrMap(consumerSpans(sr)["1-0"].Attributes())["messaging.consumer.group.name"]
			if tt.want == "" {
				if ok {
					t.Errorf("messaging.consumer.group.name = %q, want none", got.AsString())
				}
			} else if got.AsString() != tt.want {
				t.Errorf("messaging.consumer.group.name = %q, want %q", got.AsString(), tt.want)
			}
		})
	}
}

// attrSampler samples every span and remembers the attributes it was shown.
type attrSampler struct {
	mu   sync.Mutex
	seen []attribute.KeyValue
}

func (s *attrSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, p.Attributes...)
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}

func (s *attrSampler) Description() string { return "attrSampler" }

func TestTracing_NoStartAttributes(t *testing.T) {
	t.Parallel()
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoStartAttributes=%t", late), func(t *testing.T) {
			t.Parallel()
			sampler := &attrSampler{}
			sr := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(sr))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			h := streamq.Chain(streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }),
				middleware.Tracing(&middleware.TracingConfig{TracerProvider: tp, NoStartAttributes: late}))
			if err := h.Handle(context.Background(), &streamq.Message{ID: "1-0", Queue: "orders", Group: "billing", Attempt: 1}); err != nil {
				t.Fatal(err)
			}
			s, ok := consumerSpans(sr)["1-0"]
			if !ok {
				t.Fatal("no consumer span")
			}
			// The span has every attribute either way.
			attrs := attrMap(s.Attributes())
			for k, v := range map[attribute.Key]attribute.Value{
				"messaging.system":              attribute.StringValue("streamq"),
				"messaging.destination.name":    attribute.StringValue("orders"),
				"messaging.consumer.group.name": attribute.StringValue("billing"),
				"messaging.operation.type":      attribute.StringValue("process"),
				"messaging.operation.name":      attribute.StringValue("process"),
				"messaging.message.id":          attribute.StringValue("1-0"),
				middleware.AttrAttempt:          attribute.IntValue(1),
			} {
				if attrs[k] != v {
					t.Errorf("%s = %v, want %v", k, attrs[k].String(), v.String())
				}
			}
			if got := len(s.Attributes()); got != 7 {
				t.Errorf("%d attributes, want 7 (no duplicates): %v", got, s.Attributes())
			}
			// The sampler sees the queue's attributes only without the option.
			seen := attrMap(sampler.seen)
			if _, ok := seen["messaging.destination.name"]; ok == late {
				t.Errorf("sampler saw %v", sampler.seen)
			}
		})
	}
}

func TestTracing_Panic(t *testing.T) {
	t.Parallel()
	sr, tp, tcfg := tracingSetup(t)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "enqueue")
	defer parent.End()
	h := streamq.Chain(panicky("kaput"), middleware.Recover(), middleware.Tracing(tcfg))
	err := runWithHeaders(ctx, middleware.ProducerHook(tcfg), h)
	var pe *streamq.PanicError
	if !errors.As(err, &pe) || pe.Value != "kaput" {
		t.Fatalf("err = %v, want the PanicError from Recover", err)
	}
	s, ok := consumerSpans(sr)["1-0"]
	if !ok {
		t.Fatal("no consumer span: a panic must still end the span")
	}
	if s.Status().Code != codes.Error || attrMap(s.Attributes())["error.type"].AsString() != "panic" {
		t.Errorf("status %+v, attributes %v; want Error and error.type panic", s.Status(), s.Attributes())
	}
	if ev := s.Events(); len(ev) != 1 || attrMap(ev[0].Attributes)["exception.stacktrace"].AsString() == "" {
		t.Errorf("events %+v, want an exception with the stack", ev)
	}
}

func TestProducerHook_NoSpan(t *testing.T) {
	t.Parallel()
	_, _, tcfg := tracingSetup(t)
	headers := map[string]string{"user": "kept"}
	middleware.ProducerHook(tcfg)(context.Background(), headers)
	if len(headers) != 1 || headers["user"] != "kept" {
		t.Errorf("headers = %v: without a span or baggage nothing is added", headers)
	}
}

func TestProducerHook_KeepsCustomContext(t *testing.T) {
	t.Parallel()
	_, tp, tcfg := tracingSetup(t)
	_, own := tp.Tracer("test").Start(context.Background(), "created earlier")
	own.End()
	custom := map[string]string{}
	tcfg.Propagator.Inject(trace.ContextWithSpan(context.Background(), own), propagation.MapCarrier(custom))

	ctx, current := tp.Tracer("test").Start(context.Background(), "enqueue")
	defer current.End()
	headers := map[string]string{"traceparent": custom["traceparent"], "user": "x"}
	middleware.ProducerHook(tcfg)(ctx, headers)
	if headers["traceparent"] != custom["traceparent"] {
		t.Errorf("traceparent = %q, want the job's own %q", headers["traceparent"], custom["traceparent"])
	}
	// Headers without a trace context get the current one.
	plain := map[string]string{"user": "x"}
	middleware.ProducerHook(tcfg)(ctx, plain)
	want := map[string]string{}
	tcfg.Propagator.Inject(ctx, propagation.MapCarrier(want))
	if plain["traceparent"] != want["traceparent"] {
		t.Errorf("traceparent = %q, want the current span's %q", plain["traceparent"], want["traceparent"])
	}
}
