package priority_test

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
)

// waitTimeout bounds every wait of a test for something that normally takes
// milliseconds.
const waitTimeout = 30 * time.Second

// testLogger shows errors only: the tests provoke retries, dead letters and
// lost leases on purpose.
var testLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// env is one test's queue on the shared test Redis.
type env struct {
	rdb *redis.Client
	q   *streamq.Queue
	pq  *priority.Queue
	p   *streamq.Producer
}

// setup returns a fresh queue (its name from the test's), its priority set
// with cfg (may be nil) and a producer, and deletes the queue's keys when the
// test ends.
func setup(t testing.TB, cfg *priority.QueueConfig) *env {
	t.Helper()
	return setupClient(t, redistest.NewClient(t), cfg)
}

// setupClient is setup with a client of the test's choosing.
func setupClient(t testing.TB, rdb *redis.Client, cfg *priority.QueueConfig) *env {
	t.Helper()
	q, err := streamq.NewQueue(rdb, redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueueKeys(q) })
	pq, err := priority.NewQueue(q, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &env{rdb: rdb, q: q, pq: pq, p: p}
}

// deleteQueueKeys deletes every key of q (SCAN, bounded by the key count).
func deleteQueueKeys(q *streamq.Queue) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := core.Of(q).RDB
	iter := rdb.Scan(ctx, 0, core.Of(q).Keys.Part("*"), 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			rdb.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		rdb.Unlink(ctx, batch...)
	}
}

// workerConfig is a worker configuration for fast tests: quick retries and
// shutdown. Fields set in cfg win.
func workerConfig(cfg priority.WorkerConfig) *priority.WorkerConfig {
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = streamq.ExponentialBackoff(time.Millisecond, 10*time.Millisecond)
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger
	}
	return &cfg
}

// newWorker returns a worker on e's priority set.
func (e *env) newWorker(t testing.TB, h streamq.Handler, cfg priority.WorkerConfig) *priority.Worker {
	t.Helper()
	w, err := priority.NewWorker(e.pq, h, workerConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// run starts w.Run and returns a function that cancels it and returns Run's
// error; it fails the test if Run does not return within waitTimeout. The
// worker is stopped when the test ends in any case.
func run(t testing.TB, w *priority.Worker) (stop func() error) {
	t.Helper()
	return redistest.Background(t, "Worker.Run", waitTimeout, w.Run).Stop
}

// runConsumer starts a stream consumer of q with handler h, stopped when the
// test ends or when the returned function is called.
func runConsumer(t testing.TB, q *streamq.Queue, h streamq.Handler, cfg *streamq.ConsumerConfig) (*streamq.Consumer, func()) {
	t.Helper()
	c, err := streamq.NewConsumer(q, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "Consumer.Run", waitTimeout, c.Run)
	return c, func() { _ = r.Stop() } // an error fails the test at its end
}

// recv receives one value from ch or fails the test after waitTimeout.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		var zero T
		return zero
	}
}

// recorder is a handler that sends every message it handles on a channel.
func recorder(ch chan<- *streamq.Message) streamq.Handler {
	return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		select {
		case ch <- msg:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
}

// push pushes jobs with the given priorities, payloads "0", "1", ...
func (e *env) push(t testing.TB, prios ...int) []string {
	t.Helper()
	jobs := make([]priority.Job, len(prios))
	for i, p := range prios {
		jobs[i] = priority.Job{Priority: p, Payload: []byte(strconv.Itoa(i))}
	}
	ids, err := e.pq.PushBatch(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// stats returns the priority set's counters.
func (e *env) stats(t testing.TB) priority.Stats {
	t.Helper()
	s, err := e.pq.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitStats waits until the priority set's counters equal want.
func (e *env) waitStats(t testing.TB, want priority.Stats) {
	t.Helper()
	redistest.WaitFor(t, waitTimeout, "priority set counters "+stringify(want), func() bool {
		s, err := e.pq.Stats(context.Background())
		return err == nil && s == want
	})
}

func stringify(s priority.Stats) string {
	return "ready=" + strconv.FormatInt(s.Ready, 10) + " leased=" + strconv.FormatInt(s.Leased, 10) + " delayed=" + strconv.FormatInt(s.Delayed, 10)
}

// deadLetters returns every dead letter of q.
func deadLetters(t testing.TB, q *streamq.Queue) []streamq.DeadLetter {
	t.Helper()
	var all []streamq.DeadLetter
	cursor := ""
	for range 1000 {
		page, next, err := q.DeadLetters().List(context.Background(), cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		cursor = next
	}
	t.Fatal("more than 100,000 dead letters")
	return nil
}
