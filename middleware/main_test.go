package middleware_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rediscontainer"
	"github.com/streamq/streamq/internal/redistest"
)

func TestMain(m *testing.M) {
	code := redistest.Run(m, rediscontainer.Start)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Timeouts of the end-to-end tests: generous, since they only bound a
// failure; passing tests finish as soon as the condition holds.
const (
	waitTimeout = 15 * time.Second
	stopTimeout = 10 * time.Second
)

// setup returns a fresh queue with a unique name on the test Redis. Its keys
// are deleted when the test ends.
func setup(t testing.TB) *streamq.Queue {
	t.Helper()
	return setupQueue(t, nil)
}

// setupQueue is setup with a queue configuration.
func setupQueue(t testing.TB, cfg *streamq.QueueConfig) *streamq.Queue {
	t.Helper()
	rdb := redistest.NewClient(t)
	q, err := streamq.NewQueue(rdb, redistest.Name(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys := []string{core.Of(q).Keys.Stream, core.Of(q).Keys.Dead, core.Of(q).Keys.Delayed, core.Of(q).Keys.Part("delayed:jobs"), core.Of(q).Keys.Part("ratelimit")}
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("delete test keys: %v", err)
		}
	})
	return q
}

// consumerConfig returns a configuration for fast tests: short blocking
// reads, short shutdown, quiet logs, and mws as middleware.
func consumerConfig(mws ...streamq.Middleware) *streamq.ConsumerConfig {
	return &streamq.ConsumerConfig{
		Block:             100 * time.Millisecond,
		ShutdownTimeout:   200 * time.Millisecond,
		SchedulerInterval: 10 * time.Millisecond,
		Middleware:        mws,
		Logger:            slog.New(slog.DiscardHandler),
	}
}

// runConsumer starts a consumer of q in the background. It is stopped, and
// its Run awaited, when the test ends.
func runConsumer(t testing.TB, q *streamq.Queue, h streamq.Handler, cfg *streamq.ConsumerConfig) *streamq.Consumer {
	t.Helper()
	c, err := streamq.NewConsumer(q, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "Consumer.Run", stopTimeout, c.Run)
	return c
}

// newProducer returns a producer of q with hooks.
func newProducer(t testing.TB, q *streamq.Queue, hooks ...streamq.EnqueueHook) *streamq.Producer {
	t.Helper()
	p, err := streamq.NewProducer(q, &streamq.ProducerConfig{Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func enqueue(t testing.TB, ctx context.Context, p *streamq.Producer, payload string) string {
	t.Helper()
	id, err := p.Enqueue(ctx, []byte(payload))
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return id
}

// syncBuffer is an io.Writer safe for the concurrent writes of handlers.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

var _ io.Writer = (*syncBuffer)(nil)

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
