// Command worker-example is streamq's first demo: it enqueues a few hundred
// typed jobs of three kinds on two queues, runs one worker over both queues
// (one budget of handler goroutines, weighted 3:1) with a Mux that routes
// each kind to its typed handler (some jobs fail once and are retried, one
// has args that do not decode and is dead-lettered as malformed), and
// prints a summary.
//
// Then it shows write-behind: it updates a Redis cache through a
// writebehind.Writer (1,000 updates over 100 keys by default), persists the
// changes in batches with a writebehind.Handler into the SQLite file
// streamq-demo.db in the current directory (-db), or into PostgreSQL with
// -dsn, and checks that the database holds what the cache holds. The demo's
// table, streamq_demo, is dropped and created afresh on every run.
//
//	go run ./cmd/worker-example
//	go run ./cmd/worker-example -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// While it runs, the consumer's OpenTelemetry metrics are served on a
// Prometheus endpoint, http://127.0.0.1:9464/metrics (-metrics; -serve keeps
// serving after the demo until Ctrl-C), and the demo prints what a scrape
// returns.
//
// It connects to REDIS_URL (default redis://127.0.0.1:6379/0). When that
// default is not reachable and a redis-server binary is installed, it starts
// a private, throwaway redis-server for the demo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/middleware"
)

const defaultURL = "redis://127.0.0.1:6379/0"

func main() {
	jobs := flag.Int("jobs", 300, "number of jobs to enqueue")
	concurrency := flag.Int("concurrency", 16, "handler goroutines")
	failEvery := flag.Int("fail-every", 25, "every n-th job fails once and is retried (0: none)")
	verbose := flag.Bool("v", false, "log every retry and dead letter")
	metricsAddr := flag.String("metrics", "127.0.0.1:9464", "serve Prometheus metrics on this address at /metrics (empty: off)")
	serve := flag.Bool("serve", false, "after the demo, keep serving /metrics until interrupted")
	var wb wbOptions
	flag.StringVar(&wb.dsn, "dsn", "", "write-behind demo: PostgreSQL DSN (default: SQLite, see -db)")
	flag.StringVar(&wb.dbPath, "db", "streamq-demo.db", "write-behind demo: SQLite file, when -dsn is not set")
	flag.IntVar(&wb.updates, "updates", 1000, "write-behind demo: number of cache updates (0: skip the demo)")
	flag.IntVar(&wb.keys, "keys", 100, "write-behind demo: number of distinct keys")
	flag.Parse()

	level := slog.LevelError
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := demoOptions{jobs: *jobs, concurrency: *concurrency, failEvery: *failEvery, metricsAddr: *metricsAddr, serve: *serve, verbose: *verbose}
	if err := run(ctx, log, opts, wb); err != nil {
		fmt.Fprintln(os.Stderr, "worker-example:", err)
		os.Exit(1)
	}
}

// demoOptions are the job demo's flags.
type demoOptions struct {
	jobs, concurrency, failEvery int
	metricsAddr                  string
	serve, verbose               bool
}

// The demo's job kinds: typed args, each naming its kind. Emails go to the
// critical queue, images and reports to the default one.
type sendEmail struct {
	To string `json:"to"`
	N  int    `json:"n"`
}

func (sendEmail) Kind() string { return "email.send" }

type resizeImage struct {
	URL string `json:"url"`
	N   int    `json:"n"`
}

func (resizeImage) Kind() string { return "image.resize" }

type buildReport struct {
	Month string `json:"month"`
	N     int    `json:"n"`
}

func (buildReport) Kind() string { return "report.build" }

// Queue weights: under load the worker starts 3 critical jobs for every
// default one.
const criticalWeight, defaultWeight = 3, 1

func run(ctx context.Context, log *slog.Logger, o demoOptions, wb wbOptions) error {
	jobs, concurrency, failEvery := o.jobs, o.concurrency, o.failEvery
	rdb, cleanup, err := connect(ctx)
	if err != nil {
		return err
	}
	defer cleanup()

	critical, err := streamq.NewQueue(rdb, fmt.Sprintf("demo-%d-critical", os.Getpid()), nil)
	if err != nil {
		return err
	}
	defer deleteQueue(rdb, critical)
	normal, err := streamq.NewQueue(rdb, fmt.Sprintf("demo-%d-default", os.Getpid()), nil)
	if err != nil {
		return err
	}
	defer deleteQueue(rdb, normal)

	// Enqueue typed jobs: a third emails on the critical queue, the rest
	// images and reports on the default one, plus one report whose args are
	// not valid JSON (dead-lettered as malformed, its handler never called).
	start := time.Now()
	var emails []sendEmail
	var images []resizeImage
	var reports []buildReport
	for n := range jobs {
		switch n % 3 {
		case 0:
			emails = append(emails, sendEmail{To: fmt.Sprintf("user%d@example.com", n), N: n})
		case 1:
			images = append(images, resizeImage{URL: fmt.Sprintf("https://img.example.com/%d.png", n), N: n})
		default:
			reports = append(reports, buildReport{Month: "2026-11", N: n})
		}
	}
	if err := enqueueDemo(ctx, critical, normal, emails, images, reports); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	fmt.Printf("enqueued %d typed jobs (%d %s on %q, %d %s and %d %s on %q) in %s\n", jobs+1,
		len(emails), sendEmail{}.Kind(), critical.Name(), len(images), resizeImage{}.Kind(), len(reports)+1, buildReport{}.Kind(), normal.Name(),
		time.Since(start).Round(time.Millisecond))

	// One Mux routes every kind to its typed handler; every failEvery-th
	// job fails its first attempt (attempts count from 1) and is retried.
	var ranMu sync.Mutex
	ran := map[string]int{}
	work := func(ctx context.Context, kind string, n, attempt int) error {
		select { // pretend to work for 1-5 ms
		case <-time.After(time.Duration(1+rand.IntN(5)) * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if failEvery > 0 && n%failEvery == 0 && attempt == 1 {
			return streamq.RetryAfter(50*time.Millisecond, errors.New("simulated transient failure"))
		}
		ranMu.Lock()
		ran[kind]++
		ranMu.Unlock()
		return nil
	}
	mux := streamq.NewMux()
	streamq.Register(mux, func(ctx context.Context, j *streamq.TypedJob[sendEmail]) error {
		return work(ctx, j.Kind, j.Args.N, j.Attempt)
	})
	streamq.Register(mux, func(ctx context.Context, j *streamq.TypedJob[resizeImage]) error {
		return work(ctx, j.Kind, j.Args.N, j.Attempt)
	})
	streamq.Register(mux, func(ctx context.Context, j *streamq.TypedJob[buildReport]) error {
		return work(ctx, j.Kind, j.Args.N, j.Attempt)
	})

	var metrics *demoMetrics
	if o.metricsAddr != "" {
		if metrics, err = startMetrics(o.metricsAddr, critical, normal); err != nil {
			fmt.Printf("running without metrics: %v\n", err)
		}
	}
	cfg := streamq.ConsumerConfig{Block: 100 * time.Millisecond, Logger: log}
	if metrics != nil {
		defer metrics.close()
		fmt.Printf("serving metrics at %s\n", metrics.url)
		// The recommended chain: Recover, Tracing (global provider: off
		// unless you install one), Metrics, Logging of failures.
		mwLog := slog.New(slog.DiscardHandler) // the summary below says what failed
		if o.verbose {
			mwLog = log
		}
		cfg.Middleware = middleware.Default(&middleware.DefaultConfig{Logger: mwLog, Metrics: metrics.metrics})
		cfg.OnEvent = metrics.metrics.OnEvent
	}
	// One worker, one budget of handler goroutines, for both queues.
	var queues []streamq.WorkerQueue
	for _, qw := range []struct {
		q      *streamq.Queue
		weight int
	}{{critical, criticalWeight}, {normal, defaultWeight}} {
		c, err := streamq.NewConsumer(qw.q, mux, &cfg)
		if err != nil {
			return err
		}
		queues = append(queues, streamq.WorkerQueue{Source: c, Weight: qw.weight})
	}
	worker, err := streamq.NewWorker(streamq.WorkerConfig{Queues: queues, Concurrency: concurrency})
	if err != nil {
		return err
	}

	runCtx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- worker.Run(runCtx) }()

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(2 * time.Minute)
wait:
	for {
		s := worker.Stats()
		if s.Processed+s.DeadLettered >= int64(jobs+1) {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			fmt.Println("interrupted: shutting down gracefully")
			break wait
		case <-timeout:
			fmt.Println("gave up waiting after 2 minutes")
			break wait
		}
	}
	elapsed := time.Since(start)
	stopWorker()
	if err := <-done; err != nil {
		return err
	}

	s := worker.Stats()
	fmt.Printf("processed %d jobs in %s (%.0f jobs/s) with one worker of %d handler goroutines over 2 queues (weights %d:%d)\n",
		s.Processed, elapsed.Round(time.Millisecond), float64(s.Processed)/elapsed.Seconds(), concurrency, criticalWeight, defaultWeight)
	fmt.Printf("by kind: %s %d, %s %d, %s %d\n", sendEmail{}.Kind(), ran[sendEmail{}.Kind()],
		resizeImage{}.Kind(), ran[resizeImage{}.Kind()], buildReport{}.Kind(), ran[buildReport{}.Kind()])
	fmt.Printf("retried %d, dead-lettered %d, reclaimed %d\n", s.Retried, s.DeadLettered, s.Reclaimed)
	for _, q := range []*streamq.Queue{critical, normal} {
		letters, _, err := q.DeadLetters().List(context.Background(), "", 10)
		if err != nil {
			return err
		}
		for _, dl := range letters {
			fmt.Printf("dead letter %s on %s: reason %s, error %q\n", dl.OriginalID, q.Name(), dl.Reason, dl.Error)
		}
	}
	if metrics != nil {
		if err := metrics.printSummary(ctx); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil // interrupted: skip the write-behind demo
	}
	if err := runWriteBehind(ctx, log, rdb, wb); err != nil {
		return err
	}
	if metrics != nil && o.serve {
		fmt.Printf("serving metrics at %s until interrupted (Ctrl-C)\n", metrics.url)
		<-ctx.Done()
	}
	return nil
}

// enqueueDemo enqueues the demo's typed jobs in batches, and one report
// whose payload is not JSON.
func enqueueDemo(ctx context.Context, critical, normal *streamq.Queue, emails []sendEmail, images []resizeImage, reports []buildReport) error {
	cp, err := streamq.NewProducer(critical, nil)
	if err != nil {
		return err
	}
	np, err := streamq.NewProducer(normal, nil)
	if err != nil {
		return err
	}
	if _, err := streamq.EnqueueArgsBatch(ctx, cp, emails); err != nil {
		return err
	}
	if _, err := streamq.EnqueueArgsBatch(ctx, np, images); err != nil {
		return err
	}
	if _, err := streamq.EnqueueArgsBatch(ctx, np, reports); err != nil {
		return err
	}
	_, err = np.Enqueue(ctx, []byte("not json"), streamq.WithKind(buildReport{}.Kind()))
	return err
}

// connect returns a client for REDIS_URL. If the default URL is unreachable
// and redis-server is installed, it starts a private server for the demo.
func connect(ctx context.Context) (*redis.Client, func(), error) {
	url := os.Getenv("REDIS_URL")
	explicit := url != ""
	if !explicit {
		url = defaultURL
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		// go-redis's error may quote the URL, password and all: say what
		// to check without it.
		return nil, nil, fmt.Errorf("REDIS_URL is not a valid Redis URL (not shown: it may hold a password): "+
			"check the scheme (redis://, rediss:// or unix://), the port, the database number and the options; want e.g. %s", defaultURL)
	}
	rdb := redis.NewClient(opts)
	pingErr := ping(ctx, rdb)
	if pingErr == nil {
		fmt.Printf("connected to Redis at %s\n", opts.Addr)
		return rdb, func() { _ = rdb.Close() }, nil
	}
	_ = rdb.Close()
	if !explicit {
		if srv, err := startPrivateRedis(ctx); err == nil {
			rdb = redis.NewClient(&redis.Options{Addr: srv.addr})
			fmt.Printf("no Redis at %s; started a private redis-server at %s for this demo\n", opts.Addr, srv.addr)
			return rdb, func() { _ = rdb.Close(); srv.stop() }, nil
		}
	}
	return nil, nil, fmt.Errorf(`cannot reach Redis at %s: %w

streamq needs Redis 7 or newer. Start one, then run this again:
  apt-get install redis-server && redis-server --daemonize yes   (Debian/Ubuntu)
  brew install redis && redis-server --daemonize yes             (macOS)
  docker run -d -p 6379:6379 redis:7                             (Docker)
or point REDIS_URL at yours, e.g. REDIS_URL=redis://host:6379/0`, opts.Addr, pingErr)
}

// ping checks that Redis answers. go-redis logs every failed dial on its
// own; while probing, that would only repeat the error connect explains, so
// its log is silenced until the probe is over.
func ping(ctx context.Context, rdb *redis.Client) error {
	redis.SetLogger(redisLog{quiet: true})
	defer redis.SetLogger(redisLog{})
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

// redisLog prints go-redis's own log lines to standard error, or drops them.
type redisLog struct{ quiet bool }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	if !l.quiet {
		fmt.Fprintf(os.Stderr, "redis: "+format+"\n", v...)
	}
}

// deleteQueue deletes the demo queue's keys (SCAN, not KEYS, which would
// block a shared server) and its entries in the registries of queues that
// streamq queues, the CLI and the dashboard list. The keys follow the
// documented layout (docs/operations.md): every key of a queue starts with
// "<prefix>:{<queue>}:", the registries are "<prefix>:queues" and
// "<prefix>:writebehind". The demo's queues use the default prefix.
func deleteQueue(rdb *redis.Client, q *streamq.Queue) {
	ctx := context.Background()
	prefix := streamq.DefaultKeyPrefix
	iter := rdb.Scan(ctx, 0, prefix+":{"+q.Name()+"}:*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
	rdb.HDel(ctx, prefix+":queues", q.Name())
	rdb.HDel(ctx, prefix+":writebehind", q.Name())
}
