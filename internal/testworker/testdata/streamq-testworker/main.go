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
// With -flow-keys n, it also gauges how many jobs run at once, in all and
// per flow key (testworker.Books.SetFlowKeys); with -flow-kinds also per
// kind, and per kind and key (testworker.KindOf).
//
// With -crash-on n, the job numbered n kills the worker (SIGKILL on itself)
// each time it starts: a poison pill for testing MaxDeliveries after crashes.
// With -exit-on, -panic-on and -fail-on (lists of numbers and ranges, such
// as 1000-1024), those jobs end the process with os.Exit (status 3), panic
// or return an error at every start, after the start was recorded. An exit
// pill first quiesces the worker (see testworker.Quiesce): it cancels Run
// and waits, up to -quiesce, until every job the worker holds has started
// (and recorded its start) or waits to run alone, so that no job is charged
// a start that did not happen; if that takes longer the status is 4.
// -quiesce 0 exits at once.
//
// It prints "ready <consumer name>" on stdout once the consumer is about to
// run, stops gracefully on SIGTERM or SIGINT (Run returns, running jobs
// finish), and exits 0 after a graceful stop. Logs go to -log-file, or to
// stderr.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/testworker"
)

func main() {
	f := testworker.RegisterFlags()
	concurrency := flag.Int("concurrency", 8, "consumer concurrency")
	minIdle := flag.Duration("min-idle", 500*time.Millisecond, "consumer MinIdle: how soon abandoned jobs are taken over")
	maxDeliveries := flag.Int("max-deliveries", streamq.DefaultMaxDeliveries, "consumer MaxDeliveries")
	shutdown := flag.Duration("shutdown-timeout", 10*time.Second, "consumer ShutdownTimeout")
	work := testworker.Range{Min: time.Millisecond, Max: 5 * time.Millisecond}
	flag.Var(&work, "work", "simulated work per job: a duration or a range min-max, e.g. 1ms-5ms")
	flowKeys := flag.Int("flow-keys", 0, "gauge the concurrency of this many flow keys (job n belongs to key k<n mod flow-keys>)")
	flowKinds := flag.Bool("flow-kinds", false, "with -flow-keys, gauge per kind too (job n has kind testworker.KindOf(n, flow-keys))")
	crashOn := flag.Int("crash-on", -1, "SIGKILL this process when it starts the job with this number (a poison pill), after recording the start")
	pills := testworker.RegisterPillFlags()
	testworker.Main("streamq-testworker", f, slog.LevelInfo, nil, func(ctx context.Context, log *slog.Logger, q *streamq.Queue) error {
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		books := testworker.NewBooks(q, work)
		books.CrashOn(*crashOn)
		books.SetFlowKeys(*flowKeys, *flowKinds)
		c, err := streamq.NewConsumer(q, streamq.HandlerFunc(books.Handle), &streamq.ConsumerConfig{
			Name:            f.Name,
			Concurrency:     *concurrency,
			Block:           100 * time.Millisecond,
			MinIdle:         *minIdle,
			MaxDeliveries:   *maxDeliveries,
			ShutdownTimeout: *shutdown,
			Backoff:         streamq.ExponentialBackoff(20*time.Millisecond, time.Second),
			Logger:          log,
		})
		if err != nil {
			return err
		}
		books.SetOwner(q, c.Name())
		pills.Arm(books, log, stop, c.Health)
		if err := q.Setup(ctx); err != nil {
			return err
		}
		log.Info("streamq-testworker: ready", "consumer", c.Name(), "pid", os.Getpid())
		testworker.Ready(c.Name())
		err = c.Run(ctx)
		s := c.Stats()
		log.Info("streamq-testworker: stopped", "error", err, "processed", s.Processed, "failed", s.Failed,
			"reclaimed", s.Reclaimed, "deleted", s.Deleted, "claims_lost", s.ClaimsLost, "dead_lettered", s.DeadLettered)
		return err
	})
}
