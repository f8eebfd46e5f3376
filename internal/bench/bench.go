// Package bench measures streamq against hand-written go-redis loops that
// do the same Redis work with nothing else around them (the baseline), in the
// same process, on the same Redis, with the same payload and batch sizes. It
// prints one line per scenario with both rates and their ratio, and can write
// every run to a JSON file (see docs/performance.md).
//
// It is the body of both `streamq bench` and cmd/streamq-bench:
//
//	go run ./cmd/streamq-bench                       # every scenario, median of 3
//	go run ./cmd/streamq-bench -scenarios e2e -concurrency 64 -cpuprofile cpu.out
//	go run ./cmd/streamq-bench -memcheck             # consumer RSS after 100k and 1M jobs
//	streamq bench -scenarios enqueue,batch -runs 1
//
// Every key it writes carries a per-process run ID and is deleted before it
// exits; it never flushes the database. Every loop is bounded in count and in
// time (-run-timeout per measurement, -max-time overall).
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/rdb"
)

// allScenarios lists the scenarios in the order they run.
var allScenarios = []string{"enqueue", "batch", "e2e", "latency", "middleware"}

// extraScenarios run only when named: they need a Redis server of their own.
var extraScenarios = []string{"costs"}

// options are the command-line flags.
type options struct {
	addr         string
	scenarios    []string
	jobs         int
	enqueueJobs  int
	payload      int
	runs         int
	producers    []int
	batchSizes   []int
	concurrency  []int
	latConc      int
	latDuration  time.Duration
	latRate      float64
	latLoad      float64
	jsonPath     string
	maxTime      time.Duration
	runTimeout   time.Duration
	cpuProfile   string
	memProfile   string
	middleware   bool
	mwSampled    float64       // fraction of the middleware chain's spans sampled
	mwTimeout    time.Duration // the middleware chain's Timeout; 0: none
	memcheck     bool
	memcheckJobs int
	memcheckConc int

	// Internal: the consumer process started by -memcheck.
	memcheckConsumer bool
	queue            string

	// self re-runs the benchmark in this executable (see Main).
	self []string
}

// Main runs the benchmark with the command-line arguments args (without the
// program name) and returns the process exit code: 0 done, 1 failed, 2 bad
// flags. self is what re-runs the benchmark in the current executable after
// its path: nil for cmd/streamq-bench, []string{"bench"} for `streamq bench`
// (the -memcheck scenario starts its consumer that way).
func Main(args []string, stdout, stderr io.Writer, self []string) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "streamq-bench:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.maxTime)
	defer cancel()

	o.self = self
	if o.memcheckConsumer {
		if err := memcheckConsumer(ctx, o, stdout); err != nil {
			fmt.Fprintln(stderr, "streamq-bench: memcheck consumer:", err)
			return 1
		}
		return 0
	}

	b, err := newBench(ctx, o, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "streamq-bench:", err)
		return 1
	}
	defer b.close()

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "streamq-bench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "streamq-bench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	if o.memcheck {
		err = b.memcheck(ctx)
	} else {
		err = b.runScenarios(ctx)
	}
	if o.memProfile != "" {
		if werr := writeHeapProfile(o.memProfile); werr != nil && err == nil {
			err = werr
		}
	}
	if o.jsonPath != "" {
		if werr := b.writeJSON(o.jsonPath); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "streamq-bench:", err)
		return 1
	}
	return 0
}

const usageText = `streamq-bench measures streamq next to a raw go-redis baseline doing the same
Redis work (same process, same Redis, same payload and batch sizes).

Usage:
  streamq-bench [flags]

Scenarios (-scenarios, comma-separated; default all):
  enqueue     Producer.Enqueue, one job per call, with -producers goroutines;
              baseline: XADD MAXLEN ~ per call.
  batch       Producer.EnqueueBatch with -batch-sizes jobs per call;
              baseline: the same number of XADD MAXLEN ~ in one pipeline.
  e2e         -jobs jobs pre-enqueued, then a Consumer with a no-op handler at
              each -concurrency; baseline: XREADGROUP COUNT c + c handler
              goroutines + batched XACK. Also reports Redis commands per job
              (INFO commandstats delta / jobs) and allocations per job.
  latency     enqueue -> handler start, p50/p99/p99.9, with an open-loop
              producer (16 goroutines, one job per call, paced by a 1 ms
              ticker) offering -latency-load of the max pipeline rate (first
              measured for 5 s with producers and consumer running flat out)
              for -latency-duration; the baseline gets the same offered rate.
  middleware  e2e with middleware.Default (Recover, Tracing, Metrics, Logging;
              OpenTelemetry SDK providers that drop what they record; spans
              sampled as -middleware-sampled says, none by default; Timeout
              with -middleware-timeout) around the no-op handler, against the
              same baseline.
  costs       (only when named; needs a Redis server of its own, as INFO
              commandstats and INFO cpu count every client) Redis commands and
              Redis CPU time per job of 2,000 jobs enqueued one by one
              and run at concurrency 16, for plain, delayed, retried once,
              unique, typed and priority jobs; the reference is the plain
              variant of the same run.

Each measurement runs -runs times, streamq and baseline alternating; lines show
medians. -memcheck runs a consumer in a child process instead and samples its
RSS every 100,000 jobs up to -memcheck-jobs.

Flags:
`

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("streamq-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	var scen, producers, batches, conc string
	fs.StringVar(&o.addr, "addr", "127.0.0.1:6379", "Redis address (host:port)")
	fs.StringVar(&scen, "scenarios", strings.Join(allScenarios, ","), "comma-separated scenarios to run: "+strings.Join(allScenarios, ", "))
	fs.IntVar(&o.jobs, "jobs", 200_000, "jobs pre-enqueued for each end-to-end run")
	fs.IntVar(&o.enqueueJobs, "enqueue-jobs", 100_000, "jobs enqueued by each enqueue/batch run")
	fs.IntVar(&o.payload, "payload", 128, "payload size in bytes")
	fs.IntVar(&o.runs, "runs", 3, "runs per measurement; the median is reported")
	fs.StringVar(&producers, "producers", "1,16", "enqueue scenario: producer goroutines")
	fs.StringVar(&batches, "batch-sizes", "100,1000", "batch scenario: jobs per EnqueueBatch call / per pipeline")
	fs.StringVar(&conc, "concurrency", "1,16,64", "e2e scenario: handler goroutines")
	fs.IntVar(&o.latConc, "latency-concurrency", 16, "latency scenario: handler goroutines")
	fs.DurationVar(&o.latDuration, "latency-duration", 10*time.Second, "latency scenario: how long the producer runs")
	fs.Float64Var(&o.latRate, "latency-rate", 0, "latency scenario: jobs/s offered; 0 means -latency-load times the measured max pipeline rate")
	fs.Float64Var(&o.latLoad, "latency-load", 0.5, "latency scenario: fraction of the max pipeline rate to offer when -latency-rate is 0")
	fs.StringVar(&o.jsonPath, "json", "", "write all results to this JSON file")
	fs.DurationVar(&o.maxTime, "max-time", 30*time.Minute, "bound on the whole run; what is left is skipped")
	fs.DurationVar(&o.runTimeout, "run-timeout", 2*time.Minute, "bound on one measurement; a run that hits it counts what it did")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file; the measured work is labelled side=streamq or side=baseline (go tool pprof -tagfocus side=streamq)")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile at the end to this file")
	fs.BoolVar(&o.middleware, "middleware", false, "run the e2e scenario with the middleware chain of the middleware scenario too")
	fs.Float64Var(&o.mwSampled, "middleware-sampled", 0, "middleware scenario: fraction of spans the tracer samples (ParentBased(TraceIDRatioBased)); 1 samples every span")
	fs.DurationVar(&o.mwTimeout, "middleware-timeout", 0, "middleware scenario: add middleware.Timeout with this limit; 0 leaves it out, as Default does by default")
	fs.BoolVar(&o.memcheck, "memcheck", false, "measure consumer RSS over many jobs instead of running the scenarios")
	fs.IntVar(&o.memcheckJobs, "memcheck-jobs", 1_000_000, "memcheck: jobs to process (RSS is sampled every 100,000)")
	fs.IntVar(&o.memcheckConc, "memcheck-concurrency", 16, "memcheck: consumer concurrency")
	fs.BoolVar(&o.memcheckConsumer, "memcheck-consumer", false, "internal: run as the consumer process of -memcheck")
	fs.StringVar(&o.queue, "queue", "", "internal: queue name for -memcheck-consumer")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: all settings are flags (see -h)", fs.Args())
	}
	var err error
	if o.producers, err = intList("producers", producers); err != nil {
		return nil, err
	}
	if o.batchSizes, err = intList("batch-sizes", batches); err != nil {
		return nil, err
	}
	if o.concurrency, err = intList("concurrency", conc); err != nil {
		return nil, err
	}
	for _, s := range strings.Split(scen, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if s == "all" {
			o.scenarios = append(o.scenarios, allScenarios...)
			continue
		}
		if !slices.Contains(allScenarios, s) && !slices.Contains(extraScenarios, s) {
			return nil, fmt.Errorf("-scenarios: unknown scenario %q: use some of %s", s, strings.Join(append(allScenarios, extraScenarios...), ","))
		}
		o.scenarios = append(o.scenarios, s)
	}
	switch {
	case o.jobs < 1 || o.jobs > 10_000_000:
		return nil, fmt.Errorf("-jobs %d: use 1..10000000", o.jobs)
	case o.enqueueJobs < 1 || o.enqueueJobs > 10_000_000:
		return nil, fmt.Errorf("-enqueue-jobs %d: use 1..10000000", o.enqueueJobs)
	case o.payload < 0 || o.payload > 1<<20:
		return nil, fmt.Errorf("-payload %d: use 0..1048576 bytes", o.payload)
	case o.runs < 1 || o.runs > 99:
		return nil, fmt.Errorf("-runs %d: use 1..99", o.runs)
	case o.latConc < 1 || o.latConc > 10_000:
		return nil, fmt.Errorf("-latency-concurrency %d: use 1..10000", o.latConc)
	case o.latDuration <= 0 || o.latDuration > time.Hour:
		return nil, fmt.Errorf("-latency-duration %s: use a positive duration up to 1h", o.latDuration)
	case o.latRate < 0 || o.latRate > 10_000_000:
		return nil, fmt.Errorf("-latency-rate %g: use 0 (derive it) or a rate up to 1e7 jobs/s", o.latRate)
	case o.latLoad <= 0 || o.latLoad > 2:
		return nil, fmt.Errorf("-latency-load %g: use a fraction in (0, 2]", o.latLoad)
	case !(o.mwSampled >= 0 && o.mwSampled <= 1):
		return nil, fmt.Errorf("-middleware-sampled %g: use a fraction in [0, 1]", o.mwSampled)
	case o.mwTimeout < 0:
		return nil, fmt.Errorf("-middleware-timeout %s: use 0 (no Timeout) or a positive duration", o.mwTimeout)
	case o.maxTime <= 0:
		return nil, fmt.Errorf("-max-time %s: use a positive duration", o.maxTime)
	case o.runTimeout <= 0:
		return nil, fmt.Errorf("-run-timeout %s: use a positive duration", o.runTimeout)
	case o.memcheckJobs < 100_000 || o.memcheckJobs > 100_000_000 || o.memcheckJobs%100_000 != 0:
		return nil, fmt.Errorf("-memcheck-jobs %d: use a multiple of 100000 up to 100000000", o.memcheckJobs)
	case o.memcheckConc < 1 || o.memcheckConc > 10_000:
		return nil, fmt.Errorf("-memcheck-concurrency %d: use 1..10000", o.memcheckConc)
	case o.memcheckConsumer && o.queue == "":
		return nil, errors.New("-memcheck-consumer needs -queue")
	}
	return o, nil
}

func intList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 10_000 {
			return nil, fmt.Errorf("-%s: %q is not a number in 1..10000", name, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-%s: empty list", name)
	}
	return out, nil
}

// bench holds what all scenarios share.
type bench struct {
	o     *options
	out   io.Writer
	runID string
	admin *redis.Client // INFO, cleanup; never measured
	rep   *Report
	keys  []string // every key written, deleted by close

	chainNote string // what the middleware scenario's chain holds
}

func newBench(ctx context.Context, o *options, out io.Writer) (*bench, error) {
	admin := redis.NewClient(&redis.Options{Addr: o.addr})
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := admin.Ping(pctx).Err(); err != nil {
		admin.Close()
		return nil, fmt.Errorf("redis at %s does not answer PING: %w (start one, or pass -addr host:port)", o.addr, err)
	}
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	b := &bench{
		o:     o,
		out:   out,
		runID: fmt.Sprintf("%d-%s", os.Getpid(), hex.EncodeToString(rb[:])),
		admin: admin,
	}
	b.rep = newReport(pctx, o, admin)
	fmt.Fprintf(out, "streamq-bench: %s, %s/%s, %d CPUs (GOMAXPROCS %d), Redis %s at %s, payload %d B, median of %d runs\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0),
		b.rep.RedisVersion, o.addr, o.payload, o.runs)
	return b, nil
}

// name returns a queue name unique to this process and measurement.
func (b *bench) name(parts ...string) string {
	return "bench-" + b.runID + "-" + strings.Join(parts, "-")
}

// track remembers keys to delete when the benchmark ends.
func (b *bench) track(keys ...string) { b.keys = append(b.keys, keys...) }

// drop deletes keys now (between runs, so Redis memory stays small).
func (b *bench) drop(keys ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for k := range slices.Chunk(keys, 100) {
		_ = b.admin.Unlink(ctx, k...).Err()
	}
}

// close deletes every key this process wrote, including any whose run was
// cut short, by a bounded SCAN for the run ID, and the queues' entries in
// the registry of queues (see package inspect).
func (b *bench) close() {
	b.drop(b.keys...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var hcursor uint64
	for range 10_000 {
		fields, next, err := b.admin.HScan(ctx, rdb.Registry(streamq.DefaultKeyPrefix), hcursor, "*"+b.runID+"*", 1000).Result()
		if err != nil {
			break
		}
		for i := 0; i < len(fields); i += 2 {
			_ = b.admin.HDel(ctx, rdb.Registry(streamq.DefaultKeyPrefix), fields[i]).Err()
		}
		hcursor = next
		if hcursor == 0 {
			break
		}
	}
	var cursor uint64
	for range 100_000 {
		keys, next, err := b.admin.Scan(ctx, cursor, "*"+b.runID+"*", 1000).Result()
		if err != nil {
			break
		}
		if len(keys) > 0 {
			_ = b.admin.Unlink(ctx, keys...).Err()
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	_ = b.admin.Close()
}

func (b *bench) runScenarios(ctx context.Context) error {
	fmt.Fprintf(b.out, "%-28s %16s %16s %7s  %s\n", "scenario", "streamq", "baseline", "ratio", "notes")
	for _, s := range b.o.scenarios {
		if ctx.Err() != nil {
			fmt.Fprintf(b.out, "%-28s skipped: %v\n", s, context.Cause(ctx))
			continue
		}
		var err error
		switch s {
		case "enqueue":
			err = b.scenarioEnqueue(ctx)
		case "batch":
			err = b.scenarioBatch(ctx)
		case "e2e":
			var mw []streamq.Middleware
			if b.o.middleware {
				var note string
				var cleanup func()
				mw, note, cleanup = middlewareChain(b.o)
				defer cleanup()
				if mw == nil {
					fmt.Fprintf(b.out, "%-28s -middleware has no effect: %s\n", "e2e", note)
				}
			}
			err = b.scenarioE2E(ctx, "e2e", mw)
		case "latency":
			err = b.scenarioLatency(ctx)
		case "middleware":
			err = b.scenarioMiddleware(ctx)
		case "costs":
			err = b.scenarioCosts(ctx)
		}
		if err != nil {
			return fmt.Errorf("scenario %s: %w", s, err)
		}
	}
	return nil
}

// emit prints one result line and records it.
func (b *bench) emit(r Result) {
	r.finish()
	notes := r.Notes
	fmt.Fprintf(b.out, "%-28s %16s %16s %6.2fx  %s\n", r.Scenario+"/"+r.Variant,
		fmtRate(r.Streamq.Median, r.Unit), fmtRate(r.Baseline.Median, r.Unit), r.Ratio, notes)
	b.rep.Results = append(b.rep.Results, r)
}

func fmtRate(v float64, unit string) string {
	if unit == "" {
		unit = "jobs/s"
	}
	return fmt.Sprintf("%s %s", commas(int64(v+0.5)), unit)
}

// commas formats n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func (b *bench) writeJSON(path string) error {
	data, err := json.MarshalIndent(b.rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Fprintf(b.out, "wrote %s\n", path)
	return nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}
