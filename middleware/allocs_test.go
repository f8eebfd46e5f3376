package middleware_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/middleware"
)

// TestDefault_Allocs pins what the chain allocates per job, so that a change
// that makes every job pay again shows as a failing test rather than as a
// slower benchmark nobody reruns. The package's own code allocates nothing
// per job; what a span costs is the OpenTelemetry API's and SDK's: the
// copy of the start attributes (API), the non-recording span and the
// context holding it (SDK), and, for a job whose headers carry a trace
// context, the extracted remote span context and its context. Allocation
// counts, not times, so the machine's load does not matter. Not parallel:
// testing.AllocsPerRun refuses to run beside parallel tests.
func TestDefault_Allocs(t *testing.T) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	sampled := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() {
		_ = unsampled.Shutdown(context.Background())
		_ = sampled.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil)) // Info: failures only
	silent := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	untraced := &middleware.DefaultConfig{Logger: quiet, Metrics: m, NoTracing: true}
	silentUntraced := &middleware.DefaultConfig{Logger: silent, Metrics: m, NoTracing: true}
	traced := &middleware.DefaultConfig{Logger: quiet, Metrics: m,
		Tracing: &middleware.TracingConfig{TracerProvider: unsampled, Propagator: prop}}
	late := &middleware.DefaultConfig{Logger: quiet, Metrics: m,
		Tracing: &middleware.TracingConfig{TracerProvider: unsampled, Propagator: prop, NoStartAttributes: true}}

	// A traceparent as a producer's ProducerHook writes it, from a sampled
	// span: the unsampled provider's NeverSample still drops the job's span.
	headers := map[string]string{}
	ctx, span := sampled.Tracer("test").Start(context.Background(), "enqueue")
	middleware.ProducerHook(&middleware.TracingConfig{Propagator: prop})(ctx, headers)
	span.End()
	if headers["traceparent"] == "" {
		t.Fatal("ProducerHook wrote no traceparent")
	}
	plain := streamq.Message{ID: "1-0", Queue: "orders", Group: "workers", EnqueuedAt: time.Now(), Attempt: 1}
	withTrace := plain
	withTrace.Headers = headers

	errJob := streamq.Permanent(errors.New("boom")) // classified: error.type permanent
	for _, tt := range []struct {
		name string
		mws  []streamq.Middleware
		msg  *streamq.Message
		fail bool    // the handler returns an error: Logging writes a record
		max  float64 // allocations per job
	}{
		{"recover", []streamq.Middleware{middleware.Recover()}, &plain, false, 0},
		{"logging, failures only, job done", []streamq.Middleware{middleware.Logging(quiet, nil)}, &plain, false, 0},
		{"logging, every level disabled, job failed", []streamq.Middleware{middleware.Logging(silent, nil)}, &plain, true, 0},
		{"metrics, job done", []streamq.Middleware{m.Middleware()}, &plain, false, 0},
		{"metrics, job failed", []streamq.Middleware{m.Middleware()}, &plain, true, 0},
		{"default without tracing", middleware.Default(untraced), &plain, false, 0},
		{"default without tracing, job failed, logging disabled", middleware.Default(silentUntraced), &plain, true, 0},
		{"default, span not sampled", middleware.Default(traced), &plain, false, 3},
		{"default, span not sampled, trace context in headers", middleware.Default(traced), &withTrace, false, 5},
		{"default, span not sampled, NoStartAttributes", middleware.Default(late), &withTrace, false, 4},
	} {
		h := streamq.Chain(streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
			if tt.fail {
				return errJob
			}
			return nil
		}), tt.mws...)
		run := func() {
			if err := h.Handle(context.Background(), tt.msg); (err != nil) != tt.fail {
				t.Fatalf("%s: Handle = %v", tt.name, err)
			}
		}
		if n := testing.AllocsPerRun(200, run); n > tt.max {
			t.Errorf("%s: %v allocations per job, want at most %v", tt.name, n, tt.max)
		}
	}
}
