package middleware_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/middleware"
)

func TestDefault(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	if n := len(middleware.Default(&middleware.DefaultConfig{Logger: quiet})); n != 3 {
		t.Errorf("Default with the zero config has %d middleware, want 3 (Recover, Tracing, Logging)", n)
	}
	if n := len(middleware.Default(&middleware.DefaultConfig{Logger: quiet, NoTracing: true})); n != 2 {
		t.Errorf("Default without tracing has %d middleware, want 2", n)
	}
	m, err := middleware.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	q, err := streamq.NewQueue(redistest.NewClient(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := middleware.NewRateLimiter(q, middleware.RateLimitConfig{Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	full := middleware.Default(&middleware.DefaultConfig{Logger: quiet, Metrics: m, RateLimiter: l, Timeout: time.Second})
	if len(full) != 6 {
		t.Errorf("full Default has %d middleware, want 6", len(full))
	}
}

func TestDefault_Chain(t *testing.T) {
	t.Parallel()
	sr, _, tcfg := tracingSetup(t)
	buf := &syncBuffer{}
	mws := middleware.Default(&middleware.DefaultConfig{
		Logger:  jsonLogger(buf),
		Tracing: tcfg,
		Timeout: time.Minute,
	})
	h := streamq.Chain(streamq.HandlerFunc(func(ctx context.Context, _ *streamq.Message) error {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return errors.New("no span in the handler's context")
		}
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline in the handler's context")
		}
		panic("kaput")
	}), mws...)
	var pe *streamq.PanicError
	if err := h.Handle(context.Background(), &streamq.Message{ID: "1-0", Queue: "orders"}); !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a PanicError", err)
	}
	if spans := consumerSpans(sr); len(spans) != 1 {
		t.Errorf("%d consumer spans, want 1", len(spans))
	}
	if r := recordFor(records(t, buf), middleware.LogMsgFailed, "1-0"); r == nil || r["error_type"] != "panic" {
		t.Errorf("failure record = %v, want one with error_type panic", r)
	}
}
