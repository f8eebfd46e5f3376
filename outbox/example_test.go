package outbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/outbox"
	"github.com/streamq/streamq/outbox/sqlite"
	wbsqlite "github.com/streamq/streamq/writebehind/sqlite"
)

// exampleRedis is the Redis of the examples: the tests' server (use your
// own client in your code).
func exampleRedis() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: redistest.Addr()})
}

// Example enqueues a job in the same SQLite transaction as the order it is
// about, and runs a relay that moves it to the queue once the transaction
// committed. A job enqueued in a transaction that rolls back never reaches
// Redis. (On PostgreSQL, postgres.New and Outbox.Enqueue with a *sql.Tx, or
// EnqueuePgx with a pgx.Tx, do the same.)
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "streamq-outbox-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	db, err := wbsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ob, err := sqlite.New(db, nil) // table "streamq_outbox"
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT)`); err != nil {
		fmt.Println(err)
		return
	}
	if err := ob.Migrate(ctx); err != nil { // idempotent: run it at every start
		fmt.Println(err)
		return
	}

	rdb := exampleRedis()
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, fmt.Sprintf("example-outbox-%d", time.Now().UnixNano()), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	producer, err := streamq.NewProducer(q, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	for _, commit := range []bool{true, false} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (item) VALUES ('book')`); err != nil {
			fmt.Println(err)
			return
		}
		if _, err := ob.Enqueue(ctx, tx, q, []byte(`{"mail":"order received"}`), streamq.WithHeader("tenant", "acme")); err != nil {
			fmt.Println(err)
			return
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			fmt.Println(err)
			return
		}
	}

	relay, err := outbox.NewRelay(ob, &outbox.RelayConfig{Producers: []*streamq.Producer{producer}})
	if err != nil {
		fmt.Println(err)
		return
	}
	// In a worker: go relay.Run(ctx), beside the consumers. Here, one batch.
	n, err := relay.RunOnce(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	stats, err := q.Stats(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	backlog, err := relay.Backlog(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("relayed %d job(s); the queue holds %d; %d row(s) left\n", n, stats.Length, backlog.Rows)
	// Output: relayed 1 job(s); the queue holds 1; 0 row(s) left
}
