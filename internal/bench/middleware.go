package bench

import (
	"context"
	"io"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/middleware"
)

// discardSpans is a span processor that drops every span: the scenario pays
// for creating, ending and snapshotting spans, not for exporting them.
type discardSpans struct{}

func (discardSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discardSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discardSpans) Shutdown(context.Context) error                  { return nil }
func (discardSpans) ForceFlush(context.Context) error                { return nil }

// middlewareChain returns the chain the "middleware" scenario (and -middleware
// on the e2e scenario) wraps the no-op handler with: middleware.Default with
// Recover, Tracing (OpenTelemetry SDK, every span sampled, then dropped),
// Metrics (SDK meter provider with a manual reader), Logging (JSON to
// io.Discard) and Timeout. The rate limiter is left out: it costs one Redis
// script call per job by design and is measured by the middleware package's
// own benchmarks. Call cleanup when the consumers have stopped. A nil chain
// comes with the reason in note.
func middlewareChain() (mws []streamq.Middleware, note string, cleanup func()) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(discardSpans{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp})
	if err != nil {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
		return nil, "cannot create middleware.Metrics: " + err.Error(), func() {}
	}
	mws = middleware.Default(&middleware.DefaultConfig{
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Tracing: &middleware.TracingConfig{
			TracerProvider: tp,
			Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		},
		Metrics: m,
		Timeout: time.Minute,
	})
	return mws, "Recover, Tracing (SDK, all sampled, dropped), Metrics (SDK), Logging (discarded), Timeout", func() {
		_ = m.Close()
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	}
}
