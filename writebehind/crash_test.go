package writebehind_test

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/proctest"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/testworker"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/sqlite"
)

const (
	// crashKills is how many times the crash test SIGKILLs a worker.
	crashKills = 5
	// crashWaitWrite bounds the wait for a worker to start a batch.
	crashWaitWrite = time.Minute
	// crashMaxUpdates bounds the writes made while the workers are killed.
	crashMaxUpdates = 500_000
	// crashChangesPerKill is how many changes are written between two kills.
	crashChangesPerKill = 1000
	// crashStop bounds a worker's graceful stop after SIGTERM.
	crashStop = 30 * time.Second
)

// crashWorker is one running writebehind-crash-worker process.
type crashWorker struct {
	*proctest.Proc
	writes chan struct{} // one per "write" line, dropped when full

	mu       sync.Mutex
	consumer string // consumer name, from the "ready" line
}

// startCrashWorker starts a worker named name. The test ends it (SIGKILL) at
// cleanup if it still runs, and shows its stderr and log if the test failed.
func startCrashWorker(t *testing.T, bin, name string, args ...string) *crashWorker {
	t.Helper()
	w := &crashWorker{writes: make(chan struct{}, 1024)}
	logFile := filepath.Join(t.TempDir(), name+".log")
	w.Proc = proctest.Start(t, proctest.Options{
		Name:    name,
		Bin:     bin,
		Args:    append(slices.Clip(args), "-log-file", logFile),
		LogFile: logFile,
		OnLine:  w.line,
	})
	return w
}

// line forwards "write" lines to w.writes and notes the consumer name.
func (w *crashWorker) line(line string) {
	switch {
	case strings.HasPrefix(line, "write "):
		select {
		case w.writes <- struct{}{}:
		default:
		}
	case strings.HasPrefix(line, proctest.ReadyPrefix):
		w.mu.Lock()
		w.consumer = strings.TrimPrefix(line, proctest.ReadyPrefix)
		w.mu.Unlock()
	}
}

// waitWrites waits until the worker has started n more Sink.Write calls,
// within crashWaitWrite for all of them, and fails the test if the worker
// ended first.
func (w *crashWorker) waitWrites(t *testing.T, n int) {
	t.Helper()
forget: // the writes announced before now
	for range cap(w.writes) {
		select {
		case <-w.writes:
		default:
			break forget
		}
	}
	deadline := time.Now().Add(crashWaitWrite)
	for range n {
		proctest.Await(t, w.Proc, w.writes, time.Until(deadline), "a batch to start")
	}
	if w.Exited() { // it announced the writes, then ended by itself
		t.Fatalf("%s exited unexpectedly (%v); stderr:\n%s", w.Name(), w.Err(), w.Stderr())
	}
}

// consumerName returns the worker's consumer name ("" before it is ready).
func (w *crashWorker) consumerName() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.consumer
}

// TestWriteBehind_CrashWorker runs two worker processes that persist changes
// (strings, hashes and deletions) into one database, SIGKILLs them
// alternately while their sink is writing a batch and while updates keep
// coming, restarts them, and checks that after the queue drained the
// database holds exactly what the cache holds, with nothing dead-lettered.
// It runs against an SQLite file, and against PostgreSQL when it is
// reachable (see requirePostgres).
func TestWriteBehind_CrashWorker(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, testworker.WritebehindWorker)
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			crashWorkers(t, bin, d)
		})
	}
}

// crashWorkers is TestWriteBehind_CrashWorker for the database of dialect d.
func crashWorkers(t *testing.T, bin string, d writebehind.Dialect) {
	var (
		db    *sql.DB
		table = tableFor(t)
		dbArg []string
	)
	switch d {
	case writebehind.DialectSQLite:
		dbPath := filepath.Join(t.TempDir(), "crash.db")
		dbArg = []string{"-db", dbPath}
		var err error
		if db, err = sqlite.Open(dbPath); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
	case writebehind.DialectPostgres:
		db = openDB(t, d, "") // skips, or fails with STREAMQ_REQUIRE_POSTGRES, when unreachable
		dbArg = []string{"-dsn", postgresDSN()}
	}
	// Create the table before the workers start (each one's CreateSchema is
	// then a no-op: concurrent CREATE TABLE IF NOT EXISTS can fail in
	// PostgreSQL), and drop it after they were killed.
	newSinkOn(t, db, d, table)
	q := newQueueOn(t, redistest.NewIsolatedClient(t), nil) // workers killed while updates keep coming
	w := newWriter(t, q, nil)
	args := append([]string{
		"-addr", redistest.AddrOf(t, core.Of(q).RDB), "-queue", q.Name(), "-table", table,
		"-min-idle", "300ms", "-max-batch", "500", "-concurrency", "1000",
	}, dbArg...)
	workers := []*crashWorker{
		startCrashWorker(t, bin, "worker-0", args...),
		startCrashWorker(t, bin, "worker-1", args...),
	}

	stop := make(chan struct{})
	type result struct {
		expect map[string]want
		err    error
	}
	written := make(chan result, 1)
	go func() {
		e, err := runWorkloadMix(w, crashMaxUpdates, 1000, 4, 10, 30, stop)
		written <- result{e, err}
	}()
	stopWrites := sync.OnceFunc(func() { close(stop) })
	t.Cleanup(func() { stopWrites(); <-written })

	ctx := context.Background()
	orphaned := int64(0)
	for k := range crashKills {
		i := k % len(workers)
		// Let a thousand changes through between kills.
		redistest.WaitFor(t, time.Minute, "more changes written", func() bool {
			n, err := core.Of(q).RDB.XLen(ctx, core.Of(q).Keys.Stream).Result()
			return err == nil && n >= int64(k+1)*crashChangesPerKill
		})
		// Kill the worker as its sink starts a batch: with the transaction
		// open, or committing, or just committed and not yet acknowledged.
		workers[i].waitWrites(t, 1+rand.IntN(3))
		workers[i].Kill()
		name := workers[i].consumerName()
		pending, err := core.Of(q).RDB.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: core.Of(q).Keys.Stream, Group: q.Group(), Start: "-", End: "+", Count: 10_000, Consumer: name,
		}).Result()
		if err != nil {
			t.Fatal(err)
		}
		orphaned += int64(len(pending))
		t.Logf("kill %d: %s (consumer %s) killed during a batch, leaving %d changes pending", k+1, workers[i].Name(), name, len(pending))
		workers[i] = startCrashWorker(t, bin, workers[i].Name(), args...)
	}
	stopWrites()
	res := <-written
	written <- res // for the cleanup
	if res.err != nil {
		t.Fatal(res.err)
	}
	if s, err := q.Stats(context.Background()); err == nil {
		t.Logf("writes stopped after %d kills: %d changes in the stream, over %d keys", crashKills, s.Length, len(res.expect))
	}

	if orphaned == 0 {
		t.Error("no kill left a change pending: the takeover after a crash was not exercised")
	}
	waitDrained(t, q)
	for _, wk := range workers {
		wk.Stop(t, crashStop)
	}
	if n := deadLetters(t, q); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
	checkConsistent(t, w, readRows(t, db, table), res.expect)
}
