package middleware_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/middleware"
)

// TestMetrics_Kind: job measurements carry the kind of typed jobs, and
// untyped jobs have no kind attribute.
func TestMetrics_Kind(t *testing.T) {
	t.Parallel()
	reader, m := metricsSetup(t)
	ctx := context.Background()
	h := m.Middleware()(streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		if string(msg.Payload) == "fail" {
			return errors.New("boom")
		}
		return nil
	}))
	for _, j := range []struct{ kind, payload string }{
		{"email.send", "ok"}, {"email.send", "ok"}, {"email.send", "fail"}, {"image.resize", "ok"}, {"", "ok"},
	} {
		_ = h.Handle(ctx, &streamq.Message{Queue: "orders", Kind: j.kind, Payload: []byte(j.payload), Attempt: 1})
	}
	m.OnEvent(ctx, streamq.Event{Kind: streamq.EventDeadLettered, Queue: "orders", Reason: streamq.ReasonUnknownKind,
		Message: &streamq.Message{Queue: "orders", Kind: "video.encode"}})
	s := collect(t, reader)
	queue := attribute.String("messaging.destination.name", "orders")
	for _, c := range []struct {
		name string
		kind string
		want int64
	}{
		{middleware.MetricProcessed, "email.send", 2},
		{middleware.MetricFailed, "email.send", 1},
		{middleware.MetricProcessed, "image.resize", 1},
		{middleware.MetricDeadLettered, "video.encode", 1},
	} {
		if got := s.value(c.name, queue, middleware.AttrKind.String(c.kind)); got != c.want {
			t.Errorf("%s of kind %s = %d, want %d", c.name, c.kind, got, c.want)
		}
	}
	if got := s.value(middleware.MetricProcessed, queue); got != 4 {
		t.Errorf("processed in all = %d, want 4", got)
	}
	untyped := 0
	for _, p := range s.points(middleware.MetricProcessed) {
		if _, ok := p.Attributes.Value(middleware.AttrKind); !ok {
			untyped++
			if p.Value != 1 {
				t.Errorf("untyped processed = %d, want 1", p.Value)
			}
		}
	}
	if untyped != 1 {
		t.Errorf("%d processed series without a kind, want 1", untyped)
	}
	if got := s.count(middleware.MetricDuration, middleware.AttrKind.String("email.send")); got != 3 {
		t.Errorf("durations of email.send = %d, want 3", got)
	}
}
