package middleware_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/middleware"
)

// Example wires a producer and a consumer with tracing, Prometheus metrics,
// logging and a shared rate limit. It needs a Redis server, so it is
// compiled but not run.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))

	// Tracing: a tracer provider (add your exporter with
	// sdktrace.WithBatcher) and the W3C propagators, on both sides.
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(ctx)
	tracing := &middleware.TracingConfig{
		TracerProvider: tp,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}

	// Metrics: an OpenTelemetry meter provider exporting to Prometheus.
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(ctx)

	q, err := streamq.NewQueue(rdb, "emails", nil)
	if err != nil {
		panic(err)
	}
	metrics, err := middleware.NewMetrics(&middleware.MetricsConfig{
		MeterProvider: mp,
		Queues:        []*streamq.Queue{q}, // lag, pending, delayed, dead letters
	})
	if err != nil {
		panic(err)
	}
	defer metrics.Close()
	limit, err := middleware.NewRateLimiter(q, middleware.RateLimitConfig{Rate: 50, Burst: 10})
	if err != nil {
		panic(err)
	}

	// The producer injects the trace context of each Enqueue into the job.
	producer, err := streamq.NewProducer(q, &streamq.ProducerConfig{
		Hooks: []streamq.EnqueueHook{middleware.ProducerHook(tracing)},
	})
	if err != nil {
		panic(err)
	}
	if _, err := producer.Enqueue(ctx, []byte("ada@example.com")); err != nil {
		panic(err)
	}

	consumer, err := streamq.NewConsumer(q, streamq.HandlerFunc(sendMail), &streamq.ConsumerConfig{
		Middleware: middleware.Default(&middleware.DefaultConfig{
			Logger:      logger,
			Tracing:     tracing,
			Metrics:     metrics,
			RateLimiter: limit,
			Timeout:     30 * time.Second,
		}),
		OnEvent: metrics.OnEvent, // retries, dead letters, reclaims
		Logger:  logger,
	})
	if err != nil {
		panic(err)
	}

	srv := &http.Server{Addr: "127.0.0.1:9090", Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	runCtx, stop := context.WithTimeout(ctx, time.Minute) // a service runs until SIGTERM
	defer stop()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return consumer.Run(gctx) })
	g.Go(func() error {
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		return srv.Shutdown(context.WithoutCancel(gctx))
	})
	if err := g.Wait(); err != nil {
		logger.Error("worker stopped", "error", err)
	}
}

func sendMail(ctx context.Context, msg *streamq.Message) error { return nil }

// ExampleProducerHook propagates trace context with the OpenTelemetry
// globals: set the global propagator once at start-up, and ProducerHook and
// Tracing use it when their config leaves Propagator nil.
func ExampleProducerHook() {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, "reports", nil)
	if err != nil {
		panic(err)
	}
	producer, err := streamq.NewProducer(q, &streamq.ProducerConfig{
		Hooks: []streamq.EnqueueHook{middleware.ProducerHook(nil)},
	})
	if err != nil {
		panic(err)
	}
	_ = producer
	_ = middleware.Tracing(nil) // in ConsumerConfig.Middleware
}

// ExampleRateLimiter_Wait uses the shared limit outside a consumer, for
// example in a producer that must not call an API faster than the workers
// together are allowed to.
func ExampleRateLimiter_Wait() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, "api-calls", nil)
	if err != nil {
		panic(err)
	}
	limit, err := middleware.NewRateLimiter(q, middleware.RateLimitConfig{Rate: 5})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := limit.Wait(ctx); err != nil {
		var ra *streamq.RetryAfterError
		if errors.As(err, &ra) {
			slog.Info("over the limit", "retry_in", ra.Delay)
		}
		return
	}
	// call the API
}
