package priority_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
)

// drainOrder runs a worker with concurrency 1 until it has handled n jobs and
// returns their payloads in the order they ran.
func drainOrder(t *testing.T, e *env, n int, cfg priority.WorkerConfig) []string {
	t.Helper()
	ch := make(chan *streamq.Message, n)
	cfg.Concurrency = 1
	w := e.newWorker(t, recorder(ch), cfg)
	stop := run(t, w)
	order := make([]string, 0, n)
	for range n {
		order = append(order, string(recv(t, ch, "a job to run").Payload))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	return order
}

func TestQueue_Push_PriorityThenFIFO(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	// Payload i is the index into prios.
	e.push(t, 1, 5, 1, 5, 3, priority.MaxPriority, priority.MinPriority, 0, priority.MaxPriority, priority.MinPriority, -1)
	got := strings.Join(drainOrder(t, e, 11, priority.WorkerConfig{}), " ")
	want := "5 8 1 3 4 0 2 7 10 6 9"
	if got != want {
		t.Errorf("order %q, want %q (higher priority first, FIFO among equal priorities)", got, want)
	}
	e.waitStats(t, priority.Stats{})
}

func TestQueue_LowerFirst(t *testing.T) {
	t.Parallel()
	e := setup(t, &priority.QueueConfig{LowerFirst: true})
	e.push(t, 1, 5, 1, 5, 3, priority.MaxPriority, priority.MinPriority, 0)
	got := strings.Join(drainOrder(t, e, 8, priority.WorkerConfig{}), " ")
	if want := "6 7 0 2 4 1 3 5"; got != want {
		t.Errorf("order %q, want %q (lower priority first, FIFO among equal priorities)", got, want)
	}
}

func TestQueue_Push_InvalidPriority(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	for _, p := range []int{priority.MaxPriority + 1, priority.MinPriority - 1} {
		_, err := e.pq.PushBatch(context.Background(), []priority.Job{{Priority: 1}, {Priority: p}})
		if !errors.Is(err, priority.ErrInvalidPriority) {
			t.Errorf("PushBatch with priority %d: error %v, want ErrInvalidPriority", p, err)
		}
		if _, err := e.pq.Push(context.Background(), priority.Job{Priority: p}); !errors.Is(err, priority.ErrInvalidPriority) {
			t.Errorf("Push with priority %d: error %v, want ErrInvalidPriority", p, err)
		}
	}
	if s := e.stats(t); s != (priority.Stats{}) {
		t.Errorf("stats %+v after refused pushes, want nothing pushed", s)
	}
}

func TestQueue_Push_HeadersAndHooks(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	hook := func(_ context.Context, h map[string]string) { h["traceparent"] = "00-abc-def-01" }
	e := setupClient(t, rdb, &priority.QueueConfig{Hooks: []streamq.EnqueueHook{hook}})
	id, err := e.pq.Push(context.Background(), priority.Job{
		Priority: 7,
		Payload:  []byte("reset"),
		Headers:  map[string]string{"user": "ada", priority.HeaderPriority: "99"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *streamq.Message, 1)
	run(t, e.newWorker(t, recorder(ch), priority.WorkerConfig{}))
	msg := recv(t, ch, "the job")
	p, ok := priority.Of(msg)
	if msg.ID != id || string(msg.Payload) != "reset" || msg.Headers["user"] != "ada" ||
		msg.Headers["traceparent"] != "00-abc-def-01" || !ok || p != 7 || msg.Queue != e.q.Name() ||
		msg.Attempt != 1 || msg.EnqueuedAt.IsZero() {
		t.Errorf("message %+v (priority %d, %v), want ID %s, payload reset, headers user, traceparent and priority 7, attempt 1", msg, p, ok, id)
	}
}

func TestNewQueue_Validation(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	q, err := streamq.NewQueue(rdb, redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		q    *streamq.Queue
		cfg  *priority.QueueConfig
		want string // in the error
	}{
		{"nil queue", nil, nil, "streamq.NewQueue"},
		{"default priority too high", q, &priority.QueueConfig{DefaultPriority: priority.MaxPriority + 1}, "use a priority from"},
		{"default priority too low", q, &priority.QueueConfig{DefaultPriority: priority.MinPriority - 1}, "use a priority from"},
		{"nil hook", q, &priority.QueueConfig{Hooks: []streamq.EnqueueHook{nil}}, "priority.QueueConfig.Hooks[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := priority.NewQueue(tt.q, tt.cfg)
			var ce *streamq.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want a *streamq.ConfigError mentioning %q", err, tt.want)
			}
		})
	}
	if _, err := priority.NewQueue(q, nil); err != nil {
		t.Errorf("nil config: %v", err)
	}
}

func TestOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header string
		set    bool
		want   int
		ok     bool
	}{
		{"", false, 0, false},
		{"12", true, 12, true},
		{"-2147483648", true, priority.MinPriority, true},
		{"2147483647", true, priority.MaxPriority, true},
		{"2147483648", true, 0, false},
		{"high", true, 0, false},
		{"1.5", true, 0, false},
	}
	for _, tt := range tests {
		msg := &streamq.Message{Headers: map[string]string{}}
		if tt.set {
			msg.Headers[priority.HeaderPriority] = tt.header
		}
		if p, ok := priority.Of(msg); p != tt.want || ok != tt.ok {
			t.Errorf("Of(header %q) = %d, %v; want %d, %v", tt.header, p, ok, tt.want, tt.ok)
		}
	}
	if _, ok := priority.Of(nil); ok {
		t.Error("Of(nil) reports a priority")
	}
}
