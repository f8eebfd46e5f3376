// Package testworker holds what the helper programs of the crash tests
// share: the common flags, the logger, the
// signal-driven main function, the line protocol on stdout that
// internal/proctest reads, and the bookkeeping job handler that lets a test
// count what a SIGKILLed worker had started, finished and left unfinished.
//
// The helper programs live in testdata (streamq-testworker,
// priority-testworker and writebehind-crash-worker), so that go install
// and ./... patterns leave them out; the tests build them with
// proctest.Build from the import paths [StreamqWorker], [PriorityWorker]
// and [WritebehindWorker].
//
// A helper program looks like this:
//
//	func main() {
//		f := testworker.RegisterFlags() // -addr, -queue, -name, -log-file
//		concurrency := flag.Int("concurrency", 8, "consumer concurrency")
//		testworker.Main("my-testworker", f, slog.LevelInfo, nil,
//			func(ctx context.Context, log *slog.Logger, q *streamq.Queue) error {
//				// ... a consumer c of q, named f.Name, logging to log ...
//				testworker.Ready(c.Name())
//				return c.Run(ctx)
//			})
//	}
package testworker

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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
)

// Import paths of the helper programs, for proctest.Build.
const (
	// StreamqWorker runs one streamq consumer (integration crash tests).
	StreamqWorker = "github.com/streamq/streamq/internal/testworker/testdata/streamq-testworker"
	// PriorityWorker runs a priority forwarder or worker (priority and
	// integration crash tests).
	PriorityWorker = "github.com/streamq/streamq/internal/testworker/testdata/priority-testworker"
	// WritebehindWorker runs a write-behind handler into SQLite or
	// PostgreSQL (writebehind crash tests).
	WritebehindWorker = "github.com/streamq/streamq/internal/testworker/testdata/writebehind-crash-worker"
	// WorkflowWorker runs consumers of two queues with the workflow
	// middleware (integration workflow crash test).
	WorkflowWorker = "github.com/streamq/streamq/internal/testworker/testdata/workflow-testworker"
)

// Flags are the flags every helper takes.
type Flags struct {
	Addr    string // -addr: Redis address, host:port
	Queue   string // -queue: queue name; required
	Name    string // -name: consumer or worker name; "" for the library's default
	LogFile string // -log-file: append logs to this file; "" for stderr
}

// RegisterFlags defines -addr, -queue, -name and -log-file on the command
// line's flag set and returns where they land once [Main] parsed it.
func RegisterFlags() *Flags {
	f := &Flags{}
	flag.StringVar(&f.Addr, "addr", "127.0.0.1:6379", "Redis address, host:port")
	flag.StringVar(&f.Queue, "queue", "", "queue name (required)")
	flag.StringVar(&f.Name, "name", "", "consumer or worker name (default: the library's <host>-<pid>-<random>)")
	flag.StringVar(&f.LogFile, "log-file", "", "append logs to this file (default: stderr)")
	return f
}

// open returns what every helper starts with: a text logger at level that
// appends to -log-file (or writes to stderr if it is not set), and the queue
// -queue on a Redis client for -addr. The returned function closes the
// client and the log file.
func (f *Flags) open(level slog.Level) (*slog.Logger, *streamq.Queue, func(), error) {
	var out io.Writer = os.Stderr
	closeLog := func() {}
	if f.LogFile != "" {
		file, err := os.OpenFile(f.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, nil, err
		}
		out, closeLog = file, func() { _ = file.Close() }
	}
	rdb := redis.NewClient(&redis.Options{Addr: f.Addr})
	q, err := streamq.NewQueue(rdb, f.Queue, nil)
	if err != nil {
		_ = rdb.Close()
		closeLog()
		return nil, nil, nil, err
	}
	closeAll := func() {
		_ = rdb.Close()
		closeLog()
	}
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level})), q, closeAll, nil
}

// Main is the main function of the helper named prog (the name starts its
// messages). It parses the command line, requires -queue, and calls check
// (if not nil) for the program's own flags; a failure there prints the
// error and the usage and exits with status 2. Then it opens a text logger
// at level, writing to -log-file or stderr, and the queue -queue on a Redis
// client for -addr, and calls run with them and a context that SIGINT or
// SIGTERM cancels. It exits with status 1 if that fails, and returns (status
// 0) if run returns nil, or the context's error after a signal.
func Main(prog string, f *Flags, level slog.Level, check func() error,
	run func(ctx context.Context, log *slog.Logger, q *streamq.Queue) error) {
	flag.Parse()
	usage := func(err error) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
		flag.Usage()
		os.Exit(2)
	}
	if f.Queue == "" {
		usage(errors.New("-queue is required"))
	}
	if check != nil {
		if err := check(); err != nil {
			usage(err)
		}
	}
	if err := f.run(level, run); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", prog, err)
		os.Exit(1)
	}
}

// run is Main after the command line was checked; it returns nil after a
// graceful stop.
func (f *Flags) run(level slog.Level, run func(ctx context.Context, log *slog.Logger, q *streamq.Queue) error) error {
	log, q, closeAll, err := f.open(level)
	if err != nil {
		return err
	}
	defer closeAll()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, q); err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
		return err
	}
	return nil
}

// Println writes s and a newline on stdout in one write, so that lines
// printed by concurrent goroutines do not interleave and each reaches the
// test at once (stdout is not buffered). Write errors are ignored: a test
// that stopped reading does not need the line.
func Println(s string) {
	_, _ = os.Stdout.WriteString(s + "\n")
}

// Ready prints the line "ready <name>" that tells the test (see
// internal/proctest) that the helper runs, with its consumer or worker name.
func Ready(name string) {
	Println("ready " + name)
}

// Die ends the process with SIGKILL, as a crash would: no deferred
// function, acknowledgement or log flush runs. It does not return.
func Die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered asynchronously
}

// Sleep waits for d, or until ctx is done, and then returns its cause.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Range is a duration or a random duration in [Min, Max]. It is a
// flag.Value: "5ms" or "1ms-5ms".
type Range struct {
	Min, Max time.Duration
}

// String returns the range in the form that Set reads.
func (r *Range) String() string {
	if r.Max <= r.Min {
		return r.Min.String()
	}
	return r.Min.String() + "-" + r.Max.String()
}

// Set parses "d" or "min-max" (Go durations, 0 <= min <= max).
func (r *Range) Set(s string) error {
	a, b, isRange := strings.Cut(s, "-")
	lo, err := time.ParseDuration(a)
	if err != nil {
		return err
	}
	hi := lo
	if isRange {
		if hi, err = time.ParseDuration(b); err != nil {
			return err
		}
	}
	if lo < 0 || hi < lo {
		return fmt.Errorf("%q: want 0 <= min <= max", s)
	}
	r.Min, r.Max = lo, hi
	return nil
}

// Pick returns a duration drawn uniformly from the range.
func (r Range) Pick() time.Duration {
	if r.Max <= r.Min {
		return r.Min
	}
	return r.Min + rand.N(r.Max-r.Min+1)
}

// Key parts of the bookkeeping of [Books], under the queue's hash tag (see
// streamq.Queue.Key).
const (
	KeyStarted  = "test:started"
	KeyAttempt  = "test:attempt"
	KeyStartLog = "test:startlog"
	KeyHandled  = "test:handled"
	KeyInflight = "test:inflight:" // + consumer or worker name
)

// Books is a job handler for jobs whose payload is a job number. It
// simulates work and keeps books in Redis, under the queue's keys, so that a
// test that SIGKILLs workers can count what was handled, what was in flight,
// and how often each job ran:
//
//   - [KeyStarted]: hash job number -> starts (HINCRBY);
//   - [KeyAttempt]: hash job number -> the Message.Attempt of its latest
//     start, set with the start (so a test can compare the library's count
//     of attempts with the starts it counted itself);
//   - [KeyStartLog]: list of "<job number> <owner> <job ID> <attempt>",
//     one per start, for the failure messages of a test;
//   - [KeyHandled]: hash job number -> completions (HINCRBY);
//   - [KeyInflight] + owner name: hash job number -> job ID, set when a job
//     starts on this consumer or worker and removed in the transaction that
//     counts its completion. What it holds after a SIGKILL was started here
//     and never finished.
//
// A job counts as handled once its completion is recorded, before the
// handler returns nil, so that a test sees every run that could have had an
// effect.
type Books struct {
	rdb                                           redis.UniversalClient
	started, attempt, startLog, handled, inflight string
	owner                                         string
	work                                          Range
	crashOn                                       int
	pills                                         Pills
	running                                       atomic.Int64
	flowKeys                                      int
	flowKinds                                     bool
}

// Keys of the flow gauge (see [Books.SetFlowKeys]).
const (
	// KeyFlowRunning + gauge field: set of the numbers of the jobs running
	// now.
	KeyFlowRunning = "test:flow:running:"
	// KeyFlowRuns: hash job number -> its runs in progress (more than one
	// when a job was taken over from a worker that still ran it).
	KeyFlowRuns = "test:flow:runs"
	// KeyFlowMost: hash gauge field -> the most jobs seen running at once;
	// field "dup" counts the runs that started while another run of the
	// same job was in progress. The gauge fields are "" (all jobs), the
	// flow key, and with kinds "kind:<kind>" and "kind:<kind>:<key>".
	KeyFlowMost = "test:flow:most"
)

// FlowKeyOf returns the flow key of job number n among keys keys.
func FlowKeyOf(n, keys int) string { return "k" + strconv.Itoa(n%keys) }

// Kinds of the flow gauge with kinds: one job in ten of each key is rare.
const (
	KindRare   = "rare"
	KindCommon = "common"
)

// KindOf returns the kind of job number n among keys flow keys, when jobs
// have kinds: [KindRare] for every tenth job of a key, else [KindCommon].
func KindOf(n, keys int) string {
	if (n/keys)%10 == 0 {
		return KindRare
	}
	return KindCommon
}

// gaugeEnter counts a run of a job: the first run of a job in progress
// adds it to the sets of its gauge fields and raises the most seen of
// each; a second one counts as a duplicate run.
//
// KEYS[1] hash of runs in progress, KEYS[2] hash of the most seen, KEYS[3..]
// the sets of the job's gauge fields
// ARGV[1] job number, ARGV[2..] the gauge fields (one per set)
var gaugeEnter = redis.NewScript(`
if redis.call('HINCRBY', KEYS[1], ARGV[1], 1) > 1 then
  redis.call('HINCRBY', KEYS[2], 'dup', 1)
  return 0
end
for i = 3, #KEYS do
  redis.call('SADD', KEYS[i], ARGV[1])
  local n = redis.call('SCARD', KEYS[i])
  local f = ARGV[i - 1]
  if n > tonumber(redis.call('HGET', KEYS[2], f) or 0) then redis.call('HSET', KEYS[2], f, n) end
end
return 1
`)

// GaugeLeave ends a run of a job: the last run in progress takes it out of
// the sets. Tests call it for the unfinished jobs of a killed worker.
//
// KEYS and ARGV as gaugeEnter's.
var GaugeLeave = redis.NewScript(`
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  for i = 3, #KEYS do redis.call('SREM', KEYS[i], ARGV[1]) end
end
return 1
`)

// Gauge returns the KEYS and ARGV of the flow gauge's scripts for job
// number n among keys flow keys (with kinds: see [KindOf]), under base
// (the queue's key prefix with its hash tag).
func Gauge(base string, n, keys int, kinds bool) ([]string, []any) {
	key := FlowKeyOf(n, keys)
	fields := []string{"", key}
	if kinds {
		kind := KindOf(n, keys)
		fields = append(fields, "kind:"+kind, "kind:"+kind+":"+key)
	}
	ks := []string{base + KeyFlowRuns, base + KeyFlowMost}
	args := []any{n}
	for _, f := range fields {
		ks = append(ks, base+KeyFlowRunning+f)
		args = append(args, f)
	}
	return ks, args
}

// SetFlowKeys makes b gauge the concurrency of flow keys: job number n
// belongs to key FlowKeyOf(n, keys) (and with kinds to kind KindOf(n,
// keys)), and every start and end is recorded in [KeyFlowRunning] sets,
// the most seen in [KeyFlowMost]. Call it before the first job runs.
func (b *Books) SetFlowKeys(keys int, kinds bool) {
	b.flowKeys, b.flowKinds = keys, kinds
}

func (b *Books) gauge(ctx context.Context, n int, enter bool) error {
	if b.flowKeys <= 0 {
		return nil
	}
	keys, args := Gauge(strings.TrimSuffix(b.started, KeyStarted), n, b.flowKeys, b.flowKinds)
	if enter {
		return gaugeEnter.Run(ctx, b.rdb, keys, args...).Err()
	}
	return GaugeLeave.Run(ctx, b.rdb, keys, args...).Err()
}

// NewBooks returns Books for the jobs of q that work for a duration picked
// from work. Call [Books.SetOwner] before the first job runs.
func NewBooks(q *streamq.Queue, work Range) *Books {
	k := core.Of(q).Keys
	return &Books{rdb: core.Of(q).RDB, started: k.Part(KeyStarted), attempt: k.Part(KeyAttempt), startLog: k.Part(KeyStartLog), handled: k.Part(KeyHandled), work: work, crashOn: -1}
}

// SetOwner names the consumer or worker of q whose jobs b handles: it sets
// the in-flight key. Call it before the first job runs.
func (b *Books) SetOwner(q *streamq.Queue, name string) {
	b.owner = name
	b.inflight = core.Of(q).Keys.Part(KeyInflight + name)
}

// CrashOn makes job number n a poison pill: it kills the process ([Die])
// whenever it starts, after its start was recorded. n < 0: none (the
// default). Call it before the first job runs.
func (b *Books) CrashOn(n int) {
	b.crashOn = n
}

// SetPills makes the jobs of p poison pills. Call it before the first job
// runs.
func (b *Books) SetPills(p Pills) {
	b.pills = p
}

// Running returns the number of jobs whose start was recorded and whose
// handler has not returned.
func (b *Books) Running() int64 {
	return b.running.Load()
}

// Handle records the start, works for a random time and records the
// completion; it returns nil only after the completion is stored. A poison
// pill (see [Books.CrashOn], [Books.SetPills]) acts after its start was
// recorded.
func (b *Books) Handle(ctx context.Context, m *streamq.Message) error {
	n, err := strconv.Atoi(string(m.Payload))
	if err != nil || n < 0 {
		return streamq.Permanent(fmt.Errorf("payload %q is not a job number", m.Payload))
	}
	field := strconv.Itoa(n)
	if _, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, b.started, field, 1)
		p.HSet(ctx, b.attempt, field, m.Attempt)
		p.HSet(ctx, b.inflight, field, m.ID)
		p.RPush(ctx, b.startLog, fmt.Sprintf("%d %s %s %d", n, b.owner, m.ID, m.Attempt))
		return nil
	}); err != nil {
		return fmt.Errorf("record start of job %d: %w", n, err)
	}
	b.running.Add(1)
	defer b.running.Add(-1)
	if err := b.gauge(ctx, n, true); err != nil {
		return fmt.Errorf("gauge start of job %d: %w", n, err)
	}
	// The end is gauged before the handler returns, so before its slot is
	// given back.
	defer func() { _ = b.gauge(context.WithoutCancel(ctx), n, false) }()
	if n == b.crashOn {
		Die()
	}
	if err := b.pills.act(n); err != nil {
		return err
	}
	if err := Sleep(ctx, b.work.Pick()); err != nil {
		return err
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
