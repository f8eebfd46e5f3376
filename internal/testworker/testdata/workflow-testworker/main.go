// Command workflow-testworker is a worker for the workflow crash tests: it
// runs consumers on the queues "a" and "b" of -prefix with the workflow
// middleware, and logs every start and end of a workflow job to an external
// log, the Redis list <prefix>:wftest:log (RPUSH: one global order across
// processes), as "start <workflow>/<node> <job ID>" and "done <workflow>/<node>
// <job ID>"; "done" is pushed before the handler returns, so before the
// outcome is recorded. The test SIGKILLs it at random and checks the log.
//
//	workflow-testworker -addr 127.0.0.1:6379 -prefix wfcrash -name w1
//
// It prints "ready <name>" on stdout once its consumers are about to run,
// and stops gracefully on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/testworker"
	"github.com/streamq/streamq/workflow"
)

// Step are the args of the test's workflow jobs.
type Step struct {
	Node string `json:"node"`
}

// Kind names the kind of Step jobs.
func (Step) Kind() string { return "wftest.step" }

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "Redis address")
	prefix := flag.String("prefix", "wfcrash", "key prefix of the queues")
	name := flag.String("name", "w", "consumer name stem")
	work := testworker.Range{Min: time.Millisecond, Max: 10 * time.Millisecond}
	flag.Var(&work, "work", "simulated work per job")
	flag.Parse()
	if err := run(*addr, *prefix, *name, work); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "workflow-testworker:", err)
		os.Exit(1)
	}
}

func run(addr, prefix, name string, work testworker.Range) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	var qs []*streamq.Queue
	for _, qn := range []string{"a", "b"} {
		q, err := streamq.NewQueue(rdb, qn, &streamq.QueueConfig{KeyPrefix: prefix})
		if err != nil {
			return err
		}
		qs = append(qs, q)
	}
	wc, err := workflow.NewClient(qs, nil)
	if err != nil {
		return err
	}
	logKey := prefix + ":wftest:log"
	g, ctx := errgroup.WithContext(ctx)
	for _, q := range qs {
		mux := streamq.NewMux()
		streamq.Register(mux, func(ctx context.Context, job *streamq.TypedJob[Step]) error {
			id, node, _ := workflow.Node(ctx)
			if err := rdb.RPush(ctx, logKey, fmt.Sprintf("start %s/%s %s", id, node, job.JobID)).Err(); err != nil {
				return err
			}
			if err := testworker.Sleep(ctx, work.Pick()); err != nil {
				return err
			}
			return rdb.RPush(ctx, logKey, fmt.Sprintf("done %s/%s %s", id, node, job.JobID)).Err()
		})
		c, err := streamq.NewConsumer(q, mux, &streamq.ConsumerConfig{
			Name: name + "-" + q.Name(), Concurrency: 8, Block: 100 * time.Millisecond,
			MinIdle: 500 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
			Backoff:    streamq.ExponentialBackoff(20*time.Millisecond, time.Second),
			Middleware: []streamq.Middleware{wc.Middleware()},
		})
		if err != nil {
			return err
		}
		g.Go(func() error { return c.Run(ctx) })
	}
	testworker.Ready(name)
	return g.Wait()
}
