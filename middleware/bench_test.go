package middleware_test

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/middleware"
)

// discardProcessor is a span processor that drops every span, so that
// benchmarks pay for creating, ending and snapshotting spans but not for
// exporting them (a batching exporter does that on its own goroutine).
type discardProcessor struct{}

func (discardProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (discardProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (discardProcessor) Shutdown(context.Context) error                  { return nil }
func (discardProcessor) ForceFlush(context.Context) error                { return nil }

// benchObs is the observability setup of the benchmarks: real SDK tracer and
// meter providers whose data goes nowhere.
type benchObs struct {
	sampled   *middleware.TracingConfig // every span recorded (AlwaysSample)
	unsampled *middleware.TracingConfig // no span recorded (NeverSample)
	noop      *middleware.TracingConfig // the API's no-op tracer provider

	sampledLate, unsampledLate *middleware.TracingConfig // with NoStartAttributes
	metrics                    *middleware.Metrics
	producer                   context.Context // holds a sampled span: jobs carry a traceparent
	quiet                      *slog.Logger    // JSON to io.Discard at Info: failures only
	silent                     *slog.Logger    // JSON to io.Discard, every level disabled
}

func newBenchObs(b *testing.B) *benchObs {
	b.Helper()
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(discardProcessor{}))
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(discardProcessor{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = sampled.Shutdown(context.Background())
		_ = unsampled.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close() })
	ctx, span := sampled.Tracer("bench").Start(context.Background(), "enqueue")
	b.Cleanup(func() { span.End() })
	return &benchObs{
		sampled:       &middleware.TracingConfig{TracerProvider: sampled, Propagator: prop},
		unsampled:     &middleware.TracingConfig{TracerProvider: unsampled, Propagator: prop},
		noop:          &middleware.TracingConfig{TracerProvider: tracenoop.NewTracerProvider(), Propagator: prop},
		sampledLate:   &middleware.TracingConfig{TracerProvider: sampled, Propagator: prop, NoStartAttributes: true},
		unsampledLate: &middleware.TracingConfig{TracerProvider: unsampled, Propagator: prop, NoStartAttributes: true},
		metrics:       m,
		producer:      ctx,
		quiet:         slog.New(slog.NewJSONHandler(io.Discard, nil)),
		silent:        slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 4})),
	}
}

// chain returns the Default chain with tracing (nil: none), metrics and
// logging, plus extra middleware at the end.
func (o *benchObs) chain(tracing *middleware.TracingConfig, timeout time.Duration, extra ...streamq.Middleware) []streamq.Middleware {
	return append(middleware.Default(&middleware.DefaultConfig{
		Logger:    o.quiet,
		Tracing:   tracing,
		NoTracing: tracing == nil,
		Metrics:   o.metrics,
		Timeout:   timeout,
	}), extra...)
}

// benchChain is a middleware chain to measure. Its chain function gets the
// queue the chain runs for (the rate limit needs it), nil without Redis.
type benchChain struct {
	name  string
	chain func(b *testing.B, q *streamq.Queue) []streamq.Middleware
}

// chains are the configurations measured, from none to everything:
//
//   - bare: no middleware, the baseline;
//   - metrics: Recover, Metrics and Logging, no tracing;
//   - unsampled: Default with Tracing whose sampler records no span (the
//     common production setting, with ParentBased/TraceIDRatioBased, for
//     the jobs that are not sampled);
//   - sampled: Default with every span recorded by the SDK (then dropped);
//   - unsampled-nostart, sampled-nostart: the same with
//     TracingConfig.NoStartAttributes;
//   - sampled+timeout: the same plus the Timeout middleware;
//   - sampled+ratelimit: the same plus a rate limit too high to ever wait:
//     the cost of its one script call per job.
func (o *benchObs) chains() []benchChain {
	return []benchChain{
		{"bare", func(*testing.B, *streamq.Queue) []streamq.Middleware { return nil }},
		{"metrics", func(*testing.B, *streamq.Queue) []streamq.Middleware { return o.chain(nil, 0) }},
		{"unsampled", func(*testing.B, *streamq.Queue) []streamq.Middleware { return o.chain(o.unsampled, 0) }},
		{"unsampled-nostart", func(*testing.B, *streamq.Queue) []streamq.Middleware { return o.chain(o.unsampledLate, 0) }},
		{"sampled", func(*testing.B, *streamq.Queue) []streamq.Middleware { return o.chain(o.sampled, 0) }},
		{"sampled-nostart", func(*testing.B, *streamq.Queue) []streamq.Middleware { return o.chain(o.sampledLate, 0) }},
		{"sampled+timeout", func(*testing.B, *streamq.Queue) []streamq.Middleware { return o.chain(o.sampled, time.Minute) }},
		{"sampled+ratelimit", func(b *testing.B, q *streamq.Queue) []streamq.Middleware {
			if q == nil {
				return nil // needs Redis: end-to-end only
			}
			l, err := middleware.NewRateLimiter(q, middleware.RateLimitConfig{Rate: 1e9, Burst: 1e9})
			if err != nil {
				b.Fatal(err)
			}
			return o.chain(o.sampled, 0, l.Middleware())
		}},
	}
}

// BenchmarkChain measures the cost of the middleware.
//
// handler/<middleware or chain> calls the chain around a no-op handler
// directly, without Redis: the time and allocations per job of the
// middleware alone (use -benchmem). "cpu-ns/op" is the CPU time of the
// process per job, including the garbage collector's work on other threads;
// unlike ns/op it does not grow when other processes take the CPU away.
//
// parallel/<chain> calls the same chains from 64 goroutines at once, as a
// consumer at concurrency 64 does: what they share (the caches per queue,
// the counters, the SDK's instruments) is contended there.
//
// e2e/<handler>/<chain> runs jobs through a real consumer, end to end: each
// iteration enqueues the same number of jobs (5000; 3000 for sleep1ms) for a
// bare consumer and for one with the chain (timer stopped), then drains
// both, in turns, with the same handler.
// It reports the throughput of each over all iterations ("bare_jobs/s",
// "chain_jobs/s"); the median over the iterations of chain time / bare time
// ("ratio") and the throughput lost to the chain, 1 - 1/ratio
// ("overhead_%"); and the CPU time of this process (Redis's is not counted):
// per job without the chain ("bare_cpu_µs/job"), the extra per job with it
// ("cpu_µs/job") and the extra in percent ("cpu_overhead_%"). CPU time is
// steadier than wall time on a shared machine. ns/op is the drain time of
// one iteration. Handlers:
//
//   - noop returns at once: the worst case, all the cost is the runtime's;
//   - redis makes one Redis round trip (INCR), like a handler that reads or
//     writes one record;
//   - sleep1ms sleeps 1 ms, like a handler that calls a service.
//
// Use -benchtime 10x or more for the e2e benchmarks; see the README (Cost).
func BenchmarkChain(b *testing.B) {
	obs := newBenchObs(b)
	noop := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
	headers := map[string]string{}
	middleware.ProducerHook(obs.sampled)(obs.producer, headers)
	msg := &streamq.Message{ID: "1712345678901-0", Queue: "orders", Group: "workers", Payload: []byte(`{"order":42}`),
		Headers: headers, EnqueuedAt: time.Now(), Attempt: 1}

	one := func(name string, mw streamq.Middleware) benchChain {
		return benchChain{name, func(*testing.B, *streamq.Queue) []streamq.Middleware { return []streamq.Middleware{mw} }}
	}
	single := []benchChain{
		one("recover", middleware.Recover()),
		one("timeout", middleware.Timeout(time.Minute)),
		one("logging", middleware.Logging(obs.quiet, nil)),
		one("logging-disabled", middleware.Logging(obs.silent, nil)),
		one("metrics-only", obs.metrics.Middleware()),
		one("tracing-unsampled", middleware.Tracing(obs.unsampled)),
		one("tracing-unsampled-nostart", middleware.Tracing(obs.unsampledLate)),
		one("tracing-sampled", middleware.Tracing(obs.sampled)),
		one("tracing-sampled-nostart", middleware.Tracing(obs.sampledLate)),
		one("tracing-noop-provider", middleware.Tracing(obs.noop)),
	}
	for _, c := range append(single, obs.chains()...) {
		b.Run("handler/"+c.name, func(b *testing.B) {
			h := withoutRedis(b, c, noop)
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if err := h.Handle(ctx, msg); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu0)
		})
	}

	// The chains again, called by 64 goroutines at once (32 per P on 2
	// cores), as a consumer at concurrency 64 calls them: shared state
	// (the caches of queues, the counters, the SDK's instruments) is
	// contended here, not in handler/.
	for _, c := range obs.chains() {
		b.Run("parallel/"+c.name, func(b *testing.B) {
			h := withoutRedis(b, c, noop)
			b.ReportAllocs()
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				m := *msg // each goroutine its own message, as in a consumer
				for pb.Next() {
					if err := h.Handle(ctx, &m); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportCPU(b, cpu0)
		})
	}

	handlers := []struct {
		name string
		jobs int // per drain: enough for a few hundred ms
		h    func(*rig) streamq.Handler
	}{
		{"noop", 5000, func(*rig) streamq.Handler { return noop }},
		{"redis", 5000, func(r *rig) streamq.Handler {
			key := core.Of(r.q).Keys.Part("bench-counter")
			return streamq.HandlerFunc(func(ctx context.Context, _ *streamq.Message) error {
				return core.Of(r.q).RDB.Incr(ctx, key).Err()
			})
		}},
		{"sleep1ms", 3000, func(*rig) streamq.Handler {
			return streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
				time.Sleep(time.Millisecond)
				return nil
			})
		}},
	}
	for _, h := range handlers {
		for _, c := range obs.chains() {
			if c.name == "bare" {
				continue // the baseline of every other chain
			}
			b.Run("e2e/"+h.name+"/"+c.name, func(b *testing.B) {
				jobs := h.jobs
				bare, full := newRig(b, obs), newRig(b, obs)
				bare.h, full.h = h.h(bare), h.h(full)
				full.mws = c.chain(b, full.q)
				var tb, tf, cb, cf time.Duration
				ratios := make([]float64, 0, b.N)
				for i := range b.N {
					// Alternate the order so that drift (a warming cache, a
					// busy machine) does not favour one side.
					var wb, wf, xb, xf time.Duration
					if i%2 == 0 {
						wb, xb = bare.drain(b, jobs)
						wf, xf = full.drain(b, jobs)
					} else {
						wf, xf = full.drain(b, jobs)
						wb, xb = bare.drain(b, jobs)
					}
					tb, tf, cb, cf = tb+wb, tf+wf, cb+xb, cf+xf
					ratios = append(ratios, wf.Seconds()/wb.Seconds())
				}
				// The median of the pairs' ratios resists a burst of load
				// from other processes that hits one pair.
				slices.Sort(ratios)
				ratio := ratios[len(ratios)/2]
				if len(ratios)%2 == 0 {
					ratio = (ratio + ratios[len(ratios)/2-1]) / 2
				}
				b.ReportMetric(ratio, "ratio")
				b.ReportMetric((1-1/ratio)*100, "overhead_%")
				if cb > 0 {
					b.ReportMetric(cb.Seconds()*1e6/float64(b.N*jobs), "bare_cpu_µs/job")
					b.ReportMetric(float64(cf-cb)/float64(b.N*jobs)/1e3, "cpu_µs/job")
					b.ReportMetric((cf.Seconds()/cb.Seconds()-1)*100, "cpu_overhead_%")
				}
				b.ReportMetric(float64(b.N*jobs)/tb.Seconds(), "bare_jobs/s")
				b.ReportMetric(float64(b.N*jobs)/tf.Seconds(), "chain_jobs/s")
			})
		}
	}
}

// withoutRedis returns the chain c around h, or skips b when c needs Redis.
func withoutRedis(b *testing.B, c benchChain, h streamq.Handler) streamq.Handler {
	b.Helper()
	mws := c.chain(b, nil)
	if mws == nil && c.name != "bare" {
		b.Skip("end-to-end only")
	}
	return streamq.Chain(h, mws...)
}

// reportCPU reports the CPU time of the process per op since cpu0.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	if cpu := cpuTime() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	}
}

// rig is a queue, a producer, a handler and a middleware chain for
// end-to-end runs.
type rig struct {
	q   *streamq.Queue
	p   *streamq.Producer
	h   streamq.Handler
	mws []streamq.Middleware
	obs *benchObs
}

func newRig(b *testing.B, obs *benchObs) *rig {
	b.Helper()
	q := setup(b)
	b.Cleanup(func() { _ = core.Of(q).RDB.Del(context.Background(), core.Of(q).Keys.Part("bench-counter")).Err() })
	return &rig{q: q, p: newProducer(b, q, middleware.ProducerHook(obs.sampled)), obs: obs}
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
		if _, err := r.p.EnqueueBatch(r.obs.producer, batch); err != nil {
			b.Fatal(err)
		}
		done += len(batch)
	}
	var count atomic.Int64
	all := make(chan struct{})
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		err := r.h.Handle(ctx, msg)
		if count.Add(1) == int64(n) {
			close(all)
		}
		return err
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
	if st := c.Stats(); st.Failed != 0 {
		b.Fatalf("%d jobs failed", st.Failed)
	}
	b.StartTimer()
	return wall, cpu
}
