package priority

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
)

// benchPayload is the payload of every benchmark job (the root package's
// benchmarks use the same size).
var benchPayload = []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" +
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef") // 128 bytes

// BenchmarkWorker_VsConsumer measures jobs per second through a priority
// Worker and through a streamq.Consumer, both with a no-op handler, in the
// same run on the same Redis: b.N jobs are queued first (not timed), then
// each runs until Redis confirmed completion of all of them (XACK replies
// for the stream, finish-script replies for the priority set). One op is
// one job through each. It reports stream_jobs/s, priority_jobs/s and their
// ratio.
//
//	go test -run '^$' -bench VsConsumer -benchtime 20000x ./priority/
func BenchmarkWorker_VsConsumer(b *testing.B) {
	for _, c := range []int{1, 16, 64} {
		b.Run("concurrency="+strconv.Itoa(c), func(b *testing.B) {
			b.StopTimer()
			stream := benchStream(b, c)
			prio := benchPriority(b, c)
			b.ReportMetric(float64(b.N)/stream.Seconds(), "stream_jobs/s")
			b.ReportMetric(float64(b.N)/prio.Seconds(), "priority_jobs/s")
			b.ReportMetric(stream.Seconds()/prio.Seconds(), "ratio")
		})
	}
}

// benchClient returns a client to the test Redis with room for c handlers,
// and the hook that counts completions.
func benchClient(b *testing.B, c int) (*redis.Client, *doneHook) {
	b.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(), PoolSize: c + 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		b.Skipf("no Redis reachable at %s (%v): set REDIS_ADDR=host:port to a Redis the benchmarks may write to", redistest.Addr(), err)
	}
	h := &doneHook{target: int64(b.N), done: make(chan struct{})}
	rdb.AddHook(h)
	return rdb, h
}

func benchQueue(b *testing.B, rdb *redis.Client) *streamq.Queue {
	b.Helper()
	q, err := streamq.NewQueue(rdb, redistest.Name(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := q.Setup(context.Background()); err != nil {
		b.Fatal(err)
	}
	return q
}

func deleteKeys(q *streamq.Queue) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := core.Of(q).RDB
	iter := rdb.Scan(ctx, 0, core.Of(q).Keys.Part("*"), 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
}

// wait times run until the hook saw b.N completions. Run is always
// cancelled and joined before wait returns or fails the benchmark.
func (h *doneHook) wait(b *testing.B, what string, run func(ctx context.Context) error) time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	begin := time.Now()
	b.StartTimer()
	go func() { errc <- run(ctx) }()
	timeout := time.NewTimer(2 * time.Minute)
	defer timeout.Stop()
	var failure string
	select {
	case <-h.done:
	case err := <-errc:
		errc <- err
		failure = fmt.Sprintf("%s returned early: %v", what, err)
	case <-timeout.C:
		failure = fmt.Sprintf("%s: only %d of %d jobs completed after 2 minutes", what, h.n.Load(), b.N)
	}
	b.StopTimer()
	took := time.Since(begin)
	cancel()
	if err := <-errc; err != nil && failure == "" {
		failure = fmt.Sprintf("%s: %v", what, err)
	}
	if failure != "" {
		b.Fatal(failure)
	}
	return took
}

func benchStream(b *testing.B, c int) time.Duration {
	rdb, h := benchClient(b, c)
	defer rdb.Close()
	q := benchQueue(b, rdb)
	defer deleteKeys(q)
	h.match = func(cmd redis.Cmder) int64 {
		if ic, ok := cmd.(*redis.IntCmd); ok && cmd.Name() == "xack" && ic.Err() == nil && len(cmd.Args()) > 1 && cmd.Args()[1] == core.Of(q).Keys.Stream {
			return ic.Val()
		}
		return 0
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		b.Fatal(err)
	}
	jobs := make([]streamq.Job, streamq.MaxBatchChunk)
	for i := range jobs {
		jobs[i].Payload = benchPayload
	}
	ctx := context.Background()
	for i := 0; i < b.N; i += len(jobs) {
		if _, err := p.EnqueueBatch(ctx, jobs[:min(len(jobs), b.N-i)]); err != nil {
			b.Fatal(err)
		}
	}
	noop := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
	cons, err := streamq.NewConsumer(q, noop, &streamq.ConsumerConfig{Name: "bench", Concurrency: c})
	if err != nil {
		b.Fatal(err)
	}
	return h.wait(b, "stream consumer", cons.Run)
}

func benchPriority(b *testing.B, c int) time.Duration {
	client, h := benchClient(b, c)
	defer client.Close()
	q := benchQueue(b, client)
	defer deleteKeys(q)
	pq, err := NewQueue(q, nil)
	if err != nil {
		b.Fatal(err)
	}
	finish := rdb.Scripts()["priority_finish"].Hash()
	h.match = func(cmd redis.Cmder) int64 {
		args := cmd.Args()
		if cmd.Name() != "evalsha" || len(args) < 2 || args[1] != finish || cmd.Err() != nil {
			return 0
		}
		if res, ok := cmd.(*redis.Cmd).Val().([]any); ok && len(res) == 2 {
			n, _ := res[0].(int64)
			return n
		}
		return 0
	}
	ctx := context.Background()
	for name, s := range rdb.Scripts() {
		if err := s.Load(ctx, client).Err(); err != nil {
			b.Fatalf("load script %s: %v", name, err)
		}
	}
	jobs := make([]Job, streamq.MaxBatchChunk)
	for i := range jobs {
		jobs[i] = Job{Priority: i % 10, Payload: benchPayload}
	}
	for i := 0; i < b.N; i += len(jobs) {
		if _, err := pq.PushBatch(ctx, jobs[:min(len(jobs), b.N-i)]); err != nil {
			b.Fatal(err)
		}
	}
	noop := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
	w, err := NewWorker(pq, noop, &WorkerConfig{Name: "bench", Concurrency: c})
	if err != nil {
		b.Fatal(err)
	}
	return h.wait(b, "priority worker", w.Run)
}

// doneHook counts completions in a client's replies (match says how many a
// reply confirms) and closes done when target is reached.
type doneHook struct {
	match  func(redis.Cmder) int64
	target int64
	n      atomic.Int64
	once   sync.Once
	done   chan struct{}
}

func (h *doneHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *doneHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.observe(cmd)
		return err
	}
}

func (h *doneHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.observe(c)
		}
		return err
	}
}

func (h *doneHook) observe(cmd redis.Cmder) {
	if h.match == nil {
		return
	}
	if n := h.match(cmd); n > 0 && h.n.Add(n) >= h.target {
		h.once.Do(func() { close(h.done) })
	}
}
