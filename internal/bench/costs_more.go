package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/outbox"
	"github.com/streamq/streamq/outbox/sqlite"
	"github.com/streamq/streamq/workflow"
	wbsqlite "github.com/streamq/streamq/writebehind/sqlite"
)

// errCostSkipped marks a variant the server cannot measure (for example
// replicated jobs on a server without a replica): reported, not an error.
var errCostSkipped = errors.New("skipped")

// costConsumer returns a consumer of q at the scenario's concurrency.
func costConsumer(q *streamq.Queue, h streamq.Handler, mw ...streamq.Middleware) (*streamq.Consumer, error) {
	return streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Concurrency: costConcurrency, Middleware: mw})
}

// costQueue returns the queue name on c, set up.
func costQueue(ctx context.Context, c *redis.Client, name string) (*streamq.Queue, error) {
	q, err := streamq.NewQueue(c, name, nil)
	if err != nil {
		return nil, err
	}
	return q, q.Setup(ctx)
}

// replicatedCost is plain jobs enqueued with MinReplicas 1: each enqueue
// waits (WAIT) until a replica has it. The server needs a replica (for
// example `redis-server --port P2 --replicaof 127.0.0.1 P`); the master's
// CPU is what is measured.
func replicatedCost(payload []byte) func(context.Context, *redis.Client, string, streamq.Handler) (*costSetup, error) {
	return func(ctx context.Context, c *redis.Client, name string, h streamq.Handler) (*costSetup, error) {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return nil, err
		}
		if !strings.Contains(info, "role:master") || strings.Contains(info, "connected_slaves:0") {
			return nil, fmt.Errorf("%w: the server has no replica (start one with --replicaof)", errCostSkipped)
		}
		q, err := costQueue(ctx, c, name)
		if err != nil {
			return nil, err
		}
		p, err := streamq.NewProducer(q, &streamq.ProducerConfig{MinReplicas: 1})
		if err != nil {
			return nil, err
		}
		cons, err := costConsumer(q, h)
		if err != nil {
			return nil, err
		}
		return &costSetup{enqueue: eachJob(p.Enqueue, payload), run: cons.Run}, nil
	}
}

// partitionedCost is plain jobs on a queue of 4 partitions (on one server
// here: the cost per job, not the spread), enqueued one by one round robin
// and run by one PartitionedWorker.
func partitionedCost(payload []byte) func(context.Context, *redis.Client, string, streamq.Handler) (*costSetup, error) {
	return func(ctx context.Context, c *redis.Client, name string, h streamq.Handler) (*costSetup, error) {
		pq, err := streamq.NewPartitionedQueue(c, name, nil)
		if err != nil {
			return nil, err
		}
		if _, err := pq.SetPartitions(ctx, 4); err != nil {
			return nil, err
		}
		if err := pq.Setup(ctx); err != nil {
			return nil, err
		}
		p, err := streamq.NewPartitionedProducer(pq, nil)
		if err != nil {
			return nil, err
		}
		w, err := streamq.NewPartitionedWorker(pq, h, &streamq.PartitionedWorkerConfig{Concurrency: costConcurrency})
		if err != nil {
			return nil, err
		}
		return &costSetup{enqueue: eachJob(p.Enqueue, payload), run: w.Run}, nil
	}
}

// costStep is the workflow variant's args.
type costStep struct {
	Name string `json:"name"`
}

func (costStep) Kind() string { return "bench.step" }

// costWorkflowWidth is the number of jobs of one workflow of the workflow
// variant: a root, costWorkflowWidth-2 jobs after it, and one after all of
// them (a fan-out and fan-in).
const costWorkflowWidth = 100

// workflowCost is costJobs jobs in workflows of costWorkflowWidth, each
// enqueued whole, run by a consumer with the workflow middleware and the
// client's repair loop beside it.
func workflowCost() func(context.Context, *redis.Client, string, streamq.Handler) (*costSetup, error) {
	return func(ctx context.Context, c *redis.Client, name string, h streamq.Handler) (*costSetup, error) {
		q, err := costQueue(ctx, c, name)
		if err != nil {
			return nil, err
		}
		wc, err := workflow.NewClient([]*streamq.Queue{q}, nil)
		if err != nil {
			return nil, err
		}
		mux := streamq.NewMux()
		streamq.Register(mux, func(ctx context.Context, j *streamq.TypedJob[costStep]) error {
			return h.Handle(ctx, j.Message)
		})
		cons, err := costConsumer(q, mux, wc.Middleware())
		if err != nil {
			return nil, err
		}
		return &costSetup{
			enqueue: func(ctx context.Context) error {
				for i := range costJobs / costWorkflowWidth {
					w := workflow.New(name+"-"+strconv.Itoa(i)).Add("root", q, costStep{"root"})
					kids := make([]string, costWorkflowWidth-2)
					for k := range kids {
						kids[k] = "k" + strconv.Itoa(k)
						w.Add(kids[k], q, costStep{kids[k]}, workflow.After("root"))
					}
					w.Add("sink", q, costStep{"sink"}, workflow.After(kids...))
					if err := wc.Enqueue(ctx, w); err != nil {
						return err
					}
				}
				return nil
			},
			run: beside(wc.Run, cons),
		}, nil
	}
}

// outboxCost is costJobs jobs written to a SQLite outbox table, one
// transaction each (no Redis work), then moved to the queue by a relay and
// run by a consumer.
func outboxCost(payload []byte) func(context.Context, *redis.Client, string, streamq.Handler) (*costSetup, error) {
	return func(ctx context.Context, c *redis.Client, name string, h streamq.Handler) (*costSetup, error) {
		q, err := costQueue(ctx, c, name)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "streamq-bench-outbox")
		if err != nil {
			return nil, err
		}
		db, err := wbsqlite.Open(filepath.Join(dir, "outbox.db"))
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		closeAll := func() {
			db.Close()
			os.RemoveAll(dir)
		}
		ob, err := sqlite.New(db, nil)
		if err == nil {
			err = ob.Migrate(ctx)
		}
		var p *streamq.Producer
		if err == nil {
			p, err = streamq.NewProducer(q, nil)
		}
		var relay *outbox.Relay
		if err == nil {
			relay, err = outbox.NewRelay(ob, &outbox.RelayConfig{Producers: []*streamq.Producer{p}})
		}
		var cons *streamq.Consumer
		if err == nil {
			cons, err = costConsumer(q, h)
		}
		if err != nil {
			closeAll()
			return nil, err
		}
		return &costSetup{
			enqueue: func(ctx context.Context) error {
				for range costJobs {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					if _, err := ob.Enqueue(ctx, tx, q, payload); err != nil {
						_ = tx.Rollback()
						return err
					}
					if err := tx.Commit(); err != nil {
						return err
					}
				}
				return nil
			},
			run:   beside(relay.Run, cons),
			close: closeAll,
		}, nil
	}
}

// beside returns a run of cons with side running beside it until ctx
// ends (the end of ctx is not side's error).
func beside(side func(context.Context) error, cons *streamq.Consumer) func(context.Context) error {
	return func(ctx context.Context) error {
		var g errgroup.Group
		g.Go(func() error {
			if err := side(ctx); err != nil && ctx.Err() == nil {
				return err
			}
			return nil
		})
		g.Go(func() error { return cons.Run(ctx) })
		return g.Wait()
	}
}

// eachJob returns an enqueue of costJobs jobs of payload, one call each.
func eachJob(enqueue func(context.Context, []byte, ...streamq.EnqueueOption) (string, error), payload []byte) func(context.Context) error {
	return func(ctx context.Context) error {
		for range costJobs {
			if _, err := enqueue(ctx, payload); err != nil {
				return err
			}
		}
		return nil
	}
}
