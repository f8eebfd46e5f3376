package middleware_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/middleware"
)

// exampleClient returns a client to the test Redis. In your code this is
// redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), or a
// redis.NewFailoverClient or redis.NewClusterClient.
func exampleClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: redistest.Addr()})
}

// exampleQueue returns the queue called name, with its keys under a key
// prefix of its own so that examples never share keys with other runs, and a
// function that deletes those keys. In your code this is
// streamq.NewQueue(rdb, name, cfg).
func exampleQueue(rdb *redis.Client, name string, cfg *streamq.QueueConfig) (*streamq.Queue, func()) {
	var c streamq.QueueConfig
	if cfg != nil {
		c = *cfg
	}
	c.KeyPrefix = "example-" + rand.Text()[:8]
	q, err := streamq.NewQueue(rdb, name, &c)
	if err != nil {
		panic(err)
	}
	return q, func() {
		ctx := context.Background()
		keys, err := rdb.Keys(ctx, c.KeyPrefix+":*").Result()
		if err == nil && len(keys) > 0 {
			err = rdb.Del(ctx, keys...).Err()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "example cleanup:", err)
		}
	}
}

// runUntil runs consumer until done reports true for its statistics, then
// stops it and waits for Run to return. A service runs its consumers until
// SIGTERM instead.
func runUntil(consumer *streamq.Consumer, done func(streamq.ConsumerStats) bool) {
	ctx, stop := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- consumer.Run(ctx) }()
	for !done(consumer.Stats()) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-errc; err != nil {
		panic(err)
	}
}

// counters returns the int64 sums in rm as "name{attributes} value" lines,
// sorted, leaving out the queue name attribute that every point has.
func counters(rm metricdata.ResourceMetrics) []string {
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				var attrs []string
				for _, kv := range p.Attributes.ToSlice() {
					if kv.Key != "messaging.destination.name" {
						attrs = append(attrs, string(kv.Key)+"="+kv.Value.String())
					}
				}
				name := m.Name
				if len(attrs) > 0 {
					name += "{" + strings.Join(attrs, ",") + "}"
				}
				lines = append(lines, fmt.Sprintf("%s %d", name, p.Value))
			}
		}
	}
	slices.Sort(lines)
	return lines
}

// Example wires a producer and a consumer with the recommended middleware:
// tracing, metrics and logging. To show what they record, it keeps spans in
// memory and reads the metrics with a manual reader; a service exports them
// with OTLP or Prometheus instead (see the README, and
// ExampleNewMetrics_prometheus).
func Example() {
	ctx := context.Background()
	rdb := exampleClient()
	defer rdb.Close()
	logger := slog.New(slog.DiscardHandler) // your logger, e.g. slog.Default()

	// Tracing: a tracer provider and the W3C propagators, the same on both
	// sides. A service adds its exporter with sdktrace.WithBatcher.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(ctx)
	tracing := &middleware.TracingConfig{
		TracerProvider: tp,
		Propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}

	// Metrics: a meter provider with a reader (here a manual one).
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	metrics, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp})
	if err != nil {
		panic(err)
	}
	defer metrics.Close()

	q, cleanup := exampleQueue(rdb, "emails", &streamq.QueueConfig{Group: "mailers"})
	defer cleanup()

	// The producer runs each Enqueue in a "send" span and writes its context
	// into the job; it counts the jobs it sent.
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		panic(err)
	}
	producer, err := middleware.NewProducer(p, &middleware.SendConfig{Tracing: tracing, Metrics: metrics})
	if err != nil {
		panic(err)
	}
	reqCtx, request := tp.Tracer("web").Start(ctx, "POST /signup")
	for _, to := range []string{"ada@example.com", "nobody@invalid"} {
		if _, err := producer.Enqueue(reqCtx, []byte(to)); err != nil {
			panic(err)
		}
	}
	request.End()

	sendMail := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		if strings.HasSuffix(string(msg.Payload), "@invalid") {
			return streamq.Permanent(errors.New("no such domain"))
		}
		return nil
	})
	consumer, err := streamq.NewConsumer(q, sendMail, &streamq.ConsumerConfig{
		Middleware: middleware.Default(&middleware.DefaultConfig{
			Logger:  logger,
			Tracing: tracing,
			Metrics: metrics,
		}),
		OnEvent: metrics.OnEvent, // retries, postponements, dead letters
		Logger:  logger,
	})
	if err != nil {
		panic(err)
	}
	runUntil(consumer, func(st streamq.ConsumerStats) bool { return st.Processed+st.DeadLettered == 2 })

	// One producer span per Enqueue and one consumer span per job, all in
	// the trace of the request; the consumer spans link to the producer
	// spans. The producer spans first, then the successful job's.
	ended := spans.Ended()
	rank := func(s sdktrace.ReadOnlySpan) int { return 10*int(s.SpanKind()) + int(s.Status().Code) }
	slices.SortStableFunc(ended, func(a, b sdktrace.ReadOnlySpan) int { return rank(a) - rank(b) })
	var lines []string
	for _, s := range ended {
		if s.SpanKind() != trace.SpanKindConsumer && s.SpanKind() != trace.SpanKindProducer {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s span %q, status %s, in the request's trace: %t, links: %d",
			s.SpanKind(), s.Name(), s.Status().Code, s.SpanContext().TraceID() == request.SpanContext().TraceID(), len(s.Links())))
		if s.SpanKind() == trace.SpanKindConsumer && s.Status().Code == codes.Unset { // the successful job
			attrs := s.Attributes()
			slices.SortFunc(attrs, func(a, b attribute.KeyValue) int { return strings.Compare(string(a.Key), string(b.Key)) })
			for _, kv := range attrs {
				if kv.Key != "messaging.message.id" { // the stream entry ID, different every run
					lines = append(lines, fmt.Sprintf("  %s = %s", kv.Key, kv.Value.String()))
				}
			}
		}
	}
	for _, l := range lines {
		fmt.Println(l)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, l := range counters(rm) {
		fmt.Println(l)
	}
	// Output:
	// producer span "send emails", status Unset, in the request's trace: true, links: 0
	// producer span "send emails", status Unset, in the request's trace: true, links: 0
	// consumer span "process emails", status Unset, in the request's trace: true, links: 1
	//   messaging.consumer.group.name = mailers
	//   messaging.destination.name = emails
	//   messaging.operation.name = process
	//   messaging.operation.type = process
	//   messaging.system = streamq
	//   streamq.job.attempt = 1
	// consumer span "process emails", status Error, in the request's trace: true, links: 1
	// messaging.client.consumed.messages{messaging.consumer.group.name=mailers,messaging.operation.name=process,messaging.system=streamq} 2
	// messaging.client.sent.messages{messaging.operation.name=send,messaging.system=streamq} 2
	// streamq.jobs.dead_lettered{streamq.dead_letter.reason=permanent} 1
	// streamq.jobs.failed{error.type=permanent} 1
	// streamq.jobs.in_flight 0
	// streamq.jobs.processed 1
}

// ExampleNewMetrics_prometheus exports the metrics through the OpenTelemetry
// Prometheus exporter, including the queue gauges read from Redis at every
// scrape. A service serves promhttp.HandlerFor(reg, ...) on /metrics; here
// one scrape is printed, without labels.
func ExampleNewMetrics_prometheus() {
	ctx := context.Background()
	rdb := exampleClient()
	defer rdb.Close()
	q, cleanup := exampleQueue(rdb, "reports", nil)
	defer cleanup()

	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		panic(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(ctx)
	metrics, err := middleware.NewMetrics(&middleware.MetricsConfig{
		MeterProvider: mp,
		Queues:        []*streamq.Queue{q}, // length, pending, lag, delayed, dead letters
	})
	if err != nil {
		panic(err)
	}
	defer metrics.Close()

	// Three jobs waiting for a consumer group that has read none yet.
	if err := q.Setup(ctx); err != nil {
		panic(err)
	}
	producer, err := streamq.NewProducer(q, nil)
	if err != nil {
		panic(err)
	}
	for range 3 {
		if _, err := producer.Enqueue(ctx, []byte("monthly")); err != nil {
			panic(err)
		}
	}

	handler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) // http.Handle("/metrics", handler)
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "streamq_queue_") {
			name, _, _ := strings.Cut(line, "{")
			value := line[strings.LastIndexByte(line, ' ')+1:]
			if strings.HasPrefix(name, "streamq_queue_oldest_waiting") {
				if v, err := strconv.ParseFloat(value, 64); err == nil && v > 0 {
					value = "(age of the oldest of the 3 waiting jobs)"
				}
			}
			fmt.Println(name, value)
		}
	}
	// Output:
	// streamq_queue_dead_letters 0
	// streamq_queue_delayed 0
	// streamq_queue_lag 3
	// streamq_queue_length 3
	// streamq_queue_oldest_waiting_seconds (age of the oldest of the 3 waiting jobs)
	// streamq_queue_pending 0
	// streamq_queue_stream_entries 3
	// streamq_queue_waiting 3
}

// ExampleLogging shows the record written for a failed job. The handler is
// called directly here; in a consumer, put the middleware in
// ConsumerConfig.Middleware (see [Default]).
func ExampleLogging() {
	// The time, duration and trace keys change every run: leave them out.
	volatile := []string{slog.TimeKey, "duration", "trace_id", "span_id"}
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if slices.Contains(volatile, a.Key) {
				return slog.Attr{}
			}
			return a
		},
	}))
	charge := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		return errors.New("card declined")
	})
	h := streamq.Chain(charge, middleware.Logging(logger, nil))
	_ = h.Handle(context.Background(), &streamq.Message{
		ID: "1712345678901-0", Queue: "payments", Payload: []byte(`{"card":"4111…"}`), Attempt: 1,
	})
	// Output:
	// level=ERROR msg="streamq: job failed" queue=payments msg_id=1712345678901-0 attempt=1 error="card declined" error_type=_OTHER
}

// ExampleProducerHook propagates trace context with the OpenTelemetry
// globals: set the global propagator once at start-up, and ProducerHook and
// Tracing use it when their config leaves Propagator nil.
func ExampleProducerHook() {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))

	ctx := context.Background()
	rdb := exampleClient()
	defer rdb.Close()
	q, cleanup := exampleQueue(rdb, "reports", nil)
	defer cleanup()
	tp := sdktrace.NewTracerProvider() // or the global one: TracingConfig.TracerProvider nil
	defer tp.Shutdown(ctx)

	producer, err := streamq.NewProducer(q, &streamq.ProducerConfig{
		Hooks: []streamq.EnqueueHook{middleware.ProducerHook(nil)},
	})
	if err != nil {
		panic(err)
	}
	reqCtx, request := tp.Tracer("web").Start(ctx, "GET /report")
	if _, err := producer.Enqueue(reqCtx, []byte("weekly")); err != nil {
		panic(err)
	}
	request.End()

	report := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		fmt.Println("headers:", slices.Sorted(func(yield func(string) bool) {
			for k := range msg.Headers {
				if !yield(k) {
					return
				}
			}
		}))
		fmt.Println("same trace as the request:", trace.SpanContextFromContext(ctx).TraceID() == request.SpanContext().TraceID())
		return nil
	})
	consumer, err := streamq.NewConsumer(q, report, &streamq.ConsumerConfig{
		Middleware: []streamq.Middleware{middleware.Tracing(&middleware.TracingConfig{TracerProvider: tp})},
	})
	if err != nil {
		panic(err)
	}
	runUntil(consumer, func(st streamq.ConsumerStats) bool { return st.Processed == 1 })
	// Output:
	// headers: [traceparent]
	// same trace as the request: true
}

// ExampleNewProducer enqueues through a Producer: each call runs in a
// PRODUCER span "send <queue>" whose context every job of the call carries,
// and the consumer's "process <queue>" span of each job links to it (and is
// its child). NewPriorityQueue does the same for priority.Queue.Push.
func ExampleNewProducer() {
	ctx := context.Background()
	rdb := exampleClient()
	defer rdb.Close()
	q, cleanup := exampleQueue(rdb, "invoices", nil)
	defer cleanup()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(ctx)
	tracing := &middleware.TracingConfig{TracerProvider: tp, Propagator: propagation.TraceContext{}}

	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		panic(err)
	}
	producer, err := middleware.NewProducer(p, &middleware.SendConfig{Tracing: tracing})
	if err != nil {
		panic(err)
	}
	if _, err := producer.EnqueueBatch(ctx, []streamq.Job{{Payload: []byte("42")}, {Payload: []byte("43")}}); err != nil {
		panic(err)
	}

	consumer, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }),
		&streamq.ConsumerConfig{Middleware: []streamq.Middleware{middleware.Tracing(tracing)}})
	if err != nil {
		panic(err)
	}
	runUntil(consumer, func(st streamq.ConsumerStats) bool { return st.Processed == 2 })

	var send trace.SpanContext
	for _, s := range spans.Ended() { // the send span ended first
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			send = s.SpanContext()
			var count attribute.Value
			for _, kv := range s.Attributes() {
				if kv.Key == "messaging.batch.message_count" {
					count = kv.Value
				}
			}
			fmt.Printf("%s %q, messaging.batch.message_count = %s\n", s.SpanKind(), s.Name(), count.String())
		case trace.SpanKindConsumer:
			links := s.Links()
			fmt.Printf("%s %q, links to the send span: %t\n", s.SpanKind(), s.Name(),
				len(links) == 1 && links[0].SpanContext.SpanID() == send.SpanID() && links[0].SpanContext.TraceID() == send.TraceID())
		}
	}
	// Output:
	// producer "send invoices", messaging.batch.message_count = 2
	// consumer "process invoices", links to the send span: true
	// consumer "process invoices", links to the send span: true
}

// ExampleRateLimiter_Wait uses the shared limit outside a consumer, for
// example in a producer that must not call an API faster than the workers
// together are allowed to. In a consumer, [RateLimiter.Middleware] does this
// before each job, and a job that may not start within MaxWait is postponed.
func ExampleRateLimiter_Wait() {
	rdb := exampleClient()
	defer rdb.Close()
	q, cleanup := exampleQueue(rdb, "api-calls", nil)
	defer cleanup()
	limit, err := middleware.NewRateLimiter(q, middleware.RateLimitConfig{
		Rate:    1, // per second
		Burst:   2,
		MaxWait: 100 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		err := limit.Wait(ctx)
		var pe *streamq.PostponeError
		switch {
		case err == nil:
			fmt.Printf("call %d: go\n", i) // call the API
		case errors.As(err, &pe):
			fmt.Printf("call %d: rate limited, retry within 1.5s: %t\n", i, pe.Delay <= 1500*time.Millisecond)
		default:
			panic(err)
		}
	}
	// Output:
	// call 1: go
	// call 2: go
	// call 3: rate limited, retry within 1.5s: true
}
