package workflow_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/workflow"
)

// BenchmarkFanOutFanIn runs the jobs of a 1,000-wide fan-out/fan-in (1,002
// jobs) through consumers of two queues: "workflow" as a workflow (root,
// 1,000 children, sink), "plain" the same jobs enqueued without
// dependencies, on a Redis server of its own. It reports jobs/s, Redis
// commands per job and Redis CPU (user+sys) per job. One op is the whole
// set of jobs.
//
//	go test -run '^$' -bench BenchmarkFanOutFanIn -benchtime 5x ./workflow/
func BenchmarkFanOutFanIn(b *testing.B) {
	const width = 1000
	for _, mode := range []string{"plain", "workflow"} {
		b.Run(mode, func(b *testing.B) {
			c := redistest.NewIsolatedClient(b)
			qs, wc := benchQueues(b, c)
			var done atomic.Int64
			for _, q := range qs {
				mux := streamq.NewMux()
				streamq.Register(mux, func(ctx context.Context, job *streamq.TypedJob[step]) error {
					done.Add(1)
					return nil
				})
				cons, err := streamq.NewConsumer(q, mux, &streamq.ConsumerConfig{
					Middleware: []streamq.Middleware{wc.Middleware()}, Block: 100 * time.Millisecond, Concurrency: 16,
				})
				if err != nil {
					b.Fatal(err)
				}
				redistest.Background(b, "consumer", 10*time.Second, cons.Run)
			}
			producers := make([]*streamq.Producer, len(qs))
			for i, q := range qs {
				var err error
				if producers[i], err = streamq.NewProducer(q, nil); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			cmds0, cpu0 := serverStats(b, c)
			b.ResetTimer()
			for i := range b.N {
				want := done.Load() + width + 2
				if mode == "plain" {
					var halves [2][]step
					for k := range width + 2 {
						halves[k%2] = append(halves[k%2], step{Name: strconv.Itoa(k)})
					}
					for h, p := range producers {
						if _, err := streamq.EnqueueArgsBatch(ctx, p, halves[h]); err != nil {
							b.Fatal(err)
						}
					}
				} else {
					w := workflow.New(fmt.Sprintf("bench%d", i)).Add("root", qs[0], step{"root"})
					kids := names("kid", width)
					for k, kid := range kids {
						w.Add(kid, qs[k%2], step{kid}, workflow.After("root"))
					}
					w.Add("sink", qs[1], step{"sink"}, workflow.After(kids...))
					if err := wc.Enqueue(ctx, w); err != nil {
						b.Fatal(err)
					}
				}
				deadline := time.Now().Add(2 * time.Minute)
				for done.Load() < want {
					if time.Now().After(deadline) {
						b.Fatalf("%d of %d jobs done after 2 minutes", done.Load(), want)
					}
					time.Sleep(time.Millisecond) // a benchmark's poll, not a test's synchronisation
				}
			}
			b.StopTimer()
			cmds1, cpu1 := serverStats(b, c)
			jobs := float64(b.N * (width + 2))
			b.ReportMetric(jobs/b.Elapsed().Seconds(), "jobs/s")
			b.ReportMetric(float64(cmds1-cmds0)/jobs, "redis-cmds/job")
			b.ReportMetric((cpu1-cpu0)*1e6/jobs, "redis-cpu-µs/job")
		})
	}
}

// benchQueues returns queues a and b under a fresh prefix, and their
// workflow client.
func benchQueues(b *testing.B, c redis.UniversalClient) ([]*streamq.Queue, *workflow.Client) {
	prefix := "wfbench"
	var qs []*streamq.Queue
	for _, name := range []string{"a", "b"} {
		q, err := streamq.NewQueue(c, name, &streamq.QueueConfig{KeyPrefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Setup(context.Background()); err != nil {
			b.Fatal(err)
		}
		qs = append(qs, q)
	}
	wc, err := workflow.NewClient(qs, nil)
	if err != nil {
		b.Fatal(err)
	}
	return qs, wc
}

// serverStats returns the server's count of processed commands and its CPU
// seconds (user + sys).
func serverStats(b *testing.B, c redis.UniversalClient) (int64, float64) {
	info, err := c.Info(context.Background(), "stats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var cmds int64
	var cpu float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "total_commands_processed":
			cmds, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		}
	}
	return cmds, cpu
}
