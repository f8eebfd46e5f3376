// Command writebehind-crash-worker is a write-behind worker for crash tests:
// it runs a streamq consumer with a writebehind.Handler that persists the
// changes of one queue into an SQLite file (-db) or a PostgreSQL database
// (-dsn), until it gets SIGINT or SIGTERM (graceful stop) or is killed.
//
//	writebehind-crash-worker -redis 127.0.0.1:6379 -queue users -db users.db
//	writebehind-crash-worker -redis 127.0.0.1:6379 -queue users -dsn postgres://postgres@127.0.0.1:5432/test
//
// It prints one line per event on stdout, so a test can kill it at a chosen
// moment: "ready <consumer name>" once the consumer runs, "write <rows>" just before each
// Sink.Write, "committed <rows>" after it succeeded, and "failed <error>"
// after it failed. Logs go to stderr.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address, host:port")
	queue := flag.String("queue", "", "queue name (required)")
	dbPath := flag.String("db", "", "SQLite database file (this or -dsn is required)")
	dsn := flag.String("dsn", "", "PostgreSQL DSN, instead of -db (for example postgres://user@host:5432/db?sslmode=disable)")
	table := flag.String("table", writebehind.DefaultTable, "table of the sink")
	maxBatch := flag.Int("max-batch", writebehind.DefaultMaxBatch, "changes per batch")
	concurrency := flag.Int("concurrency", 2*writebehind.DefaultMaxBatch, "consumer concurrency")
	minIdle := flag.Duration("min-idle", 300*time.Millisecond, "consumer MinIdle: how soon abandoned changes are taken over")
	maxDeliveries := flag.Int("max-deliveries", 50, "consumer MaxDeliveries")
	flag.Parse()
	if *queue == "" || (*dbPath == "") == (*dsn == "") {
		fmt.Fprintln(os.Stderr, "writebehind-crash-worker: -queue is required, and exactly one of -db (SQLite) and -dsn (PostgreSQL)")
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{
		addr: *addr, queue: *queue, dbPath: *dbPath, dsn: *dsn, table: *table,
		maxBatch: *maxBatch, concurrency: *concurrency, minIdle: *minIdle, maxDeliveries: *maxDeliveries,
	}
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "writebehind-crash-worker:", err)
		os.Exit(1)
	}
}

type config struct {
	addr, queue, dbPath, dsn, table string
	maxBatch, concurrency           int
	minIdle                         time.Duration
	maxDeliveries                   int
}

func run(ctx context.Context, cfg config) error {
	out := &lineWriter{w: bufio.NewWriter(os.Stdout)}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	rdb := redis.NewClient(&redis.Options{Addr: cfg.addr})
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, cfg.queue, nil)
	if err != nil {
		return err
	}
	var db *sql.DB
	if cfg.dsn != "" {
		db, err = writebehind.OpenPostgres(cfg.dsn)
	} else {
		db, err = writebehind.OpenSQLite(cfg.dbPath)
	}
	if err != nil {
		return err
	}
	defer db.Close()
	sink, err := writebehind.NewSQLSink(db, &writebehind.SQLSinkConfig{Table: cfg.table})
	if err != nil {
		return err
	}
	if err := sink.CreateSchema(ctx); err != nil {
		return err
	}
	h, err := writebehind.NewHandler(&reportingSink{sink: sink, out: out}, &writebehind.HandlerConfig{MaxBatch: cfg.maxBatch})
	if err != nil {
		return err
	}
	defer h.Close()
	c, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{
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
	out.println("ready " + c.Name())
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return h.Close()
}

// reportingSink announces every Write on stdout before and after it runs.
type reportingSink struct {
	sink writebehind.Sink
	out  *lineWriter
}

func (s *reportingSink) Write(ctx context.Context, changes []writebehind.Change) error {
	s.out.println(fmt.Sprintf("write %d", len(changes)))
	err := s.sink.Write(ctx, changes)
	if err != nil {
		s.out.println("failed " + err.Error())
		return err
	}
	s.out.println(fmt.Sprintf("committed %d", len(changes)))
	return nil
}

// lineWriter writes whole lines and flushes each at once.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lineWriter) println(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.WriteString(s + "\n")
	_ = l.w.Flush()
}
