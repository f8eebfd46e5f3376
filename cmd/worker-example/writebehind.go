package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/postgres"
	"github.com/streamq/streamq/writebehind/sqlite"
)

// demoTable is the table the write-behind demo writes to. It is dropped and
// created again at every run: each run uses a new queue, whose version
// counter starts at 1 again, and the rows of an earlier run would hold newer
// versions than the new changes.
const demoTable = "streamq_demo"

// wbOptions configures the write-behind part of the demo.
type wbOptions struct {
	dsn     string // PostgreSQL DSN; empty means SQLite at dbPath
	dbPath  string // SQLite file
	updates int    // number of updates
	keys    int    // number of distinct keys
}

// runWriteBehind is the second demo: it updates a Redis cache through a
// writebehind.Writer, persists the changes with a consumer running a
// writebehind.Handler into SQLite (or PostgreSQL with -dsn), and checks that
// the database ends up holding what the cache holds.
func runWriteBehind(ctx context.Context, log *slog.Logger, rdb *redis.Client, o wbOptions) error {
	if o.updates <= 0 || o.keys <= 0 {
		fmt.Println("\nwrite-behind demo skipped (-updates or -keys is 0)")
		return nil
	}
	fmt.Println("\nwrite-behind demo: cache in Redis, persisted in batches")
	db, where, err := openDemoDB(o)
	if err != nil {
		return err
	}
	defer db.Close()
	newSink := sqlite.NewSink
	if o.dsn != "" {
		newSink = postgres.NewSink
	}
	sink, err := newSink(db, &writebehind.SQLSinkConfig{Table: demoTable})
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+demoTable+`"`); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if err := sink.CreateSchema(ctx); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	fmt.Printf("database: %s, table %q (created afresh)\n", where, demoTable)

	q, err := streamq.NewQueue(rdb, fmt.Sprintf("demo-writebehind-%d", os.Getpid()), nil)
	if err != nil {
		return err
	}
	defer deleteQueue(rdb, q)
	if err := q.Setup(ctx); err != nil {
		return err
	}
	w, err := writebehind.NewWriter(q, nil)
	if err != nil {
		return err
	}
	h, err := writebehind.NewHandler(sink, nil) // batches of up to 500 changes or 50 ms
	if err != nil {
		return err
	}
	defer h.Close()
	consumer, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{
		Concurrency: 2 * writebehind.DefaultMaxBatch, // at least MaxBatch, so batches can fill
		Block:       100 * time.Millisecond,
		Logger:      log,
	})
	if err != nil {
		return err
	}
	runCtx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	done := make(chan error, 1)
	go func() { done <- consumer.Run(runCtx) }()

	// Write: random sets, and about one delete in ten.
	start := time.Now()
	sets, dels := 0, 0
	for i := range o.updates {
		key := fmt.Sprintf("user:%03d", rand.IntN(o.keys))
		if rand.IntN(10) == 0 {
			_, err = w.Delete(ctx, key)
			dels++
		} else {
			_, err = w.Set(ctx, key, fmt.Appendf(nil, `{"name":"user %s","update":%d}`, key, i))
			sets++
		}
		if err != nil {
			stopConsumer()
			<-done
			return err
		}
	}
	wrote := time.Since(start)

	// Wait (bounded) until the handler has committed every update.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(time.Minute)
wait:
	for h.Stats().Changes < int64(o.updates) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			fmt.Println("interrupted: shutting down gracefully")
			break wait
		case <-timeout:
			fmt.Println("gave up waiting after 1 minute")
			break wait
		}
	}
	persisted := time.Since(start)
	stopConsumer()
	if err := <-done; err != nil {
		return err
	}
	if err := h.Close(); err != nil {
		return err
	}

	s := h.Stats()
	fmt.Printf("wrote %d updates (%d sets, %d deletes) over %d keys to the cache in %s\n",
		o.updates, sets, dels, o.keys, wrote.Round(time.Millisecond))
	fmt.Printf("persisted %d changes in %s: %d rows written in %d batches (%d changes coalesced away), %d failed batches\n",
		s.Changes, persisted.Round(time.Millisecond), s.Rows, s.Batches, s.Changes-s.Rows, s.WriteErrors)
	return verifyDemo(context.WithoutCancel(ctx), w, sink, o.keys)
}

// verifyDemo compares every key's cached value with its row.
func verifyDemo(ctx context.Context, w *writebehind.Writer, sink *writebehind.SQLSink, keys int) error {
	rows, err := sink.All(ctx)
	if err != nil {
		return err
	}
	live, mismatches := 0, 0
	for i := range keys {
		key := fmt.Sprintf("user:%03d", i)
		cached, inCache, err := w.Get(ctx, key)
		if err != nil {
			return err
		}
		row, inDB := rows[key]
		if inCache != inDB || !bytes.Equal(cached, row) {
			mismatches++
			if mismatches <= 5 {
				fmt.Printf("MISMATCH %s: cache %q (present %v), database %q (present %v)\n", key, cached, inCache, row, inDB)
			}
		}
		if inCache {
			live++
		}
	}
	if mismatches > 0 {
		return fmt.Errorf("database and cache disagree on %d of %d keys", mismatches, keys)
	}
	fmt.Printf("verified: database == cache for all %d keys (%d live, %d deleted or never set)\n", keys, live, keys-live)
	return nil
}

// openDemoDB opens PostgreSQL when o.dsn is set, else the SQLite file.
func openDemoDB(o wbOptions) (*sql.DB, string, error) {
	if o.dsn != "" {
		db, err := postgres.Open(o.dsn)
		if err != nil {
			return nil, "", err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := db.PingContext(ctx); err != nil {
			_ = db.Close()
			return nil, "", fmt.Errorf("cannot reach PostgreSQL at -dsn: %w", err)
		}
		return db, "PostgreSQL (-dsn)", nil
	}
	path, err := filepath.Abs(o.dbPath)
	if err != nil {
		return nil, "", err
	}
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, "", err
	}
	return db, "SQLite file " + path, nil
}
