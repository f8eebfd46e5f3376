package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"

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
// Recover, Tracing (OpenTelemetry SDK sampling -middleware-sampled of the
// spans with ParentBased(TraceIDRatioBased), every one at 1, and dropping
// what it records), Metrics (SDK meter provider with a manual reader),
// Logging (JSON to io.Discard at Info: failures only) and, with
// -middleware-timeout, Timeout. The rate limiter is left out: it costs one
// Redis script call per job by design and is measured by the middleware
// package's own benchmarks. Call cleanup when the consumers have stopped. A
// nil chain comes with the reason in note.
func middlewareChain(o *options) (mws []streamq.Middleware, note string, cleanup func()) {
	sampler := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.mwSampled))
	if o.mwSampled >= 1 {
		sampler = sdktrace.AlwaysSample()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(discardSpans{}))
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
		Timeout: o.mwTimeout,
	})
	note = fmt.Sprintf("Recover, Tracing (SDK, %g%% of spans sampled, dropped), Metrics (SDK), Logging (discarded)", o.mwSampled*100)
	if o.mwTimeout > 0 {
		note += fmt.Sprintf(", Timeout %s", o.mwTimeout)
	}
	return mws, note, func() {
		_ = m.Close()
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	}
}
