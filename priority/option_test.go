package priority_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
)

// TestWithPriority_RefusedWithoutPrioritySet: a stream producer whose queue
// has no priority set in the process refuses the option and writes nothing;
// out-of-range priorities fail at the option.
func TestWithPriority_RefusedWithoutPrioritySet(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	q, err := streamq.NewQueue(rdb, redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueueKeys(q) })
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = p.Enqueue(ctx, []byte("x"), priority.WithPriority(3))
	var ce *streamq.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "priority.NewQueue") {
		t.Fatalf("WithPriority without a priority set: err = %v, want a ConfigError naming priority.NewQueue", err)
	}
	if n, err := rdb.XLen(ctx, core.Of(q).Keys.Stream).Result(); err != nil || n != 0 {
		t.Fatalf("stream holds %d entries (%v) after a refused enqueue", n, err)
	}

	if _, err := priority.NewQueue(q, nil); err != nil {
		t.Fatal(err)
	}
	for _, prio := range []int{priority.MaxPriority + 1, priority.MinPriority - 1} {
		if _, err := p.Enqueue(ctx, []byte("x"), priority.WithPriority(prio)); !errors.Is(err, priority.ErrInvalidPriority) {
			t.Errorf("WithPriority(%d): err = %v, want ErrInvalidPriority", prio, err)
		}
	}
	if _, err := p.Enqueue(ctx, []byte("x"), priority.WithPriority(7)); err != nil {
		t.Fatalf("with a priority set: %v", err)
	}
	xs, err := rdb.XRange(ctx, core.Of(q).Keys.Stream, "-", "+").Result()
	if err != nil || len(xs) != 1 || !strings.Contains(xs[0].Values["headers"].(string), `"streamq-priority":"7"`) {
		t.Fatalf("stream = %v, %v: want one job with the priority header", xs, err)
	}
}

// TestForward_KeepsKindAndOptions: a typed job forwarded into the priority
// set keeps its kind, tags and per-job options, and runs on a worker's Mux.
func TestForward_KeepsKindAndOptions(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	if _, err := e.p.Enqueue(ctx, []byte("x"), streamq.WithKind("report.build"), streamq.Tags("t1"), streamq.MaxAttempts(2), priority.WithPriority(4)); err != nil {
		t.Fatal(err)
	}
	_, stop := runConsumer(t, e.q, priority.Forward(e.pq), consumerConfig())
	defer stop()
	got := make(chan *streamq.Message, 1)
	m := streamq.NewMux()
	m.Route("report.build", recorder(got))
	run(t, e.newWorker(t, m, priority.WorkerConfig{}))
	msg := recv(t, got, "the forwarded job")
	if msg.Kind != "report.build" || len(msg.Tags) != 1 || msg.Tags[0] != "t1" {
		t.Errorf("forwarded job: kind %q, tags %v", msg.Kind, msg.Tags)
	}
	if p, ok := priority.Of(msg); !ok || p != 4 {
		t.Errorf("priority = %d, %v", p, ok)
	}
}
