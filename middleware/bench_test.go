package middleware_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/middleware"
)

// discardProcessor is a span processor that drops every span, so that
// benchmarks pay for creating, ending and snapshotting spans but not for
// exporting them.
type discardProcessor struct{}

func (discardProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discardProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discardProcessor) Shutdown(context.Context) error                  { return nil }
func (discardProcessor) ForceFlush(context.Context) error                { return nil }

// benchObs is the observability setup of the benchmarks: a real SDK tracer
// and meter provider whose data goes nowhere.
type benchObs struct {
	tracing *middleware.TracingConfig
	metrics *middleware.Metrics
	tp      *sdktrace.TracerProvider
}

func newBenchObs(b *testing.B) *benchObs {
	b.Helper()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(discardProcessor{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	return &benchObs{
		tracing: &middleware.TracingConfig{
			TracerProvider: tp,
			Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		},
		metrics: m,
		tp:      tp,
	}
}

// full is the recommended chain with everything but the rate limit, which
// costs a Redis round trip per job and is measured on its own.
func (o *benchObs) full() []streamq.Middleware {
	return middleware.Default(&middleware.DefaultConfig{
		Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Tracing: o.tracing,
		Metrics: o.metrics,
		Timeout: time.Minute,
	})
}

// producerContext returns a context with a sampled span, so that jobs carry a
// trace context for the consumer to extract.
func (o *benchObs) producerContext(b *testing.B) context.Context {
	ctx, span := o.tp.Tracer("bench").Start(context.Background(), "enqueue")
	b.Cleanup(func() { span.End() })
	return ctx
}

// BenchmarkChain measures the cost of the middleware.
//
//   - handler/<chain>: the chain around a no-op handler, without Redis
//     (ns/op and allocs/op per job).
//   - e2e/overhead/<chain>: end-to-end through a real consumer: each
//     iteration enqueues 5000 jobs for a bare consumer and 5000 for one with
//     the chain (timer stopped), then drains both in turns. Reports the
//     throughput of each side, chain/bare time as "ratio", the throughput
//     loss as "overhead_%", and the extra CPU time of this process as
//     "cpu_overhead_%" and "cpu_µs/job" (steadier than wall time on a shared
//     machine); ns/op is the drain time of one iteration. Use -benchtime 10x
//     or more.
func BenchmarkChain(b *testing.B) {
	obs := newBenchObs(b)
	noop := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
	quiet := slog.New(slog.NewJSONHandler(io.Discard, nil))

	noopTracing := *obs.tracing
	noopTracing.TracerProvider = tracenoop.NewTracerProvider()
	headers := map[string]string{}
	middleware.ProducerHook(obs.tracing)(obs.producerContext(b), headers)
	msg := &streamq.Message{ID: "1712345678901-0", Queue: "orders", Payload: []byte(`{"order":42}`),
		Headers: headers, EnqueuedAt: time.Now(), Deliveries: 1}
	for _, c := range []struct {
		name string
		mws  []streamq.Middleware
	}{
		{"bare", nil},
		{"recover", []streamq.Middleware{middleware.Recover()}},
		{"timeout", []streamq.Middleware{middleware.Timeout(time.Minute)}},
		{"logging", []streamq.Middleware{middleware.Logging(quiet, nil)}},
		{"tracing", []streamq.Middleware{middleware.Tracing(obs.tracing)}},
		{"tracing-noop-provider", []streamq.Middleware{middleware.Tracing(&noopTracing)}},
		{"metrics", []streamq.Middleware{obs.metrics.Middleware()}},
		{"full", obs.full()},
	} {
		b.Run("handler/"+c.name, func(b *testing.B) {
			h := streamq.Chain(noop, c.mws...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := h.Handle(ctx, msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}

	for _, c := range []struct {
		name  string
		chain func(*rig) []streamq.Middleware
	}{
		// Every span recorded by the SDK (then dropped), as with 100% sampling.
		{"full", func(*rig) []streamq.Middleware { return obs.full() }},
		// Tracing with a no-op tracer provider: the cost of this package's
		// code alone, and close to the cost of unsampled jobs.
		{"full-noop-tracer", func(*rig) []streamq.Middleware {
			return middleware.Default(&middleware.DefaultConfig{
				Logger:  quiet,
				Tracing: &noopTracing,
				Metrics: obs.metrics,
				Timeout: time.Minute,
			})
		}},
		// The full chain plus a rate limit too high to ever wait: the cost
		// of its one script call per job.
		{"full+ratelimit", func(r *rig) []streamq.Middleware {
			l, err := middleware.NewRateLimiter(r.q, middleware.RateLimitConfig{Rate: 1e9, Burst: 1e9})
			if err != nil {
				b.Fatal(err)
			}
			return append(obs.full(), l.Middleware())
		}},
	} {
		b.Run("e2e/overhead/"+c.name, func(b *testing.B) {
			const jobs = 5000
			bare, full := newRig(b, obs, nil), newRig(b, obs, nil)
			full.mws = c.chain(full)
			var tb, tf, cb, cf time.Duration
			for i := range b.N {
				// Alternate the order so that drift (a warming cache, a busy
				// machine) does not favour one side.
				if i%2 == 0 {
					tb, cb = add2(tb, cb)(bare.drain(b, jobs))
					tf, cf = add2(tf, cf)(full.drain(b, jobs))
				} else {
					tf, cf = add2(tf, cf)(full.drain(b, jobs))
					tb, cb = add2(tb, cb)(bare.drain(b, jobs))
				}
			}
			ratio := tf.Seconds() / tb.Seconds()
			b.ReportMetric(ratio, "ratio")
			b.ReportMetric((1-1/ratio)*100, "overhead_%")
			if cb > 0 {
				b.ReportMetric((cf.Seconds()/cb.Seconds()-1)*100, "cpu_overhead_%")
				b.ReportMetric(float64(cf-cb)/float64(b.N*jobs)/1e3, "cpu_µs/job")
			}
			b.ReportMetric(float64(b.N*jobs)/tb.Seconds(), "bare_jobs/s")
			b.ReportMetric(float64(b.N*jobs)/tf.Seconds(), "chain_jobs/s")
		})
	}
}

// rig is a queue, a producer and a middleware chain for end-to-end runs.
type rig struct {
	q   *streamq.Queue
	p   *streamq.Producer
	ctx context.Context
	mws []streamq.Middleware
	obs *benchObs
}

func newRig(b *testing.B, obs *benchObs, mws []streamq.Middleware) *rig {
	b.Helper()
	q := setup(b)
	return &rig{
		q:   q,
		p:   newProducer(b, q, middleware.ProducerHook(obs.tracing)),
		ctx: obs.producerContext(b),
		mws: mws,
		obs: obs,
	}
}

// add2 returns a function adding its two arguments to a and b.
func add2(a, b time.Duration) func(x, y time.Duration) (time.Duration, time.Duration) {
	return func(x, y time.Duration) (time.Duration, time.Duration) { return a + x, b + y }
}

// drain enqueues n jobs with the benchmark timer stopped, then runs a
// consumer until it has handled all of them and returns how long that took,
// in wall time and in CPU time of this process (Redis's CPU is not counted).
func (r *rig) drain(b *testing.B, n int) (wall, cpu time.Duration) {
	b.Helper()
	b.StopTimer()
	const chunk = 1000
	for done := 0; done < n; {
		batch := make([]streamq.Job, min(chunk, n-done))
		for i := range batch {
			batch[i].Payload = []byte(`{"order":42}`)
		}
		if _, err := r.p.EnqueueBatch(r.ctx, batch); err != nil {
			b.Fatal(err)
		}
		done += len(batch)
	}
	var count atomic.Int64
	all := make(chan struct{})
	h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		if count.Add(1) == int64(n) {
			close(all)
		}
		return nil
	})
	cfg := consumerConfig(r.mws...)
	cfg.OnEvent = r.obs.metrics.OnEvent
	c, err := streamq.NewConsumer(r.q, h, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	b.StartTimer()
	start, cpu0 := time.Now(), cpuTime()
	go func() { errc <- c.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(time.Minute):
		cancel()
		<-errc
		b.Fatalf("handled %d of %d jobs in a minute", count.Load(), n)
	}
	wall, cpu = time.Since(start), cpuTime()-cpu0
	b.StopTimer()
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	return wall, cpu
}
