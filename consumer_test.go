package streamq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

var noop = HandlerFunc(func(context.Context, *Message) error { return nil })

func TestNewConsumer_Validation(t *testing.T) {
	t.Parallel()
	q, err := NewQueue(offlineClient(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewConsumer(nil, noop, nil); err == nil {
		t.Error("nil queue accepted")
	}
	if _, err := NewConsumer(q, nil, nil); err == nil {
		t.Error("nil handler accepted")
	}
	tests := []struct {
		name  string
		cfg   ConsumerConfig
		field string
	}{
		{"negative concurrency", ConsumerConfig{Concurrency: -1}, "ConsumerConfig.Concurrency"},
		{"prune idle within two blocks", ConsumerConfig{Block: time.Second, PruneIdle: 2 * time.Second}, "ConsumerConfig.PruneIdle"},
		{"negative block", ConsumerConfig{Block: -time.Second}, "ConsumerConfig.Block"},
		{"block below 1ms", ConsumerConfig{Block: time.Microsecond}, "ConsumerConfig.Block"},
		{"negative shutdown", ConsumerConfig{ShutdownTimeout: -5}, "ConsumerConfig.ShutdownTimeout"},
		{"negative job timeout", ConsumerConfig{JobTimeout: -2}, "ConsumerConfig.JobTimeout"},
		{"tiny min idle", ConsumerConfig{MinIdle: time.Millisecond}, "ConsumerConfig.MinIdle"},
		{"negative reclaim", ConsumerConfig{ReclaimInterval: -2}, "ConsumerConfig.ReclaimInterval"},
		{"negative max deliveries", ConsumerConfig{MaxDeliveries: -1}, "ConsumerConfig.MaxDeliveries"},
		{"bad name", ConsumerConfig{Name: "a b"}, "ConsumerConfig.Name"},
		{"nil middleware", ConsumerConfig{Middleware: []Middleware{nil}}, "ConsumerConfig.Middleware[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewConsumer(q, noop, &tt.cfg)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("err = %v, want ConfigError for %s", err, tt.field)
			}
		})
	}
}

func TestNewConsumer_Defaults(t *testing.T) {
	t.Parallel()
	q, err := NewQueue(offlineClient(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ConsumerConfig{JobTimeout: -1, SchedulerInterval: -1, ReclaimInterval: -1}
	c, err := NewConsumer(q, noop, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "" || cfg.Concurrency != 0 {
		t.Errorf("NewConsumer changed the caller's config: %+v", cfg)
	}
	got := c.cfg
	if got.Concurrency != DefaultConcurrency || got.Block != DefaultBlock || got.MinIdle != DefaultMinIdle ||
		got.ShutdownTimeout != DefaultShutdownTimeout || got.MaxDeliveries != DefaultMaxDeliveries || got.Backoff == nil {
		t.Errorf("defaults not applied: %+v", got)
	}
	if got.JobTimeout != -1 || got.SchedulerInterval != -1 || got.ReclaimInterval != -1 {
		t.Errorf("-1 must disable, got %+v", got)
	}
	c2, err := NewConsumer(q, noop, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c2.cfg.ReclaimInterval != DefaultMinIdle/2 || c2.cfg.JobTimeout != DefaultJobTimeout || c2.cfg.PruneIdle != DefaultPruneIdle {
		t.Errorf("reclaim interval %s, job timeout %s", c2.cfg.ReclaimInterval, c2.cfg.JobTimeout)
	}
	if c.Name() == c2.Name() || !strings.Contains(c.Name(), "-") {
		t.Errorf("default names must be unique per consumer: %q %q", c.Name(), c2.Name())
	}
}

func TestChain_Order(t *testing.T) {
	t.Parallel()
	var order []string
	mw := func(name string) Middleware {
		return func(next Handler) Handler {
			return HandlerFunc(func(ctx context.Context, m *Message) error {
				order = append(order, name)
				return next.Handle(ctx, m)
			})
		}
	}
	h := Chain(HandlerFunc(func(context.Context, *Message) error {
		order = append(order, "handler")
		return nil
	}), mw("a"), mw("b"))
	if err := h.Handle(context.Background(), &Message{}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "a,b,handler" {
		t.Errorf("order = %v, want first middleware outermost", order)
	}
}

func TestSafeHandle_RecoversPanics(t *testing.T) {
	t.Parallel()
	err := CallHandler(context.Background(), HandlerFunc(func(context.Context, *Message) error {
		panic(errors.New("kaput"))
	}), &Message{})
	var pe *PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want *PanicError", err)
	}
	if !strings.Contains(string(pe.Stack), "TestSafeHandle_RecoversPanics") {
		t.Error("panic stack does not show where the handler panicked")
	}
	if pe.Unwrap() == nil || pe.Unwrap().Error() != "kaput" {
		t.Errorf("Unwrap = %v", pe.Unwrap())
	}
}

func TestErrorHelpers(t *testing.T) {
	t.Parallel()
	base := errors.New("base")
	p := Permanent(base)
	var pe *PermanentError
	if !errors.As(p, &pe) || !errors.Is(p, base) {
		t.Errorf("Permanent does not wrap: %v", p)
	}
	r := RetryAfter(3*time.Second, base)
	var re *RetryAfterError
	if !errors.As(r, &re) || re.Delay != 3*time.Second || !errors.Is(r, base) {
		t.Errorf("RetryAfter does not wrap: %v", r)
	}
	if EventDeadLettered.String() != "dead_lettered" || EventKind(99).String() != "EventKind(99)" {
		t.Error("EventKind strings")
	}
}

func TestMessage_Attempts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ attempt, deliveries, want int }{
		{0, 1, 1}, {0, 0, 1}, {2, 1, 3}, {0, 3, 3}, {4, 2, 6},
	} {
		m := &Message{Attempt: tc.attempt, Deliveries: tc.deliveries}
		if got := m.Attempts(); got != tc.want {
			t.Errorf("Attempt %d Deliveries %d: Attempts() = %d, want %d", tc.attempt, tc.deliveries, got, tc.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for attempt := 1; attempt <= 40; attempt++ {
		ceil := expDelay(DefaultBackoffBase, DefaultBackoffMax, attempt)
		if attempt <= 5 && ceil != DefaultBackoffBase<<(attempt-1) {
			t.Errorf("attempt %d: ceiling %s", attempt, ceil)
		}
		if ceil > DefaultBackoffMax {
			t.Errorf("attempt %d: ceiling %s above max", attempt, ceil)
		}
		for range 20 {
			if d := DefaultBackoff(attempt); d < 0 || d > ceil {
				t.Fatalf("attempt %d: delay %s outside [0, %s]", attempt, d, ceil)
			}
		}
	}
	b := ExponentialBackoff(10*time.Millisecond, 25*time.Millisecond)
	if d := b(10); d > 25*time.Millisecond {
		t.Errorf("custom backoff exceeded its max: %s", d)
	}
	if d := ExponentialBackoff(0, time.Second)(3); d != 0 {
		t.Errorf("zero base must give 0, got %s", d)
	}
}

func TestParseAutoClaim(t *testing.T) {
	t.Parallel()
	reply := []any{
		"5-0",
		[]any{
			[]any{"1-0", []any{"v", "1", "payload", "a"}},
			[]any{"2-0", nil}, // Redis 6.2 style deleted entry
		},
		[]any{"3-0", "4-0"},
	}
	next, msgs, deleted, err := parseAutoClaim(reply)
	if err != nil {
		t.Fatal(err)
	}
	if next != "5-0" || len(msgs) != 2 || msgs[0].Values["payload"] != "a" || msgs[1].Values != nil {
		t.Errorf("next %q msgs %+v", next, msgs)
	}
	if strings.Join(deleted, ",") != "3-0,4-0" {
		t.Errorf("deleted = %v", deleted)
	}
	if _, _, _, err := parseAutoClaim([]any{"0-0"}); err == nil {
		t.Error("short reply accepted")
	}
}

func TestLastAttemptAfterCrash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		attempt    string // "" for no attempt field
		crashed    bool   // the copy carries crashed=1 (handed back after crashes)
		deliveries int
		want       bool
	}{
		{"first delivery", "", false, 1, false},
		{"taken over, attempts left", "", false, 2, false},
		{"taken over, last attempt", "", false, 3, true},
		{"retried then taken over, last attempt", "1", false, 2, true},
		{"over the limit: dead-lettered, not run", "", false, 4, false},
		{"fresh read at the last attempt", "2", false, 1, false},
		{"handed back after crashes, last attempt", "2", true, 1, true},
		{"handed back after a crash, attempts left", "1", true, 1, false},
		{"handed back after crashes, taken over again", "2", true, 2, false},
		{"malformed attempt field", "x", false, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fields := map[string]any{"v": "1", "payload": "x"}
			if tt.attempt != "" {
				fields["attempt"] = tt.attempt
			}
			if tt.crashed {
				fields["crashed"] = "1"
			}
			if got := LastAttemptAfterCrash(fields, tt.deliveries, 3); got != tt.want {
				t.Errorf("LastAttemptAfterCrash(attempt=%q, deliveries=%d, 3) = %v, want %v", tt.attempt, tt.deliveries, got, tt.want)
			}
		})
	}
}
