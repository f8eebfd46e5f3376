// Command worker-example is streamq's first demo: it enqueues a few hundred
// jobs, runs a consumer that handles them (some fail once and are retried,
// one is invalid and is dead-lettered), and prints a summary.
//
//	go run ./cmd/worker-example
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
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamq/streamq"
)

const defaultURL = "redis://127.0.0.1:6379/0"

func main() {
	jobs := flag.Int("jobs", 300, "number of jobs to enqueue")
	concurrency := flag.Int("concurrency", 16, "handler goroutines")
	failEvery := flag.Int("fail-every", 25, "every n-th job fails once and is retried (0: none)")
	verbose := flag.Bool("v", false, "log every retry and dead letter")
	flag.Parse()

	level := slog.LevelError
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, *jobs, *concurrency, *failEvery); err != nil {
		fmt.Fprintln(os.Stderr, "worker-example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, jobs, concurrency, failEvery int) error {
	rdb, cleanup, err := connect(ctx)
	if err != nil {
		return err
	}
	defer cleanup()

	q, err := streamq.NewQueue(rdb, fmt.Sprintf("demo-%d", os.Getpid()), nil)
	if err != nil {
		return err
	}
	defer deleteQueue(rdb, q)
	producer, err := streamq.NewProducer(q, nil)
	if err != nil {
		return err
	}

	// Enqueue: one batch, plus one job the handler rejects as invalid.
	batch := make([]streamq.Job, jobs)
	for i := range batch {
		batch[i] = streamq.Job{Payload: []byte(strconv.Itoa(i))}
	}
	start := time.Now()
	if _, err := producer.EnqueueBatch(ctx, batch); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	if _, err := producer.Enqueue(ctx, []byte("not a number")); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	fmt.Printf("enqueued %d jobs on queue %q in %s\n", jobs+1, q.Name(), time.Since(start).Round(time.Millisecond))

	handler := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		n, err := strconv.Atoi(string(msg.Payload))
		if err != nil {
			return streamq.Permanent(fmt.Errorf("payload %q is not a job number", msg.Payload))
		}
		select { // pretend to work for 1-5 ms
		case <-time.After(time.Duration(1+rand.IntN(5)) * time.Millisecond):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if failEvery > 0 && n%failEvery == 0 && msg.Attempt == 0 {
			return streamq.RetryAfter(50*time.Millisecond, errors.New("simulated transient failure"))
		}
		return nil
	})
	consumer, err := streamq.NewConsumer(q, handler, &streamq.ConsumerConfig{
		Concurrency: concurrency,
		Block:       100 * time.Millisecond,
		Logger:      log,
	})
	if err != nil {
		return err
	}

	runCtx, stopConsumer := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- consumer.Run(runCtx) }()

	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(2 * time.Minute)
wait:
	for {
		s := consumer.Stats()
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
	stopConsumer()
	if err := <-done; err != nil {
		return err
	}

	s := consumer.Stats()
	fmt.Printf("processed %d jobs in %s (%.0f jobs/s) with %d handler goroutines\n",
		s.Processed, elapsed.Round(time.Millisecond), float64(s.Processed)/elapsed.Seconds(), concurrency)
	fmt.Printf("retried %d, dead-lettered %d, reclaimed %d\n", s.Retried, s.DeadLettered, s.Reclaimed)
	letters, _, err := q.DeadLetters().List(context.Background(), "", 10)
	if err != nil {
		return err
	}
	for _, dl := range letters {
		fmt.Printf("dead letter %s: reason %s, error %q\n", dl.OriginalID, dl.Reason, dl.Error)
	}
	return nil
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
		return nil, nil, fmt.Errorf("REDIS_URL %q: %w (want e.g. %s)", url, err, defaultURL)
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

func ping(ctx context.Context, rdb *redis.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

func deleteQueue(rdb *redis.Client, q *streamq.Queue) {
	ctx := context.Background()
	keys, _ := rdb.Keys(ctx, q.Key("*")).Result()
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}
