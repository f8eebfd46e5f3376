// Command streamq-testworker is a streamq worker for crash tests: it runs one
// consumer whose jobs carry a job number as payload, simulates work for a
// random time, and keeps books in Redis (next to the queue's own keys, under
// the queue's hash tag) so that a test that SIGKILLs workers can count what
// was handled, what was in flight, and how often each job ran:
//
//   - <prefix>:{queue}:test:started    hash job number -> starts (HINCRBY)
//   - <prefix>:{queue}:test:handled    hash job number -> completions (HINCRBY)
//   - <prefix>:{queue}:test:inflight:<consumer>
//     hash job number -> entry ID, set when a job starts on this consumer
//     and removed, in the same transaction that counts the completion, when it
//     was handled. What it holds after a SIGKILL was started here and never
//     finished.
//
// A job counts as handled once its completion is recorded, before the handler
// returns nil, so that a test sees every run that could have had an effect.
//
//	streamq-testworker -addr 127.0.0.1:6379 -queue crash -name w1 -work 1ms-5ms
//
// With -crash-on n, the job numbered n kills the worker (SIGKILL on itself)
// each time it starts: a poison pill for testing MaxDeliveries after crashes.
//
// It prints "ready <consumer name>" on stdout once the consumer is about to
// run, stops gracefully on SIGTERM or SIGINT (Run returns, running jobs
// finish), and exits 0 after a graceful stop. Logs go to -log-file, or to
// stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
)

// Redis key parts of the bookkeeping, under the queue's hash tag.
const (
	keyStarted  = "test:started"
	keyHandled  = "test:handled"
	keyInflight = "test:inflight:" // + consumer name
)

type config struct {
	addr          string
	queue         string
	name          string
	concurrency   int
	minIdle       time.Duration
	maxDeliveries int
	shutdown      time.Duration
	workMin       time.Duration
	workMax       time.Duration
	logFile       string
	crashOn       int // job number that makes the worker SIGKILL itself; -1: none
}

func main() {
	var cfg config
	var work string
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:6379", "Redis address, host:port")
	flag.StringVar(&cfg.queue, "queue", "", "queue name (required)")
	flag.StringVar(&cfg.name, "name", "", "consumer name (default: streamq's <host>-<pid>-<random>)")
	flag.IntVar(&cfg.concurrency, "concurrency", 8, "consumer concurrency")
	flag.DurationVar(&cfg.minIdle, "min-idle", 500*time.Millisecond, "consumer MinIdle: how soon abandoned jobs are taken over")
	flag.IntVar(&cfg.maxDeliveries, "max-deliveries", streamq.DefaultMaxDeliveries, "consumer MaxDeliveries")
	flag.DurationVar(&cfg.shutdown, "shutdown-timeout", 10*time.Second, "consumer ShutdownTimeout")
	flag.StringVar(&work, "work", "1ms-5ms", "simulated work per job: a duration or a range min-max, e.g. 1ms-5ms")
	flag.StringVar(&cfg.logFile, "log-file", "", "append logs to this file (default: stderr)")
	flag.IntVar(&cfg.crashOn, "crash-on", -1, "SIGKILL this process when it starts the job with this number (a poison pill), after recording the start")
	flag.Parse()
	var err error
	if cfg.workMin, cfg.workMax, err = parseRange(work); err != nil {
		fmt.Fprintln(os.Stderr, "streamq-testworker: -work:", err)
		os.Exit(2)
	}
	if cfg.queue == "" {
		fmt.Fprintln(os.Stderr, "streamq-testworker: -queue is required")
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "streamq-testworker:", err)
		os.Exit(1)
	}
}

// parseRange parses "d" or "min-max" (Go durations, min <= max).
func parseRange(s string) (lo, hi time.Duration, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if lo, err = time.ParseDuration(a); err != nil {
		return 0, 0, err
	}
	hi = lo
	if isRange {
		if hi, err = time.ParseDuration(b); err != nil {
			return 0, 0, err
		}
	}
	if lo < 0 || hi < lo {
		return 0, 0, fmt.Errorf("%q: want 0 <= min <= max", s)
	}
	return lo, hi, nil
}

func run(ctx context.Context, cfg config) error {
	var logOut io.Writer = os.Stderr
	if cfg.logFile != "" {
		f, err := os.OpenFile(cfg.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		logOut = f
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))

	rdb := redis.NewClient(&redis.Options{Addr: cfg.addr})
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, cfg.queue, nil)
	if err != nil {
		return err
	}
	w := &worker{rdb: rdb, cfg: cfg, started: q.Key(keyStarted), handled: q.Key(keyHandled)}
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(w.handle), &streamq.ConsumerConfig{
		Name:            cfg.name,
		Concurrency:     cfg.concurrency,
		Block:           100 * time.Millisecond,
		MinIdle:         cfg.minIdle,
		MaxDeliveries:   cfg.maxDeliveries,
		ShutdownTimeout: cfg.shutdown,
		Backoff:         streamq.ExponentialBackoff(20*time.Millisecond, time.Second),
		Logger:          log,
	})
	if err != nil {
		return err
	}
	w.inflight = q.Key(keyInflight + c.Name())
	if err := q.Setup(ctx); err != nil {
		return err
	}
	log.Info("streamq-testworker: ready", "consumer", c.Name(), "pid", os.Getpid())
	if _, err := fmt.Fprintln(os.Stdout, "ready "+c.Name()); err != nil {
		return err
	}
	err = c.Run(ctx)
	s := c.Stats()
	log.Info("streamq-testworker: stopped", "error", err, "processed", s.Processed, "failed", s.Failed,
		"reclaimed", s.Reclaimed, "deleted", s.Deleted, "claims_lost", s.ClaimsLost, "dead_lettered", s.DeadLettered)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// worker is the job handler and its bookkeeping keys.
type worker struct {
	rdb                        *redis.Client
	cfg                        config
	started, handled, inflight string
}

// handle records the start, works for a random time and records the
// completion; it returns nil only after the completion is stored.
func (w *worker) handle(ctx context.Context, m *streamq.Message) error {
	n, err := strconv.Atoi(string(m.Payload))
	if err != nil || n < 0 {
		return streamq.Permanent(fmt.Errorf("payload %q is not a job number", m.Payload))
	}
	field := strconv.Itoa(n)
	if _, err := w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, w.started, field, 1)
		p.HSet(ctx, w.inflight, field, m.ID)
		return nil
	}); err != nil {
		return fmt.Errorf("record start of job %d: %w", n, err)
	}
	if n == w.cfg.crashOn {
		// Die as a job that crashes its worker would: no deferred function,
		// no acknowledgement, no log flush.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is delivered asynchronously
	}
	if d := w.workTime(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
	if _, err := w.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, w.handled, field, 1)
		p.HDel(ctx, w.inflight, field)
		return nil
	}); err != nil {
		return fmt.Errorf("record completion of job %d: %w", n, err)
	}
	return nil
}

func (w *worker) workTime() time.Duration {
	if w.cfg.workMax <= w.cfg.workMin {
		return w.cfg.workMin
	}
	return w.cfg.workMin + rand.N(w.cfg.workMax-w.cfg.workMin+1)
}
