package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/dashboard"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/wire"
)

const (
	// benchJobs and benchDead are the sizes the dashboard must stay fast at.
	benchJobs = 1_000_000
	benchDead = 100_000
	// benchRunning is how many jobs a consumer holds.
	benchRunning = 100
	// benchChunk is the XADDs of one pipeline: memory and latency stay
	// bounded however many jobs are built.
	benchChunk = 2_000
	// pageBudget is the most one page may take.
	pageBudget = 200 * time.Millisecond
)

// BenchmarkPages times every page of the dashboard over a queue of 1M jobs
// (100 of them running) and 100k dead letters, built with pipelined XADDs in
// bounded chunks on a private Redis server. It fails when a page takes more
// than 200 ms on average.
//
//	go test -run '^$' -bench BenchmarkPages -benchtime 20x ./dashboard/
func BenchmarkPages(b *testing.B) {
	srv := redistest.StartServer(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	const prefix = "bench"
	q, err := streamq.NewQueue(c, "big", &streamq.QueueConfig{KeyPrefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	if err := q.Setup(ctx); err != nil {
		b.Fatal(err)
	}
	if err := c.HSet(ctx, prefix+":queues", "big", "stream").Err(); err != nil {
		b.Fatal(err)
	}
	keys := rdb.NewKeys(prefix, "big")
	start := time.Now()
	now := time.Now()
	var middle string
	buildChunked(b, c, benchJobs, func(p redis.Pipeliner, i int) {
		j := wire.Job{Payload: fmt.Appendf(nil, `{"order":%d,"sku":"A-%d"}`, i, i%977), EnqMillis: now.UnixMilli(),
			Headers: map[string]string{"tenant": fmt.Sprintf("t%d", i%50)}}
		p.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream, Values: j.Args()})
	}, func(cmds []redis.Cmder, first int) {
		if first <= benchJobs/2 && benchJobs/2 < first+len(cmds) {
			middle = cmds[benchJobs/2-first].(*redis.StringCmd).Val()
		}
	})
	buildChunked(b, c, benchDead, func(p redis.Pipeliner, i int) {
		j := wire.Job{Payload: fmt.Appendf(nil, `{"order":%d}`, i), EnqMillis: now.UnixMilli()}
		raw := map[string]any{}
		args := j.Args()
		for k := 0; k+1 < len(args); k += 2 {
			raw[args[k].(string)] = args[k+1]
		}
		reason := streamq.ReasonMaxDeliveries
		if i%10 == 0 {
			reason = "permanent"
		}
		d := wire.DeadLetter{Queue: "big", ID: fmt.Sprintf("%d-%d", now.UnixMilli()-int64(benchDead-i), i),
			Reason: reason, Error: fmt.Sprintf("gateway timeout after %d ms", 100+i%900), Attempts: 5, Failed: now}
		p.XAdd(ctx, &redis.XAddArgs{Stream: keys.Dead, Values: wire.DeadLetterArgs(d, raw, nil)})
	}, nil)
	// Some running jobs: delivered to a consumer, not acknowledged.
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: streamq.DefaultGroup, Consumer: "bench-1",
		Streams: []string{keys.Stream, ">"}, Count: benchRunning}).Err(); err != nil {
		b.Fatal(err)
	}
	b.Logf("built %d jobs and %d dead letters in %v", benchJobs, benchDead, time.Since(start).Round(time.Millisecond))

	h, err := dashboard.New(c, &dashboard.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"queue", "/queues/big"},
		{"queue_running", "/queues/big?state=running"},
		{"queue_page_1000", "/queues/big?limit=1000"},
		{"search_id", "/queues/big?id=" + url.QueryEscape(middle)},
		{"search_header_none", "/queues/big?header=tenant%3Dnobody"},
		{"search_payload_none", "/queues/big?q=needle"},
		{"job", "/queues/big/jobs/" + url.PathEscape(middle)},
		{"dead", "/queues/big/dead"},
		{"dead_filter_none", "/queues/big/dead?error=nomatch&reason=permanent"},
		{"consumers", "/queues/big/consumers"},
		{"priority", "/queues/big/priority"},
		{"writebehind", "/queues/big/writebehind"},
		{"schedules", "/schedules"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			var total time.Duration
			n := 0
			for b.Loop() {
				t0 := time.Now()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+p.path, nil))
				total += time.Since(t0)
				n++
				if rec.Code != http.StatusOK && rec.Code != http.StatusSeeOther {
					b.Fatalf("GET %s: status %d:\n%s", p.path, rec.Code, rec.Body.String())
				}
			}
			mean := total / time.Duration(n)
			b.ReportMetric(float64(mean.Microseconds())/1000, "ms/page")
			if mean > pageBudget {
				b.Errorf("GET %s takes %v on average, over the %v budget", p.path, mean, pageBudget)
			}
		})
	}
}

// buildChunked runs add for 0..n-1 in pipelines of benchChunk commands, and
// done (if not nil) with the commands of each pipeline and the index of its
// first.
func buildChunked(b *testing.B, c *redis.Client, n int, add func(redis.Pipeliner, int), done func([]redis.Cmder, int)) {
	b.Helper()
	ctx := context.Background()
	for first := 0; first < n; first += benchChunk {
		p := c.Pipeline()
		for i := first; i < min(n, first+benchChunk); i++ {
			add(p, i)
		}
		cmds, err := p.Exec(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if done != nil {
			done(cmds, first)
		}
	}
}
