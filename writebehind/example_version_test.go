package writebehind_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/sqlite"
)

// Example_versionCounterLost shows what happens when the version counter
// goes backwards, here because it was deleted: the sink refuses the next
// change of a key it holds with a higher version, the change is
// dead-lettered instead of being ignored, and the repair raises the counter
// and queues the key's cached value again.
func Example_versionCounterLost() {
	ctx := context.Background()
	rdb := exampleClient()
	defer rdb.Close()
	q, sink, cleanup := exampleStore(ctx, rdb, "users")
	defer cleanup()
	w, err := writebehind.NewWriter(q, nil)
	if err != nil {
		panic(err)
	}
	for _, kv := range [][2]string{{"user:1", "Ada"}, {"user:2", "Grace"}} {
		if _, err := w.Set(ctx, kv[0], []byte(kv[1])); err != nil {
			panic(err)
		}
	}
	persist(ctx, q, sink, 2)

	// The counter is lost (deleted here; evicted, or a failover to a replica
	// that missed increments, would do the same): user:1 gets version 1
	// again, which the database already holds.
	if err := rdb.Del(ctx, w.VersionKey()).Err(); err != nil {
		panic(err)
	}
	if _, err := w.Set(ctx, "user:1", []byte("Ada Lovelace")); err != nil {
		panic(err)
	}
	runHandler(ctx, q, sink, func(s writebehind.HandlerStats) bool { return s.Rejected >= 1 })
	letters, _, err := q.DeadLetters().List(ctx, "", 100)
	if err != nil {
		panic(err)
	}
	for _, dl := range letters {
		why, _, _ := strings.Cut(dl.Error, ": change 0")
		fmt.Printf("dead letter: %s, %s\n", dl.Headers[writebehind.HeaderKey], why)
	}

	// readme:writebehind-counter:begin
	// 1. Raise the counter above every version the database holds.
	maxVersion, err := sink.MaxVersion(ctx)
	if err != nil {
		panic(err)
	}
	previous, err := w.EnsureVersionAtLeast(ctx, maxVersion)
	if err != nil {
		panic(err)
	}
	fmt.Printf("counter raised from %d to %d\n", previous, maxVersion)
	// 2. Queue the cached value of each refused key again, with a new
	// version, and drop its dead letter.
	letters, _, err = q.DeadLetters().List(ctx, "", 100)
	if err != nil {
		panic(err)
	}
	for _, dl := range letters {
		ch, err := writebehind.FromMessage(&streamq.Message{Payload: dl.Payload, Headers: dl.Headers})
		if err != nil {
			panic(err)
		}
		version, found, err := w.Resync(ctx, ch.Key)
		switch {
		case err != nil:
			panic(err)
		case !found && ch.Deleted:
			// Not cached: deleted. (With WriterConfig.TTL or eviction, check
			// that it did not just expire.) Queue the deletion again.
			if version, err = w.Delete(ctx, ch.Key); err != nil {
				panic(err)
			}
		case !found:
			fmt.Printf("%s is not cached (expired or evicted): decide by hand\n", ch.Key)
			continue
		}
		fmt.Printf("resynced %s: version %d replaces %d\n", ch.Key, version, ch.Version)
		if _, err := q.DeadLetters().Purge(ctx, dl.ID); err != nil {
			panic(err)
		}
	}
	// readme:writebehind-counter:end

	persist(ctx, q, sink, 1)
	for _, key := range []string{"user:1", "user:2"} {
		value, version, _, _, err := sink.Get(ctx, key)
		if err != nil {
			panic(err)
		}
		fmt.Printf("database: %s = %s (version %d)\n", key, value, version)
	}

	// Output:
	// dead letter: user:1, permanent: streamq: write-behind version counter went backwards
	// counter raised from 1 to 2
	// resynced user:1: version 3 replaces 1
	// database: user:1 = Ada Lovelace (version 3)
	// database: user:2 = Grace (version 2)
}

// exampleStore returns a new queue on rdb, with its group, and an SQLSink on
// a new SQLite file; cleanup deletes both.
func exampleStore(ctx context.Context, rdb redis.UniversalClient, name string) (q *streamq.Queue, sink *writebehind.SQLSink, cleanup func()) {
	dir, err := os.MkdirTemp("", "writebehind-example-")
	if err != nil {
		panic(err)
	}
	q, err = streamq.NewQueue(rdb, fmt.Sprintf("%s-%d", name, time.Now().UnixNano()), nil)
	if err == nil {
		err = q.Setup(ctx)
	}
	if err != nil {
		panic(err)
	}
	db, err := sqlite.Open(filepath.Join(dir, name+".db"))
	if err != nil {
		panic(err)
	}
	if sink, err = sqlite.NewSink(db, nil); err == nil {
		err = sink.CreateSchema(ctx)
	}
	if err != nil {
		panic(err)
	}
	return q, sink, func() {
		_ = db.Close()
		_ = os.RemoveAll(dir)
		deleteQueueKeys(q)
	}
}
