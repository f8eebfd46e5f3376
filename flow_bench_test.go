package streamq_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
)

// BenchmarkFlow runs a consumer of concurrency 64 with a no-op handler over
// b.N jobs of 1,000 flow keys (interleaved), on a Redis server of its own,
// without limits, with a cap of 1 per key, and with global caps above the
// concurrency (128: a cap the running jobs plus those whose acknowledgement
// is in flight reach; 512: one they do not). It reports jobs/s, Redis
// commands per job (scripts' inner commands included), script calls per
// job and Redis CPU per job (INFO deltas; the server serves nothing else).
// The handler=1ms variants run a handler that takes a millisecond (a
// sleep, as a handler waiting on I/O): there the consumer's concurrency,
// not Redis, bounds the uncapped throughput.
//
//	go test -run '^$' -bench BenchmarkFlow -benchtime 50000x -count 3 .
func BenchmarkFlow(b *testing.B) {
	for _, v := range []struct {
		name   string
		limits streamq.FlowLimits
	}{
		{"uncapped", streamq.FlowLimits{}},
		{"per-key=1,keys=1000", streamq.FlowLimits{PerKey: 1}},
		{"global=128", streamq.FlowLimits{Global: 128}},
		{"global=512", streamq.FlowLimits{Global: 512}},
	} {
		for _, d := range []time.Duration{0, time.Millisecond} {
			name := v.name
			if d > 0 {
				name += "/handler=" + d.String()
			}
			b.Run(name, func(b *testing.B) { benchFlow(b, v.limits, d) })
		}
	}
}

// benchFlow is one case of BenchmarkFlow: limits, and a handler that
// takes d.
func benchFlow(b *testing.B, limits streamq.FlowLimits, d time.Duration) {
	const concurrency, keys = 64, 1000
	c := redistest.NewIsolatedClient(b)
	ctx := context.Background()
	q, err := streamq.NewQueue(c, "bench", &streamq.QueueConfig{MaxLen: -1})
	if err != nil {
		b.Fatal(err)
	}
	if err := q.Setup(ctx); err != nil {
		b.Fatal(err)
	}
	if limits.PerKey+limits.Global > 0 {
		if err := q.SetFlowLimits(ctx, limits); err != nil {
			b.Fatal(err)
		}
	}
	stream := core.Of(q).Keys.Stream
	for i := 0; i < b.N; i += 1000 {
		pipe := c.Pipeline()
		for j := i; j < min(i+1000, b.N); j++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"v", "1", "payload", benchPayload, "enq", "1", "fk", "k" + strconv.Itoa(j%keys)}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	finished := make(chan struct{})
	h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		if d > 0 {
			time.Sleep(d) // the handler's work
		}
		if done.Add(1) == int64(b.N) {
			close(finished)
		}
		return nil
	})
	cons, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Name: "bench", Concurrency: concurrency})
	if err != nil {
		b.Fatal(err)
	}
	w0 := redisWork(b, c)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	b.ResetTimer()
	go func() { errc <- cons.Run(rctx) }()
	select {
	case <-finished:
	case err := <-errc:
		b.Fatalf("consumer returned early: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d jobs done after 5 minutes", done.Load(), b.N)
	}
	b.StopTimer()
	w1 := redisWork(b, c)
	per := func(a, b int64, n int) float64 { return float64(b-a) / float64(n) }
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(per(w0.calls, w1.calls, b.N), "cmds/job")
	b.ReportMetric(per(w0.scripts, w1.scripts, b.N), "scripts/job")
	b.ReportMetric((w1.cpu-w0.cpu)*1e6/float64(b.N), "redis-µs/job")
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

// work is what a Redis server did: commands run (INFO commandstats calls,
// scripts' inner commands included), script calls (EVALSHA and EVAL) and
// CPU seconds.
type work struct {
	calls, scripts int64
	cpu            float64
}

// redisWork returns what Redis has done so far.
func redisWork(b *testing.B, c *redis.Client) work {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var w work
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, stats, _ := strings.Cut(rest, ":")
			for _, kv := range strings.Split(stats, ",") {
				if n, ok := strings.CutPrefix(kv, "calls="); ok {
					v, _ := strconv.ParseInt(n, 10, 64)
					w.calls += v
					if name == "evalsha" || name == "eval" {
						w.scripts += v
					}
				}
			}
		}
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if n, ok := strings.CutPrefix(line, f); ok {
				v, _ := strconv.ParseFloat(n, 64)
				w.cpu += v
			}
		}
	}
	return w
}
