package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/middleware"
)

// snapshot is one collection of a ManualReader, by instrument name.
type snapshot map[string]metricdata.Metrics

func collect(t testing.TB, r *sdkmetric.ManualReader) snapshot {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	s := snapshot{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			s[m.Name] = m
		}
	}
	return s
}

// points returns the int64 data points of a sum or gauge.
func (s snapshot) points(name string) []metricdata.DataPoint[int64] {
	switch d := s[name].Data.(type) {
	case metricdata.Sum[int64]:
		return d.DataPoints
	case metricdata.Gauge[int64]:
		return d.DataPoints
	}
	return nil
}

// value sums the int64 points of name whose attributes contain every kv.
func (s snapshot) value(name string, kvs ...attribute.KeyValue) int64 {
	var n int64
	for _, p := range s.points(name) {
		if hasAll(p.Attributes, kvs) {
			n += p.Value
		}
	}
	return n
}

// count sums the counts of the histogram points of name.
func (s snapshot) count(name string, kvs ...attribute.KeyValue) uint64 {
	h, _ := s[name].Data.(metricdata.Histogram[float64])
	var n uint64
	for _, p := range h.DataPoints {
		if hasAll(p.Attributes, kvs) {
			n += p.Count
		}
	}
	return n
}

func hasAll(set attribute.Set, kvs []attribute.KeyValue) bool {
	for _, kv := range kvs {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// metricsSetup returns a Metrics recording into a meter provider read by the
// returned manual reader. Both are shut down when the test ends.
func metricsSetup(t testing.TB) (*sdkmetric.ManualReader, *middleware.Metrics) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close metrics: %v", err)
		}
	})
	return reader, m
}

func TestMetrics_EndToEnd(t *testing.T) {
	t.Parallel()
	q := setup(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp, Queues: []*streamq.Queue{q}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})

	const okJobs, failJobs, maxDeliveries = 5, 3, 2
	p := newProducer(t, q)
	for i := range okJobs + failJobs {
		payload := "ok"
		if i < failJobs {
			payload = "fail"
		}
		enqueue(t, context.Background(), p, payload)
	}
	h := streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		if string(msg.Payload) == "fail" {
			return errors.New("boom")
		}
		return nil
	})
	cfg := consumerConfig(m.Middleware())
	cfg.OnEvent = m.OnEvent
	cfg.MaxDeliveries = maxDeliveries
	cfg.Backoff = func(int) time.Duration { return 0 }
	c := runConsumer(t, q, h, cfg)

	queue := attribute.String("messaging.destination.name", q.Name())
	want := map[string]int64{
		middleware.MetricProcessed:    okJobs,
		middleware.MetricFailed:       failJobs * maxDeliveries,
		middleware.MetricRetried:      failJobs * (maxDeliveries - 1),
		middleware.MetricDeadLettered: failJobs,
		middleware.MetricInFlight:     0,
		middleware.MetricQueueDead:    failJobs,
		middleware.MetricQueuePending: 0,
		middleware.MetricQueueLag:     0,
		middleware.MetricQueueDelayed: 0,
	}
	var s snapshot
	redistest.WaitFor(t, waitTimeout, "metrics of all jobs", func() bool {
		s = collect(t, reader)
		for name, v := range want {
			if s.value(name, queue) != v || len(s.points(name)) == 0 {
				return false
			}
		}
		return true
	})

	st := c.Stats()
	if st.Processed != okJobs || st.Failed != failJobs*maxDeliveries || st.Retried != failJobs || st.DeadLettered != failJobs {
		t.Errorf("consumer stats %+v disagree with the metrics %v", st, want)
	}
	if got := s.value(middleware.MetricFailed, queue, attribute.String("error.type", "_OTHER")); got != failJobs*maxDeliveries {
		t.Errorf("failed with error.type _OTHER = %d, want %d", got, failJobs*maxDeliveries)
	}
	if got := s.value(middleware.MetricDeadLettered, queue, middleware.AttrDeadLetterReason.String(streamq.ReasonMaxDeliveries)); got != failJobs {
		t.Errorf("dead letters with reason max_deliveries = %d, want %d", got, failJobs)
	}
	if got, want := s.count(middleware.MetricDuration, queue), uint64(okJobs+failJobs*maxDeliveries); got != want {
		t.Errorf("duration histogram count = %d, want %d (one per handler call)", got, want)
	}
	if got, want := s.count(middleware.MetricLatency, queue), uint64(okJobs+failJobs); got != want {
		t.Errorf("latency histogram count = %d, want %d (first attempts only)", got, want)
	}
	// Length is the backlog, not the acknowledged history the stream still
	// holds.
	if got, want := s.value(middleware.MetricQueueLength, queue), s.value(middleware.MetricQueueLag, queue)+s.value(middleware.MetricQueuePending, queue); got != want {
		t.Errorf("queue length = %d, want lag + pending = %d", got, want)
	}
	if got := s.value(middleware.MetricQueueEntries, queue); got < okJobs {
		t.Errorf("stream entries = %d, want at least the %d acknowledged jobs", got, okJobs)
	}
	for name := range s {
		for _, p := range s.points(name) {
			if !hasAll(p.Attributes, []attribute.KeyValue{queue}) {
				t.Errorf("%s has a point without the queue attribute: %v", name, p.Attributes.ToSlice())
			}
		}
	}
}

func TestMetrics_OnEvent(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	for kind, n := range map[streamq.EventKind]int{
		streamq.EventRetried:      1,
		streamq.EventDeadLettered: 2,
		streamq.EventReclaimed:    3,
		streamq.EventDeleted:      4,
		streamq.EventClaimLost:    5,
		streamq.EventPostponed:    6,
	} {
		for range n {
			m.OnEvent(ctx, streamq.Event{Kind: kind, Queue: "orders", Reason: streamq.ReasonPermanent})
		}
	}
	s := collect(t, reader)
	queue := attribute.String("messaging.destination.name", "orders")
	for name, want := range map[string]int64{
		middleware.MetricRetried:      1,
		middleware.MetricDeadLettered: 2,
		middleware.MetricReclaimed:    3,
		middleware.MetricDeleted:      4,
		middleware.MetricClaimsLost:   5,
		middleware.MetricPostponed:    6,
	} {
		if got := s.value(name, queue); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if got := s.value(middleware.MetricDeadLettered, middleware.AttrDeadLetterReason.String(streamq.ReasonPermanent)); got != 2 {
		t.Errorf("dead letters with reason permanent = %d, want 2", got)
	}
}

func TestMetrics_PanicAndInFlight(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	started, release := make(chan struct{}), make(chan struct{})
	blocking := streamq.Chain(streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		close(started)
		<-release
		return nil
	}), m.Middleware())
	msg := &streamq.Message{ID: "1-0", Queue: "orders", EnqueuedAt: time.Now().Add(-time.Second)}
	done := make(chan error, 1)
	go func() { done <- blocking.Handle(context.Background(), msg) }()
	<-started
	queue := attribute.String("messaging.destination.name", "orders")
	if got := collect(t, reader).value(middleware.MetricInFlight, queue); got != 1 {
		t.Errorf("in flight while running = %d, want 1", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	h := streamq.Chain(panicky("x"), middleware.Recover(), m.Middleware())
	if err := h.Handle(context.Background(), msg); err == nil {
		t.Fatal("panic not turned into an error")
	}
	s := collect(t, reader)
	if got := s.value(middleware.MetricInFlight, queue); got != 0 {
		t.Errorf("in flight after the jobs = %d, want 0", got)
	}
	if got := s.value(middleware.MetricFailed, queue, attribute.String("error.type", "panic")); got != 1 {
		t.Errorf("failed with error.type panic = %d, want 1", got)
	}
	if got := s.count(middleware.MetricLatency, queue); got != 2 {
		t.Errorf("latency count = %d, want 2", got)
	}
}

func TestMetrics_Postponed(t *testing.T) {
	t.Parallel()
	reader, m := metricsSetup(t)
	queue := attribute.String("messaging.destination.name", "orders")
	msg := &streamq.Message{ID: "1-0", Queue: "orders", EnqueuedAt: time.Now().Add(-time.Second), Attempt: 1}
	postpone := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		return fmt.Errorf("wrapped: %w", streamq.Postpone(time.Second, errors.New("busy")))
	})
	h := streamq.Chain(postpone, m.Middleware())
	for range 3 {
		if err := h.Handle(context.Background(), msg); err == nil {
			t.Fatal("the Postpone error was swallowed")
		}
	}
	// The consumer reports each postponement it made.
	for range 3 {
		m.OnEvent(context.Background(), streamq.Event{Kind: streamq.EventPostponed, Queue: "orders"})
	}
	s := collect(t, reader)
	for name, want := range map[string]int64{
		middleware.MetricPostponed: 3,
		middleware.MetricProcessed: 0,
		middleware.MetricFailed:    0,
		middleware.MetricInFlight:  0,
	} {
		if got := s.value(name, queue); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if got := s.count(middleware.MetricDuration, queue); got != 0 {
		t.Errorf("duration count = %d, want 0: postponed attempts are not handler runs", got)
	}
	if got := s.count(middleware.MetricLatency, queue); got != 0 {
		t.Errorf("latency count = %d, want 0: a postponed job's latency counts when it runs", got)
	}

	// A shutdown overrides the postponement: the consumer counts a failure.
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(streamq.ErrShutdown)
	_ = h.Handle(ctx, msg)
	s = collect(t, reader)
	if got := s.value(middleware.MetricFailed, queue, attribute.String("error.type", "shutdown")); got != 1 {
		t.Errorf("failed with error.type shutdown = %d, want 1", got)
	}
	if got := s.count(middleware.MetricLatency, queue); got != 1 {
		t.Errorf("latency count = %d, want 1", got)
	}
}

func TestNewMetrics_Validation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   middleware.MetricsConfig
		field string
	}{
		{"negative stats timeout", middleware.MetricsConfig{StatsTimeout: -time.Second}, "MetricsConfig.StatsTimeout"},
		{"nil queue", middleware.MetricsConfig{Queues: []*streamq.Queue{nil}}, "MetricsConfig.Queues[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := middleware.NewMetrics(&tt.cfg)
			var ce *streamq.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("err = %v, want ConfigError for %s", err, tt.field)
			}
		})
	}
	m, err := middleware.NewMetrics(nil)
	if err != nil {
		t.Fatalf("NewMetrics(nil): %v", err)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestMetrics_CloseStopsQueueGauges(t *testing.T) {
	t.Parallel()
	q := setup(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp, Queues: []*streamq.Queue{q}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := len(collect(t, reader).points(middleware.MetricQueueLength)); got != 1 {
		t.Fatalf("queue length points before Close = %d, want 1", got)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(collect(t, reader).points(middleware.MetricQueueLength)); got != 0 {
		t.Errorf("queue length points after Close = %d, want 0", got)
	}
}

func TestMetrics_CloseDuringCollect(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	m.OnEvent(context.Background(), streamq.Event{Kind: streamq.EventRetried, Queue: "orders"})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			var rm metricdata.ResourceMetrics
			_ = reader.Collect(context.Background(), &rm)
		}
	}()
	if err := m.Close(); err != nil {
		t.Error(err)
	}
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("Collect and Close deadlocked")
	}
}
