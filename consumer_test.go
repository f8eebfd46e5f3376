package streamq

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/wire"
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
		{"control interval below 100ms", ConsumerConfig{ControlInterval: 50 * time.Millisecond}, "ConsumerConfig.ControlInterval"},
		{"negative control interval", ConsumerConfig{ControlInterval: -1}, "ConsumerConfig.ControlInterval"},
		{"negative result retention", ConsumerConfig{ResultRetention: -time.Second}, "ConsumerConfig.ResultRetention"},
		{"negative max result bytes", ConsumerConfig{MaxResultBytes: -2}, "ConsumerConfig.MaxResultBytes"},
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
	if got.ControlInterval != DefaultControlInterval || got.ResultRetention != DefaultResultRetention || got.MaxResultBytes != DefaultMaxResultBytes {
		t.Errorf("control and result defaults not applied: %+v", got)
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
	err := callHandler(context.Background(), HandlerFunc(func(context.Context, *Message) error {
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

func TestExec_Classify(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name string
		err  error
		want engine.Outcome
	}{
		{"plain error", boom, engine.Outcome{Kind: engine.Fail}},
		{"panic", &PanicError{Value: "x"}, engine.Outcome{Kind: engine.Fail}},
		{"permanent", Permanent(boom), engine.Outcome{Kind: engine.Permanent}},
		{"wrapped permanent", errors.Join(boom, Permanent(boom)), engine.Outcome{Kind: engine.Permanent}},
		{"retry after", RetryAfter(7*time.Second, boom), engine.Outcome{Kind: engine.RetryAfter, Delay: 7 * time.Second}},
		{"postpone", Postpone(time.Second, nil), engine.Outcome{Kind: engine.Postpone, Delay: time.Second}},
		{"postpone wins over permanent", Postpone(time.Second, Permanent(boom)), engine.Outcome{Kind: engine.Postpone, Delay: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := (exec{}).Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %+v, want %+v", tt.err, got, tt.want)
			}
		})
	}
}

func TestExec_Message(t *testing.T) {
	t.Parallel()
	wj := wire.Job{Payload: []byte("p"), EnqMillis: 1_700_000_000_000, Key: "k", KeyToken: "t", FirstFail: 1_700_000_001_000, LastError: "e", Attempt: 2}
	run := engine.Run{Queue: "q", ID: "9-0", Job: wj, Headers: map[string]string{"h": "v"}, Attempt: 3}
	var got *Message
	err := exec{h: HandlerFunc(func(_ context.Context, m *Message) error { got = m; return nil }), group: "g"}.Call(context.Background(), run, new(Message))
	if err != nil {
		t.Fatal(err)
	}
	want := &Message{ID: "9-0", EntryID: "9-0", JobID: "9-0", Queue: "q", Group: "g", Payload: []byte("p"), Headers: map[string]string{"h": "v"},
		EnqueuedAt: time.UnixMilli(1_700_000_000_000), Attempt: 3, Key: "k", FirstFailedAt: time.UnixMilli(1_700_000_001_000), LastError: "e"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("message\n got %+v\nwant %+v", got, want)
	}
	run.Job.JobID = "5-0" // a retried copy carries its first copy's ID
	if err := (exec{h: HandlerFunc(func(_ context.Context, m *Message) error { got = m; return nil })}).Call(context.Background(), run, new(Message)); err != nil {
		t.Fatal(err)
	}
	if got.ID != "5-0" || got.EntryID != "9-0" || got.JobID != "5-0" {
		t.Errorf("retried copy: ID %q, EntryID %q, JobID %q; want 5-0, 9-0 and 5-0", got.ID, got.EntryID, got.JobID)
	}
}
