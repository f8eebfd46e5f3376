package writebehind_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/writebehind"
)

const (
	// crashKills is how many times the crash test SIGKILLs a worker.
	crashKills = 5
	// crashWaitWrite bounds the wait for a worker to start a batch.
	crashWaitWrite = time.Minute
	// crashMaxUpdates bounds the writes made while the workers are killed.
	crashMaxUpdates = 500_000
	// crashChangesPerKill is how many changes are written between two kills.
	crashChangesPerKill = 2000
)

// buildCrashWorker builds cmd/writebehind-crash-worker into a temporary
// directory and returns the binary's path.
func buildCrashWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "writebehind-crash-worker")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin,
		"github.com/streamq/streamq/cmd/writebehind-crash-worker").CombinedOutput()
	if err != nil {
		t.Fatalf("go build writebehind-crash-worker: %v\n%s", err, out)
	}
	return bin
}

// crashWorker is one running writebehind-crash-worker process.
type crashWorker struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	writes chan struct{} // one per "write" line, dropped when full
	eof    chan struct{} // closed when stdout is closed (the process ended)
	stderr *lockedBuffer
	ended  bool

	mu       sync.Mutex
	consumer string // consumer name, from the "ready" line
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 64<<10 {
		l.b.Reset() // keep the tail only
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startCrashWorker starts a worker and its stdout reader. The test ends it
// (SIGKILL) at cleanup if it still runs.
func startCrashWorker(t *testing.T, bin, name string, args ...string) *crashWorker {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &crashWorker{
		t:      t,
		name:   name,
		cmd:    cmd,
		writes: make(chan struct{}, 1024),
		eof:    make(chan struct{}),
		stderr: &lockedBuffer{},
	}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go w.read(stdout)
	t.Cleanup(func() {
		w.kill()
		if t.Failed() {
			t.Logf("stderr of %s:\n%s", w.name, w.stderr.String())
		}
	})
	return w
}

// read forwards "write" lines to w.writes until stdout closes.
func (w *crashWorker) read(stdout io.Reader) {
	defer close(w.eof)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "write "):
			select {
			case w.writes <- struct{}{}:
			default:
			}
		case strings.HasPrefix(line, "ready "):
			w.mu.Lock()
			w.consumer = strings.TrimPrefix(line, "ready ")
			w.mu.Unlock()
		}
	}
}

// waitWrites waits until the worker has started n more Sink.Write calls.
func (w *crashWorker) waitWrites(n int) {
	w.t.Helper()
forget: // the writes announced before now
	for range cap(w.writes) {
		select {
		case <-w.writes:
		default:
			break forget
		}
	}
	timeout := time.NewTimer(crashWaitWrite)
	defer timeout.Stop()
	for range n {
		select {
		case <-w.writes:
		case <-w.eof:
			w.t.Fatalf("%s exited unexpectedly; stderr:\n%s", w.name, w.stderr.String())
		case <-timeout.C:
			w.t.Fatalf("%s started no batch within %s", w.name, crashWaitWrite)
		}
	}
}

// consumerName returns the worker's consumer name ("" before it is ready).
func (w *crashWorker) consumerName() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.consumer
}

// kill SIGKILLs the worker and reaps it. Killing an ended worker does nothing.
func (w *crashWorker) kill() {
	if w.ended {
		return
	}
	w.ended = true
	_ = w.cmd.Process.Kill()
	<-w.eof // SIGKILL closes the pipe; read it to the end before Wait
	_ = w.cmd.Wait()
}

// stop asks the worker to shut down gracefully (SIGTERM) and waits for it,
// killing it if it does not exit within 30 s.
func (w *crashWorker) stop() {
	w.t.Helper()
	if w.ended {
		return
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.eof:
	case <-time.After(30 * time.Second):
		w.t.Errorf("%s did not stop within 30s of SIGTERM", w.name)
	}
	w.kill()
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
	bin := buildCrashWorker(t)
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
		if db, err = writebehind.OpenSQLite(dbPath); err != nil {
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
	q := newQueue(t, nil)
	w := newWriter(t, q, nil)
	args := append([]string{
		"-redis", redistest.Addr(), "-queue", q.Name(), "-table", table,
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
		// Let a few thousand changes through between kills.
		redistest.WaitFor(t, time.Minute, "more changes written", func() bool {
			n, err := q.Client().XLen(ctx, q.StreamKey()).Result()
			return err == nil && n >= int64(k+1)*crashChangesPerKill
		})
		// Kill the worker as its sink starts a batch: with the transaction
		// open, or committing, or just committed and not yet acknowledged.
		workers[i].waitWrites(1 + rand.IntN(3))
		workers[i].kill()
		name := workers[i].consumerName()
		pending, err := q.Client().XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: q.StreamKey(), Group: q.Group(), Start: "-", End: "+", Count: 10_000, Consumer: name,
		}).Result()
		if err != nil {
			t.Fatal(err)
		}
		orphaned += int64(len(pending))
		t.Logf("kill %d: %s (consumer %s) killed during a batch, leaving %d changes pending", k+1, workers[i].name, name, len(pending))
		workers[i] = startCrashWorker(t, bin, workers[i].name, args...)
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
		wk.stop()
	}
	if n := deadLetters(t, q); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
	checkConsistent(t, w, readRows(t, db, table), res.expect)
}
