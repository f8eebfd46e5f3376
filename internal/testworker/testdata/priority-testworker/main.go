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
//     With -exit-on, -panic-on and -fail-on, some jobs are poison pills
//     (see testworker.Pills): they end the process (os.Exit, status 3,
//     after quiescing the worker), panic or fail at every start.
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
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/testworker"
	"github.com/streamq/streamq/priority"
)

type config struct {
	*testworker.Flags
	mode          string
	concurrency   int
	lease         time.Duration
	minIdle       time.Duration
	maxDeliveries int
	work          testworker.Range
	delay         testworker.Range
	dieAt         int64
	pills         *testworker.PillFlags
}

func main() {
	cfg := config{Flags: testworker.RegisterFlags()}
	cfg.work = testworker.Range{Min: time.Millisecond, Max: 5 * time.Millisecond}
	flag.StringVar(&cfg.mode, "mode", "work", "work: run a priority.Worker; forward: run a stream consumer with priority.Forward")
	flag.IntVar(&cfg.concurrency, "concurrency", 8, "worker or consumer concurrency")
	flag.DurationVar(&cfg.lease, "lease", 500*time.Millisecond, "worker Lease: how soon the jobs of a killed worker run again")
	flag.DurationVar(&cfg.minIdle, "min-idle", 300*time.Millisecond, "consumer MinIdle (forward mode): how soon a killed consumer's entries are taken over")
	flag.IntVar(&cfg.maxDeliveries, "max-deliveries", 50, "MaxDeliveries of the worker or consumer")
	flag.Var(&cfg.work, "work", "simulated work per job (work mode): a duration or a range min-max")
	flag.Var(&cfg.delay, "forward-delay", "pause before each forward (forward mode): a duration or a range min-max")
	flag.Int64Var(&cfg.dieAt, "die-at", 0, "forward mode: SIGKILL this process when it is about to forward its n-th job (0: never)")
	cfg.pills = testworker.RegisterPillFlags()
	check := func() error {
		if cfg.mode != "work" && cfg.mode != "forward" {
			return fmt.Errorf("-mode %q: use work or forward", cfg.mode)
		}
		return nil
	}
	testworker.Main("priority-testworker", cfg.Flags, slog.LevelInfo, check, func(ctx context.Context, log *slog.Logger, q *streamq.Queue) error {
		return run(ctx, cfg, log, q)
	})
}

func run(ctx context.Context, cfg config, log *slog.Logger, q *streamq.Queue) error {
	pq, err := priority.NewQueue(q, nil)
	if err != nil {
		return err
	}
	if cfg.mode == "forward" {
		return forward(ctx, cfg, q, pq, log)
	}
	return work(ctx, cfg, q, pq, log)
}

// work runs a priority worker with the bookkeeping handler.
func work(ctx context.Context, cfg config, q *streamq.Queue, pq *priority.Queue, log *slog.Logger) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	books := testworker.NewBooks(q, cfg.work)
	w, err := priority.NewWorker(pq, streamq.HandlerFunc(books.Handle), &priority.WorkerConfig{
		Name:            cfg.Name,
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
	books.SetOwner(q, w.Name())
	cfg.pills.Arm(books, log, stop, w.Health)
	log.Info("priority-testworker: ready", "mode", cfg.mode, "worker", w.Name(), "pid", os.Getpid())
	testworker.Ready(w.Name())
	err = w.Run(ctx)
	s := w.Stats()
	log.Info("priority-testworker: stopped", "error", err, "processed", s.Processed, "failed", s.Failed,
		"reclaimed", s.Reclaimed, "claims_lost", s.ClaimsLost, "dead_lettered", s.DeadLettered)
	return err
}

// forward runs a stream consumer that forwards jobs into the priority set.
func forward(ctx context.Context, cfg config, q *streamq.Queue, pq *priority.Queue, log *slog.Logger) error {
	var forwards atomic.Int64
	die := func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
			if err := testworker.Sleep(ctx, cfg.delay.Pick()); err != nil {
				return err
			}
			if forwards.Add(1) == cfg.dieAt {
				// Read, not forwarded: die as a crash would.
				testworker.Println("dying " + msg.ID)
				testworker.Die()
			}
			return next.Handle(ctx, msg)
		})
	}
	c, err := streamq.NewConsumer(q, priority.Forward(pq), &streamq.ConsumerConfig{
		Name:            cfg.Name,
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
	testworker.Ready(c.Name())
	err = c.Run(ctx)
	s := c.Stats()
	log.Info("priority-testworker: stopped", "error", err, "forwarded", s.Processed, "failed", s.Failed,
		"reclaimed", s.Reclaimed, "dead_lettered", s.DeadLettered)
	return err
}
