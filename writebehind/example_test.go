package writebehind_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/sqlite"
)

// exampleClient returns a client to the test Redis. In your code this is
// redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), or a
// redis.NewFailoverClient or redis.NewClusterClient.
func exampleClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: redistest.Addr()})
}

// Example updates a cache through a Writer and persists the changes into
// SQLite with a consumer running a Handler. In a real program the Writer runs
// in the request path and the consumer in worker processes.
func Example() {
	rdb := exampleClient()
	defer rdb.Close()
	dir, err := os.MkdirTemp("", "writebehind-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	q, err := streamq.NewQueue(rdb, fmt.Sprintf("users-%d", time.Now().UnixNano()), nil)
	if err != nil {
		panic(err)
	}
	defer deleteQueueKeys(q)
	if err := q.Setup(ctx); err != nil {
		panic(err)
	}

	// Request path: update the cache; each change is queued atomically with it.
	w, err := writebehind.NewWriter(q, nil)
	if err != nil {
		panic(err)
	}
	v1, _ := w.Set(ctx, "user:1", []byte(`{"name":"Ada"}`))
	v2, _ := w.Set(ctx, "user:2", []byte(`{"name":"Grace"}`))
	v3, _ := w.Delete(ctx, "user:2")
	v4, err := w.Set(ctx, "user:1", []byte(`{"name":"Ada Lovelace"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println("versions:", v1, v2, v3, v4)
	cached, _, _ := w.Get(ctx, "user:1")
	fmt.Printf("cache: user:1 = %s\n", cached)

	// Worker: persist the changes in batches into SQLite.
	db, err := sqlite.Open(filepath.Join(dir, "users.db"))
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
	flushed := make(chan struct{}, 1)
	h, err := writebehind.NewHandler(sink, &writebehind.HandlerConfig{
		// Defaults: batches of up to 500 changes, written at most 50 ms
		// after their first change. OnFlush tells us when a batch is done.
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
	c, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{
		Concurrency: 1000, // at least HandlerConfig.MaxBatch
		Block:       100 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	timeout := time.After(10 * time.Second)
	for h.Stats().Changes < 4 { // wait until the 4 changes are committed
		select {
		case <-flushed:
		case <-timeout:
			panic("changes not persisted within 10s")
		}
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	if err := h.Close(); err != nil {
		panic(err)
	}

	for _, key := range []string{"user:1", "user:2"} {
		value, version, deleted, _, err := sink.Get(ctx, key)
		if err != nil {
			panic(err)
		}
		if deleted {
			fmt.Printf("database: %s deleted at version %d\n", key, version)
			continue
		}
		fmt.Printf("database: %s = %s (version %d)\n", key, value, version)
	}
	// Output:
	// versions: 1 2 3 4
	// cache: user:1 = {"name":"Ada Lovelace"}
	// database: user:1 = {"name":"Ada Lovelace"} (version 4)
	// database: user:2 deleted at version 3
}
