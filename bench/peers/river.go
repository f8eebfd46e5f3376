package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// River's fetch settings: those of River's own benchmark (riverbench). The
// defaults (a fetch at most every 100 ms) cap a client at MaxWorkers jobs
// per 100 ms, which would measure the setting rather than River.
const (
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
)

// riverArgs is the job of the River runs: the payload as a JSON string.
type riverArgs struct {
	Payload string `json:"payload"`
}

// Kind is River's job kind of riverArgs.
func (riverArgs) Kind() string { return "peers_noop" }

// riverWorker is the no-op worker; count is set per run.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	count *counter
}

func (w *riverWorker) Work(context.Context, *river.Job[riverArgs]) error {
	w.count.add()
	return nil
}

// riverBackend is River on PostgreSQL, in a schema of its own that is made
// and migrated for each backend and dropped after: InsertManyFast (COPY) of
// o.batch jobs, and a Client with o.concurrency workers on the default
// queue.
type riverBackend struct {
	o      *options
	pool   *pgxpool.Pool
	schema string
	args   riverArgs
}

func openRiver(ctx context.Context, o *options) (backend, func() error, error) {
	cfg, err := pgxpool.ParseConfig(o.postgres)
	if err != nil {
		return nil, nil, fmt.Errorf("-postgres: %w", err)
	}
	cfg.MaxConns = int32(o.concurrency + 10)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("connect to PostgreSQL (give it with -postgres, or leave River out with -peers): %w", err)
	}
	schema := fmt.Sprintf("streamq_peers_%d_%d", os.Getpid(), time.Now().UnixNano())
	closeFn := func() error {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, err := pool.Exec(dctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
		if err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		return nil
	}
	if err := migrateRiver(ctx, pool, schema); err != nil {
		return nil, nil, errors.Join(err, closeFn())
	}
	b := &riverBackend{o: o, pool: pool, schema: schema, args: riverArgs{Payload: string(payload(o.payload))}}
	return b, closeFn, nil
}

// migrateRiver makes schema and runs River's migrations into it.
func migrateRiver(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: quietLogger()})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River into schema %s: %w", schema, err)
	}
	return nil
}

// client returns a River client of the backend's schema whose workers count
// into c (nil: an insert-only client).
func (b *riverBackend) client(c *counter) (*river.Client[pgx.Tx], error) {
	cfg := &river.Config{Schema: b.schema, Logger: quietLogger()}
	if c != nil {
		workers := river.NewWorkers()
		river.AddWorker(workers, &riverWorker{count: c})
		cfg.Workers = workers
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: b.o.concurrency}}
		cfg.FetchCooldown = riverFetchCooldown
		cfg.FetchPollInterval = riverFetchPollInterval
	}
	return river.NewClient(riverpgxv5.New(b.pool), cfg)
}

func (b *riverBackend) enqueue(ctx context.Context) error {
	client, err := b.client(nil)
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, b.o.batch)
	for i := range params {
		params[i].Args = b.args
	}
	return batches(b.o.jobs, b.o.batch, func(lo, hi int) error {
		_, err := client.InsertManyFast(ctx, params[:hi-lo])
		return err
	})
}

func (b *riverBackend) start(ctx context.Context, c *counter) (func() error, error) {
	client, err := b.client(c)
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return client.Stop(sctx)
	}, nil
}

// quietLogger drops River's informational records and keeps its warnings
// and errors on stderr.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
