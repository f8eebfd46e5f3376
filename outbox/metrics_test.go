package outbox_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/outbox"
)

// TestRegisterMetrics: the gauges report the rows waiting per queue.
func TestRegisterMetrics(t *testing.T) {
	t.Parallel()
	tb := openTable(t, "sqlite", false)
	c := redistest.NewClient(t)
	q, _ := newQueue(t, c)
	tb.enqueueN(t, q, "job", 3, nil)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	unregister, err := outbox.RegisterMetrics(tb.store, &outbox.MetricsConfig{MeterProvider: mp, Table: tb.name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unregister() })
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = true
			if m.Name != outbox.MetricRows {
				continue
			}
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != 3 {
				t.Errorf("%s: %+v, want one point of 3", m.Name, m.Data)
				continue
			}
			if v, _ := g.DataPoints[0].Attributes.Value("messaging.destination.name"); v.AsString() != q.Name() {
				t.Errorf("%s: queue attribute %q, want %q", m.Name, v.AsString(), q.Name())
			}
		}
	}
	for _, name := range []string{outbox.MetricRows, outbox.MetricOldest, outbox.MetricLag, outbox.MetricFailing} {
		if !got[name] {
			t.Errorf("metric %s not reported (got %v)", name, got)
		}
	}
}
