// Command writebehind-crash-worker is a write-behind worker for crash tests:
// it runs a streamq consumer with a writebehind.Handler that persists the
// changes of one queue into an SQLite file (-db) or a PostgreSQL database
// (-dsn), until it gets SIGINT or SIGTERM (graceful stop, exit 0) or is
// killed.
//
//	writebehind-crash-worker -addr 127.0.0.1:6379 -queue users -db users.db
//	writebehind-crash-worker -addr 127.0.0.1:6379 -queue users -dsn postgres://postgres@127.0.0.1:5432/test
//
// It prints one line per event on stdout, so a test can kill it at a chosen
// moment: "ready <consumer name>" once the consumer runs, "write <rows>" just
// before each Sink.Write, "committed <rows>" after it succeeded, and "failed
// <error>" after it failed. Logs (warnings and errors) go to -log-file, or to
// stderr.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/testworker"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/postgres"
	"github.com/streamq/streamq/writebehind/sqlite"
)

type config struct {
	*testworker.Flags
	dbPath, dsn, table    string
	maxBatch, concurrency int
	minIdle               time.Duration
	maxDeliveries         int
}

func main() {
	cfg := config{Flags: testworker.RegisterFlags()}
	flag.StringVar(&cfg.dbPath, "db", "", "SQLite database file (this or -dsn is required)")
	flag.StringVar(&cfg.dsn, "dsn", "", "PostgreSQL DSN, instead of -db (for example postgres://user@host:5432/db?sslmode=disable)")
	flag.StringVar(&cfg.table, "table", writebehind.DefaultTable, "table of the sink")
	flag.IntVar(&cfg.maxBatch, "max-batch", writebehind.DefaultMaxBatch, "changes per batch")
	flag.IntVar(&cfg.concurrency, "concurrency", 2*writebehind.DefaultMaxBatch, "consumer concurrency")
	flag.DurationVar(&cfg.minIdle, "min-idle", 300*time.Millisecond, "consumer MinIdle: how soon abandoned changes are taken over")
	flag.IntVar(&cfg.maxDeliveries, "max-deliveries", 50, "consumer MaxDeliveries")
	check := func() error {
		if (cfg.dbPath == "") == (cfg.dsn == "") {
			return errors.New("exactly one of -db (SQLite) and -dsn (PostgreSQL) is required")
		}
		return nil
	}
	testworker.Main("writebehind-crash-worker", cfg.Flags, slog.LevelWarn, check, func(ctx context.Context, log *slog.Logger, q *streamq.Queue) error {
		return run(ctx, cfg, log, q)
	})
}

func run(ctx context.Context, cfg config, log *slog.Logger, q *streamq.Queue) error {
	var (
		db  *sql.DB
		err error
	)
	newSink := sqlite.NewSink
	if cfg.dsn != "" {
		db, err = postgres.Open(cfg.dsn)
		newSink = postgres.NewSink
	} else {
		db, err = sqlite.Open(cfg.dbPath)
	}
	if err != nil {
		return err
	}
	defer db.Close()
	sink, err := newSink(db, &writebehind.SQLSinkConfig{Table: cfg.table})
	if err != nil {
		return err
	}
	if err := sink.CreateSchema(ctx); err != nil {
		return err
	}
	h, err := writebehind.NewHandler(&reportingSink{sink: sink}, &writebehind.HandlerConfig{MaxBatch: cfg.maxBatch})
	if err != nil {
		return err
	}
	defer h.Close()
	c, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{
		Name:            cfg.Name,
		Concurrency:     cfg.concurrency,
		Block:           100 * time.Millisecond,
		MinIdle:         cfg.minIdle,
		MaxDeliveries:   cfg.maxDeliveries,
		ShutdownTimeout: 10 * time.Second,
		Backoff:         streamq.ExponentialBackoff(20*time.Millisecond, time.Second),
		Logger:          log,
	})
	if err != nil {
		return err
	}
	if err := q.Setup(ctx); err != nil {
		return err
	}
	testworker.Ready(c.Name())
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return h.Close()
}

// reportingSink announces every Write on stdout before and after it runs.
type reportingSink struct {
	sink writebehind.Sink
}

func (s *reportingSink) Write(ctx context.Context, changes []writebehind.Change) error {
	testworker.Println(fmt.Sprintf("write %d", len(changes)))
	err := s.sink.Write(ctx, changes)
	if err != nil {
		testworker.Println("failed " + err.Error())
		return err
	}
	testworker.Println(fmt.Sprintf("committed %d", len(changes)))
	return nil
}
