// Command priority-testworker is a process for the crash tests of package
// priority. It runs in one of two modes until it gets SIGINT or SIGTERM
// (graceful stop, exit 0) or is killed:
//
//   - -mode work runs a priority.Worker whose jobs carry a job number as
//     payload; it simulates work for a random time and keeps books in Redis,
//     under the queue's hash tag, so that a test that SIGKILLs workers can
//     count what was handled and how often:
//     <prefix>:{queue}:test:started (hash job number -> starts),
//     <prefix>:{queue}:test:handled (hash job number -> completions; a job
//     counts as handled once this is recorded, before its handler returns)
//     and <prefix>:{queue}:test:inflight:<name> (job number -> job ID, set
//     when a job starts here and removed in the transaction that counts its
//     completion: what it holds after a SIGKILL was started and unfinished).
//   - -mode forward runs a streamq.Consumer of the queue's stream with the
//     priority.Forward handler. With -die-at n it SIGKILLs itself when it is
//     about to forward its n-th job: after the entry was read from the
//     stream and before the forward script ran, while the other entries of
//     its read may be anywhere between the two. -forward-delay slows every
//     forward down so that reads and forwards overlap more.
//
// It prints "ready <name>" on stdout once it is about to run, and, in
// forward mode, "dying <entry ID>" just before the SIGKILL of -die-at. Logs
// go to -log-file, or to stderr.
//
//	priority-testworker -addr 127.0.0.1:6379 -queue crash -mode work -name w1 -work 5ms-15ms
package main

import (
	"bufio"
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/priority"
)

// Redis key parts of the bookkeeping, under the queue's hash tag.
const (
	keyStarted  = "test:started"
	keyHandled  = "test:handled"
	keyInflight = "test:inflight:" // + worker name
)

type config struct {
	addr          string
	queue         string
	mode          string
	name          string
	concurrency   int
	lease         time.Duration
	minIdle       time.Duration
	maxDeliveries int
	workMin       time.Duration
	workMax       time.Duration
	delayMin      time.Duration
	delayMax      time.Duration
	dieAt         int64
	logFile       string
}

func main() {
	var cfg config
	var work, delay string
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:6379", "Redis address, host:port")
	flag.StringVar(&cfg.queue, "queue", "", "queue name (required)")
	flag.StringVar(&cfg.mode, "mode", "work", "work: run a priority.Worker; forward: run a stream consumer with priority.Forward")
	flag.StringVar(&cfg.name, "name", "", "worker or consumer name (default: the library's <host>-<pid>-<random>)")
	flag.IntVar(&cfg.concurrency, "concurrency", 8, "worker or consumer concurrency")
	flag.DurationVar(&cfg.lease, "lease", 500*time.Millisecond, "worker Lease: how soon the jobs of a killed worker run again")
	flag.DurationVar(&cfg.minIdle, "min-idle", 300*time.Millisecond, "consumer MinIdle (forward mode): how soon a killed consumer's entries are taken over")
	flag.IntVar(&cfg.maxDeliveries, "max-deliveries", 50, "MaxDeliveries of the worker or consumer")
	flag.StringVar(&work, "work", "1ms-5ms", "simulated work per job (work mode): a duration or a range min-max")
	flag.StringVar(&delay, "forward-delay", "0s", "pause before each forward (forward mode): a duration or a range min-max")
	flag.Int64Var(&cfg.dieAt, "die-at", 0, "forward mode: SIGKILL this process when it is about to forward its n-th job (0: never)")
	flag.StringVar(&cfg.logFile, "log-file", "", "append logs to this file (default: stderr)")
	flag.Parse()
	var err error
	if cfg.workMin, cfg.workMax, err = parseRange(work); err != nil {
		fatalf(2, "-work: %v", err)
	}
	if cfg.delayMin, cfg.delayMax, err = parseRange(delay); err != nil {
		fatalf(2, "-forward-delay: %v", err)
	}
	if cfg.queue == "" {
		flag.Usage()
		fatalf(2, "-queue is required")
	}
	if cfg.mode != "work" && cfg.mode != "forward" {
		fatalf(2, "-mode %q: use work or forward", cfg.mode)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		stop()
		fatalf(1, "%v", err)
	}
}

func fatalf(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "priority-testworker: "+format+"\n", args...)
	os.Exit(code)
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

func between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo+1)
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
	out := &lineWriter{w: bufio.NewWriter(os.Stdout)}

	rdb := redis.NewClient(&redis.Options{Addr: cfg.addr})
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, cfg.queue, nil)
	if err != nil {
		return err
	}
	pq, err := priority.NewQueue(q, nil)
	if err != nil {
		return err
	}
	if cfg.mode == "forward" {
		return forward(ctx, cfg, q, pq, log, out)
	}
	return work(ctx, cfg, q, pq, log, out)
}

// work runs a priority worker with the bookkeeping handler.
func work(ctx context.Context, cfg config, q *streamq.Queue, pq *priority.Queue, log *slog.Logger, out *lineWriter) error {
	rdb := q.Client()
	b := &books{rdb: rdb, cfg: cfg, started: q.Key(keyStarted), handled: q.Key(keyHandled)}
	w, err := priority.NewWorker(pq, streamq.HandlerFunc(b.handle), &priority.WorkerConfig{
		Name:            cfg.name,
		Concurrency:     cfg.concurrency,
		Lease:           cfg.lease,
		MaxDeliveries:   cfg.maxDeliveries,
		ShutdownTimeout: 10 * time.Second,
		Backoff:         streamq.ExponentialBackoff(20*time.Millisecond, time.Second),
		Logger:          log,
	})
	if err != nil {
		return err
	}
	b.inflight = q.Key(keyInflight + w.Name())
	log.Info("priority-testworker: ready", "mode", cfg.mode, "worker", w.Name(), "pid", os.Getpid())
	out.println("ready " + w.Name())
	err = w.Run(ctx)
	s := w.Stats()
	log.Info("priority-testworker: stopped", "error", err, "processed", s.Processed, "failed", s.Failed,
		"expired", s.Expired, "claims_lost", s.ClaimsLost, "dead_lettered", s.DeadLettered)
	return err
}

// books is the job handler of work mode and its bookkeeping keys.
type books struct {
	rdb                        redis.UniversalClient
	cfg                        config
	started, handled, inflight string
}

// handle records the start, works for a random time and records the
// completion; it returns nil only after the completion is stored.
func (b *books) handle(ctx context.Context, m *streamq.Message) error {
	n, err := strconv.Atoi(string(m.Payload))
	if err != nil || n < 0 {
		return streamq.Permanent(fmt.Errorf("payload %q is not a job number", m.Payload))
	}
	field := strconv.Itoa(n)
	if _, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, b.started, field, 1)
		p.HSet(ctx, b.inflight, field, m.ID)
		return nil
	}); err != nil {
		return fmt.Errorf("record start of job %d: %w", n, err)
	}
	if d := between(b.cfg.workMin, b.cfg.workMax); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		}
	}
	if _, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, b.handled, field, 1)
		p.HDel(ctx, b.inflight, field)
		return nil
	}); err != nil {
		return fmt.Errorf("record completion of job %d: %w", n, err)
	}
	return nil
}

// forward runs a stream consumer that forwards jobs into the priority set.
func forward(ctx context.Context, cfg config, q *streamq.Queue, pq *priority.Queue, log *slog.Logger, out *lineWriter) error {
	var forwards atomic.Int64
	die := func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
			if d := between(cfg.delayMin, cfg.delayMax); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return context.Cause(ctx)
				}
			}
			if forwards.Add(1) == cfg.dieAt {
				// Read, not forwarded: die as a crash would, with no
				// deferred function, acknowledgement or log flush.
				out.println("dying " + msg.ID)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is delivered asynchronously
			}
			return next.Handle(ctx, msg)
		})
	}
	c, err := streamq.NewConsumer(q, priority.Forward(pq), &streamq.ConsumerConfig{
		Name:            cfg.name,
		Concurrency:     cfg.concurrency,
		Block:           100 * time.Millisecond,
		MinIdle:         cfg.minIdle,
		MaxDeliveries:   cfg.maxDeliveries,
		ShutdownTimeout: 10 * time.Second,
		Backoff:         streamq.ExponentialBackoff(20*time.Millisecond, time.Second),
		Middleware:      []streamq.Middleware{die},
		Logger:          log,
	})
	if err != nil {
		return err
	}
	if err := q.Setup(ctx); err != nil {
		return err
	}
	log.Info("priority-testworker: ready", "mode", cfg.mode, "consumer", c.Name(), "pid", os.Getpid())
	out.println("ready " + c.Name())
	err = c.Run(ctx)
	s := c.Stats()
	log.Info("priority-testworker: stopped", "error", err, "forwarded", s.Processed, "failed", s.Failed,
		"reclaimed", s.Reclaimed, "dead_lettered", s.DeadLettered)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
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
