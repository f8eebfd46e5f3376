package streamq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	keys "github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
)

// Benchmarks against a real Redis: the one in REDIS_ADDR, else 127.0.0.1:6379,
// else the server this package's TestMain started. Every benchmark uses its
// own queue and deletes its keys; none flushes the database.
//
//	REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench . -benchmem
//
// cmd/streamq-bench compares the same paths with raw go-redis baselines; see
// docs/performance.md.

// benchPayload is the payload of every benchmark job.
var benchPayload = []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" +
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef") // 128 bytes

// benchAddr picks the Redis for the benchmarks once.
var benchAddr = sync.OnceValues(func() (string, error) {
	var candidates []string
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		candidates = append(candidates, a)
	} else {
		candidates = append(candidates, "127.0.0.1:6379")
	}
	candidates = append(candidates, redistest.Addr())
	var lastErr error
	for _, a := range candidates {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		lastErr = rdb.Ping(ctx).Err()
		cancel()
		_ = rdb.Close()
		if lastErr == nil {
			return a, nil
		}
	}
	return "", lastErr
})

// benchQueue returns a fresh queue on a fresh client (with hooks, if any),
// whose keys are deleted when the caller calls the returned func.
func benchQueue(b *testing.B, poolSize int, hooks ...redis.Hook) (*streamq.Queue, func()) {
	b.Helper()
	addr, err := benchAddr()
	if err != nil {
		b.Skipf("no Redis reachable for benchmarks (%v): set REDIS_ADDR=host:port to a Redis they may write to", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: max(poolSize, 20)})
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	q, err := streamq.NewQueue(rdb, redistest.Name(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := q.Setup(ctx); err != nil {
		b.Fatal(err)
	}
	return q, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = rdb.Unlink(ctx, core.Of(q).Keys.Stream, core.Of(q).Keys.Dead, core.Of(q).Keys.Delayed, core.Of(q).Keys.Part("delayed:jobs"), core.Of(q).Keys.Trail).Err()
		_ = rdb.HDel(ctx, keys.Registry(core.Of(q).Prefix), q.Name()).Err() // Setup listed it
		_ = rdb.Close()
	}
}

func BenchmarkProducer_Enqueue(b *testing.B) {
	b.Run("goroutines=1", func(b *testing.B) {
		q, cleanup := benchQueue(b, 0)
		defer cleanup()
		p, err := streamq.NewProducer(q, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Enqueue(ctx, benchPayload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("goroutines=16", func(b *testing.B) {
		q, cleanup := benchQueue(b, 20)
		defer cleanup()
		p, err := streamq.NewProducer(q, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		b.SetParallelism(max(16/runtime.GOMAXPROCS(0), 1)) // 16 goroutines
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := p.Enqueue(ctx, benchPayload); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkProducer_EnqueueJobID is BenchmarkProducer_Enqueue
// (goroutines=1) with a chosen ID per job, next to the plain enqueue in the
// same run: the cost of WithJobID (a queue that never uses it pays nothing).
func BenchmarkProducer_EnqueueJobID(b *testing.B) {
	for _, withID := range []bool{false, true} {
		b.Run("id="+strconv.FormatBool(withID), func(b *testing.B) {
			q, cleanup := benchQueue(b, 0)
			defer cleanup()
			p, err := streamq.NewProducer(q, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				var opts []streamq.EnqueueOption
				if withID {
					i++
					opts = append(opts, streamq.WithJobID("job-"+strconv.Itoa(i)))
				}
				if _, err := p.Enqueue(ctx, benchPayload, opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProducer_EnqueueBatch enqueues b.N jobs in batches; one op is one
// job, so ns/op, B/op and allocs/op are per job.
func BenchmarkProducer_EnqueueBatch(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			q, cleanup := benchQueue(b, 0)
			defer cleanup()
			p, err := streamq.NewProducer(q, nil)
			if err != nil {
				b.Fatal(err)
			}
			enqueueBatches(b, size, p.EnqueueBatch)
		})
	}
}

// BenchmarkConsumer_EndToEnd pre-enqueues b.N jobs, then times a Consumer with
// a no-op handler until Redis has acknowledged all of them (counted by a
// client hook on XACK replies). One op is one job.
func BenchmarkConsumer_EndToEnd(b *testing.B) {
	for _, c := range []int{1, 16, 64} {
		b.Run("concurrency="+strconv.Itoa(c), func(b *testing.B) { benchQueues(b, c, 1) })
	}
}

// ackHook counts the entries acknowledged by XACK replies on streams and
// closes done when target is reached.
type ackHook struct {
	streams map[string]bool
	target  int64
	acked   atomic.Int64
	cmds    atomic.Int64 // every command sent, pipelined ones one by one
	once    sync.Once
	done    chan struct{}
}

func (h *ackHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ackHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.observe(cmd)
		return err
	}
}

func (h *ackHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.observe(c)
		}
		return err
	}
}

func (h *ackHook) observe(cmd redis.Cmder) {
	h.cmds.Add(1)
	ic, ok := cmd.(*redis.IntCmd)
	if !ok || ic.Err() != nil || cmd.Name() != "xack" {
		return
	}
	args := cmd.Args()
	if len(args) < 2 {
		return
	}
	if s, _ := args[1].(string); !h.streams[s] { // no fmt.Sprint: the hook's allocations count in allocs/op
		return
	}
	if h.acked.Add(ic.Val()) >= h.target {
		h.once.Do(func() { close(h.done) })
	}
}

// BenchmarkWorker_ThreeQueues compares a Worker over three queues with one
// Consumer on one queue at the same concurrency: b.N jobs pre-enqueued
// (split evenly over the worker's queues), no-op handlers, timed until Redis
// has acknowledged all of them. One op is one job. Run the two in one go
// and compare their jobs/s:
//
//	go test -run '^$' -bench 'Worker_ThreeQueues' -benchtime 30000x -count 3
func BenchmarkWorker_ThreeQueues(b *testing.B) {
	for _, c := range []int{16, 64} {
		for _, queues := range []int{1, 3} {
			name := fmt.Sprintf("concurrency=%d/consumer", c)
			if queues > 1 {
				name = fmt.Sprintf("concurrency=%d/worker-queues=%d", c, queues)
			}
			b.Run(name, func(b *testing.B) { benchQueues(b, c, queues) })
		}
	}
}

// benchQueues times the run of b.N jobs over queues queues: one Consumer
// when queues is 1, else one Worker of equal weights.
func benchQueues(b *testing.B, c, queues int) {
	noop := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
	benchQueuesWith(b, c, queues, benchPayload, nil, noop)
}

// benchArgs are typed args of about 100 bytes of JSON.
type benchArgs struct {
	Customer string `json:"customer"`
	Order    int    `json:"order"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Note     string `json:"note"`
}

func (benchArgs) Kind() string { return "bench.order" }

// BenchmarkConsumer_Typed compares, in one run, a typed handler (Register
// on a Mux, ~100-byte JSON args decoded per job) with a plain no-op handler
// of jobs with the same payload and with a plain handler that decodes the
// payload itself, at concurrency 16 and 64.
func BenchmarkConsumer_Typed(b *testing.B) {
	args := benchArgs{Customer: "cus_4f9a2b7c1d", Order: 1234567, Amount: 129900, Currency: "EUR", Note: "gift wrap, deliver after 5pm"}
	payload, err := json.Marshal(args)
	if err != nil {
		b.Fatal(err)
	}
	plain := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
	mux := streamq.NewMux()
	streamq.Register(mux, func(_ context.Context, j *streamq.TypedJob[benchArgs]) error {
		if j.Args.Order != args.Order {
			return errors.New("args not decoded")
		}
		return nil
	})
	// decoding is a plain handler that decodes the same arguments itself:
	// against it, typed jobs cost what the Mux adds, apart from what
	// encoding/json costs (about 4.7 µs per decode of these 116 bytes on
	// the 2-core test machine, half a plain job's client CPU).
	decoding := streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
		var a benchArgs
		if err := json.Unmarshal(m.Payload, &a); err != nil {
			return err
		}
		if a.Order != args.Order {
			return errors.New("args not decoded")
		}
		return nil
	})
	for _, c := range []int{16, 64} {
		b.Run(fmt.Sprintf("handler=plain/concurrency=%d", c), func(b *testing.B) {
			benchQueuesWith(b, c, 1, payload, nil, plain)
		})
		b.Run(fmt.Sprintf("handler=decoding/concurrency=%d", c), func(b *testing.B) {
			benchQueuesWith(b, c, 1, payload, nil, decoding)
		})
		b.Run(fmt.Sprintf("handler=typed/concurrency=%d", c), func(b *testing.B) {
			benchQueuesWith(b, c, 1, payload, []streamq.EnqueueOption{streamq.WithKind(args.Kind())}, mux)
		})
	}
}

// benchQueuesWith is benchQueues with jobs of payload enqueued with opts
// and run by h.
func benchQueuesWith(b *testing.B, c, queues int, payload []byte, opts []streamq.EnqueueOption, h streamq.Handler) {
	acks := &ackHook{target: int64(b.N), done: make(chan struct{}), streams: map[string]bool{}}
	q0, cleanup := benchQueue(b, c+10, acks)
	defer cleanup()
	ctx := context.Background()
	rdb := core.Of(q0).RDB
	var cons []*streamq.Consumer
	jobs := make([]streamq.Job, streamq.MaxBatchChunk)
	for i := range jobs {
		jobs[i].Payload = payload
	}
	for k := range queues {
		q := q0
		if k > 0 {
			var err error
			if q, err = streamq.NewQueue(rdb, q0.Name()+"-"+strconv.Itoa(k), nil); err != nil {
				b.Fatal(err)
			}
			if err := q.Setup(ctx); err != nil {
				b.Fatal(err)
			}
			kq := core.Of(q)
			defer rdb.Unlink(context.Background(), kq.Keys.Stream, kq.Keys.Dead, kq.Keys.Delayed, kq.Keys.Part("delayed:jobs"))
			defer rdb.HDel(context.Background(), keys.Registry(kq.Prefix), q.Name())
		}
		acks.streams[core.Of(q).Keys.Stream] = true
		p, err := streamq.NewProducer(q, nil)
		if err != nil {
			b.Fatal(err)
		}
		share := b.N / queues
		if k == 0 {
			share += b.N % queues
		}
		for i := 0; i < share; i += len(jobs) {
			if _, err := p.EnqueueBatch(ctx, jobs[:min(len(jobs), share-i)], opts...); err != nil {
				b.Fatal(err)
			}
		}
		cfg := &streamq.ConsumerConfig{Name: "bench"}
		if queues == 1 {
			cfg.Concurrency = c
		}
		cn, err := streamq.NewConsumer(q, h, cfg)
		if err != nil {
			b.Fatal(err)
		}
		cons = append(cons, cn)
	}
	run := cons[0].Run
	if queues > 1 {
		wc := streamq.WorkerConfig{Concurrency: c}
		for _, cn := range cons {
			wc.Queues = append(wc.Queues, streamq.WorkerQueue{Source: cn})
		}
		w, err := streamq.NewWorker(wc)
		if err != nil {
			b.Fatal(err)
		}
		run = w.Run
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	acks.cmds.Store(0)
	go func() { errc <- run(rctx) }()
	timeout := time.NewTimer(5 * time.Minute)
	defer timeout.Stop()
	select {
	case <-acks.done:
	case err := <-errc:
		b.Fatalf("run returned early: %v", err)
	case <-timeout.C:
		b.Fatalf("only %d of %d jobs acknowledged after 5 minutes", acks.acked.Load(), b.N)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(acks.cmds.Load())/float64(b.N), "cmds/job")
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}
