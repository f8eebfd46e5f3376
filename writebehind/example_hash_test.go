package writebehind_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/sqlite"
)

// ExampleWriter_SetFields caches a user as a Redis hash and persists it into
// SQLite, where the row holds the fields as one canonical JSON object.
func ExampleWriter_SetFields() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "writebehind-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	q, err := streamq.NewQueue(rdb, fmt.Sprintf("profiles-%d", time.Now().UnixNano()), nil)
	if err != nil {
		panic(err)
	}
	defer deleteQueueKeys(q)
	if err := q.Setup(ctx); err != nil {
		panic(err)
	}
	db, err := sqlite.Open(filepath.Join(dir, "profiles.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	sink, err := sqlite.NewSink(db, nil)
	if err != nil {
		panic(err)
	}
	if err := sink.CreateSchema(ctx); err != nil {
		panic(err)
	}

	// readme:writebehind-hash:begin
	w, err := writebehind.NewWriter(q, &writebehind.WriterConfig{TTL: time.Hour})
	if err != nil {
		panic(err)
	}
	// One script: DEL + HSET + PEXPIRE of the cache key, XADD of the change.
	version, err := w.SetFields(ctx, "user:42", map[string]string{"name": "Ada", "lang": "en", "bio": "<math>"})
	if err != nil {
		panic(err)
	}
	fields, _, err := w.GetFields(ctx, "user:42") // or HGET on w.CacheKey("user:42")
	if err != nil {
		panic(err)
	}
	fmt.Println("version", version, "cache:", fields["name"], fields["lang"])
	// readme:writebehind-hash:end

	persist(ctx, q, sink, 1)

	// readme:writebehind-hash:begin
	// Once a worker persisted the change, the row holds the fields as JSON.
	value, rowVersion, _, _, err := sink.Get(ctx, "user:42")
	if err != nil {
		panic(err)
	}
	fmt.Printf("database: %s (version %d)\n", value, rowVersion)
	back, err := writebehind.DecodeFields(value)
	if err != nil {
		panic(err)
	}
	fmt.Println("decoded bio:", back["bio"])
	// readme:writebehind-hash:end

	// Output:
	// version 1 cache: Ada en
	// database: {"bio":"<math>","lang":"en","name":"Ada"} (version 1)
	// decoded bio: <math>
}

// persist runs a consumer of q with a Handler writing to sink until the
// handler has committed n changes (at most 10 s), then stops both.
func persist(ctx context.Context, q *streamq.Queue, sink writebehind.Sink, n int64) {
	runHandler(ctx, q, sink, func(s writebehind.HandlerStats) bool { return s.Changes >= n })
}

// runHandler runs a consumer of q with a Handler writing to sink until done
// holds for the handler's stats after a batch (at most 10 s), then stops
// both.
func runHandler(ctx context.Context, q *streamq.Queue, sink writebehind.Sink, done func(writebehind.HandlerStats) bool) {
	flushed := make(chan struct{}, 1)
	h, err := writebehind.NewHandler(sink, &writebehind.HandlerConfig{
		OnFlush: func(writebehind.FlushInfo) {
			select {
			case flushed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	c, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{
		Concurrency: 1000,
		Block:       100 * time.Millisecond,
		Logger:      slog.New(slog.DiscardHandler), // a warning per dead letter
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan error, 1)
	go func() { finished <- c.Run(runCtx) }()
	timeout := time.After(10 * time.Second)
	for !done(h.Stats()) {
		select {
		case <-flushed:
		case <-timeout:
			panic("the handler did not get there within 10s")
		}
	}
	stop()
	if err := <-finished; err != nil {
		panic(err)
	}
}
