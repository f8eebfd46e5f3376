package writebehind_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/sqlite"
)

// downSink stands for a database that is down: it fails every write while
// down is set.
type downSink struct {
	writebehind.Sink
	down atomic.Bool
}

func (s *downSink) Write(ctx context.Context, changes []writebehind.Change) error {
	if s.down.Load() {
		return errors.New("database is down")
	}
	return s.Sink.Write(ctx, changes)
}

// Example_sinkDown shows what happens when the database stays down longer
// than the consumer retries a change: the change ends in the queue's
// dead-letter stream with the reason and the sink's error, the cache keeps
// the value, and requeueing the dead letter once the database is back
// persists it.
func Example_sinkDown() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "writebehind-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	q, err := streamq.NewQueue(rdb, fmt.Sprintf("users-%d", time.Now().UnixNano()), nil)
	if err != nil {
		panic(err)
	}
	defer deleteQueueKeys(q)
	if err := q.Setup(ctx); err != nil {
		panic(err)
	}
	db, err := sqlite.Open(filepath.Join(dir, "users.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	sqlSink, err := sqlite.NewSink(db, nil)
	if err != nil {
		panic(err)
	}
	if err := sqlSink.CreateSchema(ctx); err != nil {
		panic(err)
	}
	sink := &downSink{Sink: sqlSink}
	sink.down.Store(true)

	w, err := writebehind.NewWriter(q, nil)
	if err != nil {
		panic(err)
	}
	if _, err := w.Set(ctx, "user:1", []byte(`{"name":"Ada"}`)); err != nil {
		panic(err)
	}

	// A worker retries the change 3 times (quickly, for the example), then
	// dead-letters it.
	h, err := writebehind.NewHandler(sink, nil)
	if err != nil {
		panic(err)
	}
	dead := make(chan struct{})
	c, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{
		Concurrency:       1000,
		Block:             100 * time.Millisecond,
		MaxDeliveries:     3,
		Backoff:           streamq.ExponentialBackoff(10*time.Millisecond, 50*time.Millisecond),
		SchedulerInterval: 10 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		OnEvent: func(_ context.Context, e streamq.Event) {
			if e.Kind == streamq.EventDeadLettered {
				close(dead) // only one change, dead-lettered once
			}
		},
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	select {
	case <-dead:
	case <-time.After(10 * time.Second):
		panic("change not dead-lettered within 10s")
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	if err := h.Close(); err != nil {
		panic(err)
	}
	cached, _, _ := w.Get(ctx, "user:1")
	fmt.Printf("cache: user:1 = %s\n", cached)
	sink.down.Store(false) // the database is back

	// readme:writebehind-deadletters:begin
	// Changes that failed MaxDeliveries times are dead letters, with the
	// reason and the sink's error; the change itself is in Payload and Headers.
	letters, _, err := q.DeadLetters().List(ctx, "", 100)
	if err != nil {
		panic(err)
	}
	for _, dl := range letters {
		ch, err := writebehind.FromMessage(&streamq.Message{Payload: dl.Payload, Headers: dl.Headers})
		if err != nil {
			panic(err)
		}
		fmt.Printf("dead letter: %s version %d, %s after %d attempts: %s\n", ch.Key, ch.Version, dl.Reason, dl.Attempts, dl.Error)
	}
	// Once the database works again, requeue them. They keep their versions:
	// a change that a newer one overtook meanwhile is ignored by the sink.
	n, err := q.DeadLetters().RequeueAll(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("requeued:", n)
	// readme:writebehind-deadletters:end

	persist(ctx, q, sink, 1)
	value, version, _, _, err := sqlSink.Get(ctx, "user:1")
	if err != nil {
		panic(err)
	}
	fmt.Printf("database: user:1 = %s (version %d)\n", value, version)

	// Output:
	// cache: user:1 = {"name":"Ada"}
	// dead letter: user:1 version 1, max_deliveries after 3 attempts: streamq: write-behind batch of 1 changes (1 keys): database is down
	// requeued: 1
	// database: user:1 = {"name":"Ada"} (version 1)
}
