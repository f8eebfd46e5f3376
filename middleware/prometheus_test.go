package middleware_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/middleware"
)

// TestMetrics_Prometheus checks the metric names that the README documents
// for the Prometheus exporter.
func TestMetrics_Prometheus(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	msg := &streamq.Message{ID: "1-0", Queue: "orders", EnqueuedAt: time.Now()}
	ok := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
	fail := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return errors.New("x") })
	_ = streamq.Chain(ok, m.Middleware()).Handle(context.Background(), msg)
	_ = streamq.Chain(fail, m.Middleware()).Handle(context.Background(), msg)
	m.OnEvent(context.Background(), streamq.Event{Kind: streamq.EventRetried, Queue: "orders"})
	m.OnEvent(context.Background(), streamq.Event{Kind: streamq.EventPostponed, Queue: "orders"})
	m.OnEvent(context.Background(), streamq.Event{Kind: streamq.EventDeadLettered, Queue: "orders", Reason: streamq.ReasonPermanent})

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string][2]string{
		"streamq_jobs_processed_total":     {"messaging_destination_name", "orders"},
		"streamq_jobs_failed_total":        {"error_type", "_OTHER"},
		"streamq_jobs_dead_lettered_total": {"streamq_dead_letter_reason", streamq.ReasonPermanent},
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
		if want, ok := wantLabels[f.GetName()]; ok {
			labels := f.GetMetric()[0].GetLabel()
			if !slices.ContainsFunc(labels, func(l *dto.LabelPair) bool {
				return l.GetName() == want[0] && l.GetValue() == want[1]
			}) {
				t.Errorf("%s labels = %v, want %s=%s", f.GetName(), labels, want[0], want[1])
			}
		}
	}
	for _, want := range []string{
		"streamq_jobs_processed_total",
		"streamq_jobs_failed_total",
		"streamq_jobs_retried_total",
		"streamq_jobs_postponed_total",
		"streamq_jobs_dead_lettered_total",
		"streamq_jobs_in_flight",
		"streamq_job_duration_seconds",
		"streamq_job_latency_seconds",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("no metric family %s in %v", want, names)
		}
	}
}
