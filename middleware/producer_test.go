package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/middleware"
	"github.com/streamq/streamq/priority"
)

// spansOf returns the ended spans of kind k.
func spansOf(sr *tracetest.SpanRecorder, k trace.SpanKind) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.SpanKind() == k {
			out = append(out, s)
		}
	}
	return out
}

// checkAttrs reports the attributes of s that differ from want.
func checkAttrs(t testing.TB, s sdktrace.ReadOnlySpan, want map[attribute.Key]attribute.Value) {
	t.Helper()
	attrs := attrMap(s.Attributes())
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("span %q: %s = %s, want %s", s.Name(), k, attrs[k].String(), v.String())
		}
	}
}

// checkProcessLinks checks that the process span of every job in ids links
// to, and is the child of, the send span send.
func checkProcessLinks(t testing.TB, sr *tracetest.SpanRecorder, queue string, send sdktrace.ReadOnlySpan, ids ...string) {
	t.Helper()
	spans := consumerSpans(sr)
	for _, id := range ids {
		s, ok := spans[id]
		if !ok {
			t.Errorf("no process span for job %s", id)
			continue
		}
		if s.Name() != "process "+queue {
			t.Errorf("process span name = %q, want %q", s.Name(), "process "+queue)
		}
		if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != send.SpanContext().SpanID() ||
			l[0].SpanContext.TraceID() != send.SpanContext().TraceID() {
			t.Errorf("process span of %s: links %+v, want one link to the send span %s", id, l, send.SpanContext().SpanID())
		}
		if s.Parent().SpanID() != send.SpanContext().SpanID() {
			t.Errorf("process span of %s: parent %s, want the send span %s", id, s.Parent().SpanID(), send.SpanContext().SpanID())
		}
	}
}

func TestProducer_SendSpans(t *testing.T) {
	t.Parallel()
	q := setup(t)
	sr, tp, tcfg := tracingSetup(t)
	p, err := middleware.NewProducer(newProducer(t, q), &middleware.SendConfig{Tracing: tcfg})
	if err != nil {
		t.Fatal(err)
	}

	ctx, request := tp.Tracer("test").Start(context.Background(), "POST /orders")
	oneID, err := p.Enqueue(ctx, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	batchIDs, err := p.EnqueueBatch(ctx, []streamq.Job{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")}})
	if err != nil {
		t.Fatal(err)
	}
	request.End()

	sends := spansOf(sr, trace.SpanKindProducer)
	if len(sends) != 2 {
		t.Fatalf("%d producer spans, want 2 (one per call)", len(sends))
	}
	one, batch := sends[0], sends[1]
	common := map[attribute.Key]attribute.Value{
		"messaging.system":           attribute.StringValue("streamq"),
		"messaging.destination.name": attribute.StringValue(q.Name()),
		"messaging.operation.type":   attribute.StringValue("send"),
		"messaging.operation.name":   attribute.StringValue("send"),
	}
	for _, s := range sends {
		if s.Name() != "send "+q.Name() {
			t.Errorf("producer span name = %q, want %q", s.Name(), "send "+q.Name())
		}
		checkAttrs(t, s, common)
		if s.Parent().SpanID() != request.SpanContext().SpanID() {
			t.Errorf("span %q: parent %s, want the request span", s.Name(), s.Parent().SpanID())
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("span %q: status %+v, want Unset", s.Name(), s.Status())
		}
	}
	// The single-message API has the message ID and no batch count; the
	// batch API the reverse.
	checkAttrs(t, one, map[attribute.Key]attribute.Value{"messaging.message.id": attribute.StringValue(oneID)})
	checkAttrs(t, batch, map[attribute.Key]attribute.Value{"messaging.batch.message_count": attribute.IntValue(3)})
	if _, ok := attrMap(one.Attributes())["messaging.batch.message_count"]; ok {
		t.Error("Enqueue span has messaging.batch.message_count")
	}
	if _, ok := attrMap(batch.Attributes())["messaging.message.id"]; ok {
		t.Error("EnqueueBatch span has messaging.message.id")
	}

	runConsumer(t, q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }),
		consumerConfig(middleware.Tracing(tcfg)))
	redistest.WaitFor(t, waitTimeout, "four process spans", func() bool { return len(consumerSpans(sr)) == 4 })
	checkProcessLinks(t, sr, q.Name(), one, oneID)
	checkProcessLinks(t, sr, q.Name(), batch, batchIDs...)
}

func TestProducer_NewRootLinksOnly(t *testing.T) {
	t.Parallel()
	q := setup(t)
	sr, _, tcfg := tracingSetup(t)
	p, err := middleware.NewProducer(newProducer(t, q), &middleware.SendConfig{Tracing: tcfg})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Enqueue(context.Background(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	root := *tcfg
	root.NewRoot = true
	runConsumer(t, q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }),
		consumerConfig(middleware.Tracing(&root)))
	redistest.WaitFor(t, waitTimeout, "a process span", func() bool { return len(consumerSpans(sr)) == 1 })
	send := spansOf(sr, trace.SpanKindProducer)[0]
	s := consumerSpans(sr)[id]
	if s.Parent().IsValid() || s.SpanContext().TraceID() == send.SpanContext().TraceID() {
		t.Errorf("process span has parent %v in trace %s: want a new root", s.Parent(), s.SpanContext().TraceID())
	}
	if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("links = %+v, want one link to the send span", l)
	}
}

func TestProducer_Failure(t *testing.T) {
	t.Parallel()
	q := setup(t)
	t.Cleanup(func() { _ = core.Of(q).RDB.Del(context.Background(), core.Of(q).Keys.Unique("k")).Err() })
	sr, _, tcfg := tracingSetup(t)
	reader, metrics := metricsSetup(t)
	p, err := middleware.NewProducer(newProducer(t, q), &middleware.SendConfig{Tracing: tcfg, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Enqueue(ctx, []byte("x"), streamq.Unique("k", time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, []byte("x"), streamq.Unique("k", time.Minute)); !errors.Is(err, streamq.ErrDuplicate) {
		t.Fatalf("second unique enqueue: %v, want ErrDuplicate", err)
	}
	sends := spansOf(sr, trace.SpanKindProducer)
	if len(sends) != 2 {
		t.Fatalf("%d producer spans, want 2", len(sends))
	}
	dup := sends[1]
	if dup.Status().Code != codes.Error {
		t.Errorf("duplicate: status %+v, want Error", dup.Status())
	}
	checkAttrs(t, dup, map[attribute.Key]attribute.Value{"error.type": attribute.StringValue("duplicate")})
	if _, ok := attrMap(dup.Attributes())["messaging.message.id"]; ok {
		t.Error("a failed send has messaging.message.id")
	}

	snap := collect(t, reader)
	base := []attribute.KeyValue{
		attribute.String("messaging.system", "streamq"),
		attribute.String("messaging.operation.name", "send"),
		attribute.String("messaging.destination.name", q.Name()),
	}
	if got := snap.value(middleware.MetricSentMessages, base...); got != 2 {
		t.Errorf("sent messages = %d, want 2", got)
	}
	if got := snap.value(middleware.MetricSentMessages, append(base, attribute.String("error.type", "duplicate"))...); got != 1 {
		t.Errorf("sent messages with error.type duplicate = %d, want 1", got)
	}
	opType := attribute.String("messaging.operation.type", "send")
	if got := snap.count(middleware.MetricOperationDuration, append(base, opType)...); got != 2 {
		t.Errorf("operation durations = %d, want 2", got)
	}
	if got := snap.count(middleware.MetricOperationDuration, append(base, opType, attribute.String("error.type", "duplicate"))...); got != 1 {
		t.Errorf("operation durations with error.type duplicate = %d, want 1", got)
	}
	for name, unit := range map[string]string{middleware.MetricSentMessages: "{message}", middleware.MetricOperationDuration: "s"} {
		if snap[name].Unit != unit {
			t.Errorf("%s: unit %q, want %q", name, snap[name].Unit, unit)
		}
	}
}

func TestProducer_KeepsCustomCreationContext(t *testing.T) {
	t.Parallel()
	q := setup(t)
	_, tp, tcfg := tracingSetup(t)
	p, err := middleware.NewProducer(newProducer(t, q), &middleware.SendConfig{Tracing: tcfg})
	if err != nil {
		t.Fatal(err)
	}
	// A creation context of the caller's choosing, in the job's headers.
	_, own := tp.Tracer("test").Start(context.Background(), "created earlier")
	own.End()
	custom := map[string]string{}
	tcfg.Propagator.Inject(trace.ContextWithSpan(context.Background(), own), propagation.MapCarrier(custom))
	if _, err := p.EnqueueBatch(context.Background(), []streamq.Job{{Payload: []byte("x"), Headers: custom}}); err != nil {
		t.Fatal(err)
	}

	got := make(chan string, 1)
	runConsumer(t, q, streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		got <- msg.Headers["traceparent"]
		return nil
	}), consumerConfig())
	select {
	case tp := <-got:
		if tp != custom["traceparent"] {
			t.Errorf("traceparent = %q, want the job's own %q", tp, custom["traceparent"])
		}
	case <-time.After(waitTimeout):
		t.Fatal("job not handled")
	}
}

func TestPriorityQueue_SendSpans(t *testing.T) {
	t.Parallel()
	q := setup(t)
	t.Cleanup(func() {
		k := core.Of(q).Keys.Priority()
		if err := core.Of(q).RDB.Del(context.Background(), k.Ready, k.Leases, k.Waiting, k.Delayed, k.Jobs, k.Deliveries, k.Seq, k.Notify).Err(); err != nil {
			t.Errorf("delete priority keys: %v", err)
		}
	})
	sr, _, tcfg := tracingSetup(t)
	reader, metrics := metricsSetup(t)
	pq, err := priority.NewQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	wq, err := middleware.NewPriorityQueue(pq, &middleware.SendConfig{Tracing: tcfg, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	oneID, err := wq.Push(ctx, priority.Job{Priority: 5, Payload: []byte("one"), Headers: map[string]string{"user": "kept"}})
	if err != nil {
		t.Fatal(err)
	}
	batchIDs, err := wq.PushBatch(ctx, []priority.Job{{Payload: []byte("a")}, {Payload: []byte("b")}})
	if err != nil {
		t.Fatal(err)
	}
	sends := spansOf(sr, trace.SpanKindProducer)
	if len(sends) != 2 {
		t.Fatalf("%d producer spans, want 2", len(sends))
	}
	for _, s := range sends {
		if s.Name() != "send "+q.Name() {
			t.Errorf("producer span name = %q, want %q", s.Name(), "send "+q.Name())
		}
		checkAttrs(t, s, map[attribute.Key]attribute.Value{
			"messaging.destination.name": attribute.StringValue(q.Name()),
			"messaging.operation.type":   attribute.StringValue("send"),
		})
	}
	checkAttrs(t, sends[0], map[attribute.Key]attribute.Value{"messaging.message.id": attribute.StringValue(oneID)})
	checkAttrs(t, sends[1], map[attribute.Key]attribute.Value{"messaging.batch.message_count": attribute.IntValue(2)})
	if got := collect(t, reader).value(middleware.MetricSentMessages, attribute.String("messaging.destination.name", q.Name())); got != 3 {
		t.Errorf("sent messages = %d, want 3", got)
	}

	users := make(chan string, 3)
	w, err := priority.NewWorker(pq, streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		if string(msg.Payload) == "one" {
			users <- msg.Headers["user"]
		}
		return nil
	}), &priority.WorkerConfig{Middleware: []streamq.Middleware{middleware.Tracing(tcfg)}})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "Worker.Run", stopTimeout, w.Run)
	redistest.WaitFor(t, waitTimeout, "three process spans", func() bool { return len(consumerSpans(sr)) == 3 })
	checkProcessLinks(t, sr, q.Name(), sends[0], oneID)
	checkProcessLinks(t, sr, q.Name(), sends[1], batchIDs...)
	if u := <-users; u != "kept" {
		t.Errorf("user header = %q, want kept beside the trace headers", u)
	}
}

func TestNewProducer_Nil(t *testing.T) {
	t.Parallel()
	var ce *streamq.ConfigError
	if _, err := middleware.NewProducer(nil, nil); !errors.As(err, &ce) {
		t.Errorf("NewProducer(nil): %v, want a *streamq.ConfigError", err)
	}
	if _, err := middleware.NewPriorityQueue(nil, nil); !errors.As(err, &ce) {
		t.Errorf("NewPriorityQueue(nil): %v, want a *streamq.ConfigError", err)
	}
}

func TestMetrics_SemanticConventions(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp, Group: "fallback"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })

	h := streamq.Chain(streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		switch string(msg.Payload) {
		case "fail":
			return errors.New("boom")
		case "later":
			return streamq.Postpone(time.Second, nil)
		}
		return nil
	}), m.Middleware())
	ctx := context.Background()
	for _, msg := range []*streamq.Message{
		{ID: "1-0", Queue: "orders", Group: "billing", Payload: []byte("ok"), Attempt: 1},
		{ID: "2-0", Queue: "orders", Group: "billing", Payload: []byte("fail"), Attempt: 1},
		{ID: "3-0", Queue: "orders", Group: "billing", Payload: []byte("later"), Attempt: 1},
		{ID: "4-0", Queue: "orders", Payload: []byte("ok"), Attempt: 1}, // a runtime without groups
	} {
		_ = h.Handle(ctx, msg)
	}

	snap := collect(t, reader)
	for name, unit := range map[string]string{
		middleware.MetricProcessDuration:  "s",
		middleware.MetricConsumedMessages: "{message}",
	} {
		if snap[name].Unit != unit {
			t.Errorf("%s: unit %q, want %q", name, snap[name].Unit, unit)
		}
	}
	billing := []attribute.KeyValue{
		attribute.String("messaging.system", "streamq"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", "orders"),
		attribute.String("messaging.consumer.group.name", "billing"),
	}
	if got := snap.value(middleware.MetricConsumedMessages, billing...); got != 3 {
		t.Errorf("consumed messages of billing = %d, want 3", got)
	}
	if got := snap.value(middleware.MetricConsumedMessages, attribute.String("messaging.consumer.group.name", "fallback")); got != 1 {
		t.Errorf("consumed messages of the fallback group = %d, want 1", got)
	}
	// Every handler call has a duration; only the failure has error.type.
	if got := snap.count(middleware.MetricProcessDuration, billing...); got != 3 {
		t.Errorf("process durations of billing = %d, want 3", got)
	}
	if got := snap.count(middleware.MetricProcessDuration, append(billing, attribute.String("error.type", "_OTHER"))...); got != 1 {
		t.Errorf("failed process durations = %d, want 1", got)
	}
	h2, _ := snap[middleware.MetricProcessDuration].Data.(metricdata.Histogram[float64])
	for _, p := range h2.DataPoints {
		if len(p.Bounds) != 14 || p.Bounds[0] != 0.005 || p.Bounds[13] != 10 {
			t.Errorf("bucket bounds %v, want the 14 the conventions advise (0.005 to 10)", p.Bounds)
		}
	}
	// The streamq instruments keep their names and attributes.
	if got := snap.value(middleware.MetricProcessed, attribute.String("messaging.destination.name", "orders")); got != 2 {
		t.Errorf("%s = %d, want 2", middleware.MetricProcessed, got)
	}
	if got := snap.count(middleware.MetricDuration); got != 3 {
		t.Errorf("%s has %d points, want 3 (not the postponed call)", middleware.MetricDuration, got)
	}
}
