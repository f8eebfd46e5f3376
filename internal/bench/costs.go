package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/priority"
)

// costJobs is the number of jobs of one variant of the costs scenario.
const costJobs = 2000

// costConcurrency is the consumer's concurrency in the costs scenario.
const costConcurrency = 16

// costVariant is one way of using streamq whose Redis cost per job the
// costs scenario measures: enqueue sends job i, handler runs it (nil: the
// no-op handler), priority runs a priority worker instead of a consumer.
type costVariant struct {
	name     string
	enqueue  func(ctx context.Context, p *streamq.Producer, pq *priority.Queue, i int) error
	handler  streamq.Handler
	priority bool
	limits   *streamq.FlowLimits // flow-control limits of the queue (nil: none)
	// custom, when set, builds the variant's own queues, producers and
	// runners in place of the above (workflow, partitioned, outbox and
	// replicated jobs, see costs_more.go).
	custom func(ctx context.Context, c *redis.Client, name string, h streamq.Handler) (*costSetup, error)
}

// costSetup is what a custom variant runs: enqueue sends all costJobs jobs,
// run runs them until its context ends (each through the handler it was
// given), close releases what the setup made (nil: nothing).
type costSetup struct {
	enqueue func(ctx context.Context) error
	run     func(ctx context.Context) error
	close   func()
}

// costArgs are the typed variant's args, about 100 bytes of JSON.
type costArgs struct {
	Customer string `json:"customer"`
	Invoice  int    `json:"invoice"`
	Note     string `json:"note"`
}

func (costArgs) Kind() string { return "bench.cost" }

// costVariants returns the variants, plain first (the others' reference).
func costVariants(payload []byte) []costVariant {
	plain := func(ctx context.Context, p *streamq.Producer, _ *priority.Queue, _ int) error {
		_, err := p.Enqueue(ctx, payload)
		return err
	}
	typed := streamq.NewMux()
	streamq.Register(typed, func(context.Context, *streamq.TypedJob[costArgs]) error { return nil })
	return []costVariant{
		{name: "plain", enqueue: plain},
		{name: "delayed", enqueue: func(ctx context.Context, p *streamq.Producer, _ *priority.Queue, _ int) error {
			_, err := p.Enqueue(ctx, payload, streamq.ProcessIn(time.Millisecond))
			return err
		}},
		{name: "retried once", enqueue: plain, handler: failFirst()},
		{name: "unique", enqueue: func(ctx context.Context, p *streamq.Producer, _ *priority.Queue, i int) error {
			_, err := p.Enqueue(ctx, payload, streamq.Unique("k"+strconv.Itoa(i), time.Hour))
			return err
		}},
		{name: "job ID", enqueue: func(ctx context.Context, p *streamq.Producer, _ *priority.Queue, i int) error {
			_, err := p.Enqueue(ctx, payload, streamq.WithJobID("job-"+strconv.Itoa(i)))
			return err
		}},
		{name: "typed (JSON args)", handler: typed, enqueue: func(ctx context.Context, p *streamq.Producer, _ *priority.Queue, i int) error {
			_, err := streamq.EnqueueArgs(ctx, p, costArgs{Customer: "customer-42", Invoice: i, Note: "a typed job of about one hundred bytes"})
			return err
		}},
		{name: "flow: per-key cap 1, 100 keys", limits: &streamq.FlowLimits{PerKey: 1}, enqueue: keyed(payload, 100)},
		{name: "flow: global cap 4", limits: &streamq.FlowLimits{Global: 4}, enqueue: plain},
		{name: "flow: rate 100000/s per key", limits: &streamq.FlowLimits{Rate: 100_000}, enqueue: keyed(payload, 100)},
		{name: "priority (Push)", priority: true, enqueue: func(ctx context.Context, _ *streamq.Producer, pq *priority.Queue, i int) error {
			_, err := pq.Push(ctx, priority.Job{Priority: i % 10, Payload: payload})
			return err
		}},
		{name: "replicated (MinReplicas 1)", custom: replicatedCost(payload)},
		{name: "partitioned (4 partitions)", custom: partitionedCost(payload)},
		{name: "workflow (1, 98 after it, 1 after all)", custom: workflowCost()},
		{name: "outbox (SQLite relay)", custom: outboxCost(payload)},
	}
}

// keyed returns an enqueue of jobs of keys flow keys, round robin.
func keyed(payload []byte, keys int) func(context.Context, *streamq.Producer, *priority.Queue, int) error {
	return func(ctx context.Context, p *streamq.Producer, _ *priority.Queue, i int) error {
		_, err := p.Enqueue(ctx, payload, streamq.FlowKey("k"+strconv.Itoa(i%keys)))
		return err
	}
}

// failFirst returns a handler that fails each job's first attempt.
func failFirst() streamq.Handler {
	return streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
		if m.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	})
}

// scenarioCosts measures, for each variant, the Redis commands executed and
// the Redis server's CPU time per job of enqueueing costJobs jobs
// one by one and running them with a no-op handler at concurrency
// costConcurrency, against the plain variant measured in the same run. The
// server must be the benchmark's alone: commandstats count every client.
func (b *bench) scenarioCosts(ctx context.Context) error {
	vs := costVariants(makePayload(b.o.payload))
	var base costRun
	for i, v := range vs {
		var runs []costRun
		for r := range b.o.runs {
			cr, err := b.costRun(ctx, v, r)
			if errors.Is(err, errCostSkipped) {
				fmt.Fprintf(b.out, "%-28s %v\n", "costs/"+v.name, err)
				break
			}
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			runs = append(runs, cr)
		}
		if len(runs) == 0 {
			continue
		}
		cr := medianCost(runs)
		if i == 0 {
			base = cr
		}
		r := Result{Scenario: "costs", Variant: v.name, Unit: "redis cpu µs/job"}
		r.Streamq.Median, r.Baseline.Median = cr.cpu, base.cpu
		if base.cpu > 0 {
			r.Ratio = cr.cpu / base.cpu
		}
		r.Notes = fmt.Sprintf("commands executed/job %.2f vs plain %.2f; most time (commandstats µs/job): %s", cr.cmds, base.cmds, cr.top)
		b.emit(r)
	}
	return nil
}

// costRun is one measurement of a variant, per job: commands executed
// (those scripts call count too), the time commandstats gives them (a
// script's time includes that of the commands it calls, which count again
// on their own lines: use it to rank commands, not as a total), the Redis
// server's CPU time (INFO cpu, all of its threads), and the commands that
// took the most time.
type costRun struct {
	cmds, usec, cpu float64
	top             string
}

// medianCost returns the run with the median Redis CPU time.
func medianCost(rs []costRun) costRun {
	slices.SortFunc(rs, func(a, b costRun) int { return cmp.Compare(a.cpu, b.cpu) })
	return rs[(len(rs)-1)/2]
}

// costRun enqueues and runs costJobs jobs of v and returns what Redis did
// per job.
func (b *bench) costRun(ctx context.Context, v costVariant, run int) (costRun, error) {
	name := b.name("cost", strings.NewReplacer(" ", "", "(", "", ")", "", ",", "").Replace(v.name), strconv.Itoa(run))
	rdb := redis.NewClient(&redis.Options{Addr: b.o.addr, PoolSize: costConcurrency + 10})
	defer rdb.Close()
	var done atomic.Int64
	finished := make(chan struct{})
	h := v.handler
	if h == nil {
		h = streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
	}
	counted := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		err := h.Handle(ctx, m)
		if err == nil && done.Add(1) == costJobs {
			close(finished)
		}
		return err
	})
	setup := v.custom
	if setup == nil {
		setup = v.queueSetup
	}
	st, err := setup(ctx, rdb, name, counted)
	if err != nil {
		return costRun{}, err
	}
	if st.close != nil {
		defer st.close()
	}
	before, err := cmdCosts(ctx, b.admin)
	if err != nil {
		return costRun{}, err
	}
	cpu0 := redisCPU(ctx, b.admin)
	if err := st.enqueue(ctx); err != nil {
		return costRun{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- st.run(rctx) }()
	timedOut, runErr := waitDone(ctx, finished, errc, b.o.runTimeout)
	cancel()
	if runErr == nil {
		runErr = waitStopped(errc)
	}
	if runErr != nil {
		return costRun{}, runErr
	}
	if timedOut {
		return costRun{}, fmt.Errorf("%d of %d jobs finished in %s", done.Load(), costJobs, b.o.runTimeout)
	}
	after, err := cmdCosts(ctx, b.admin)
	if err != nil {
		return costRun{}, err
	}
	r := costDelta(before, after, costJobs)
	r.cpu = (redisCPU(ctx, b.admin) - cpu0) * 1e6 / costJobs
	return r, nil
}

// queueSetup is the set-up of a variant without one of its own: a queue
// with v's limits, jobs sent with v.enqueue one by one, run by a consumer
// (or a priority worker).
func (v costVariant) queueSetup(ctx context.Context, c *redis.Client, name string, h streamq.Handler) (*costSetup, error) {
	q, err := costQueue(ctx, c, name)
	if err != nil {
		return nil, err
	}
	if v.limits != nil {
		if err := q.SetFlowLimits(ctx, *v.limits); err != nil {
			return nil, err
		}
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		return nil, err
	}
	var pq *priority.Queue
	var run func(context.Context) error
	if v.priority {
		if pq, err = priority.NewQueue(q, nil); err != nil {
			return nil, err
		}
		w, err := priority.NewWorker(pq, h, &priority.WorkerConfig{Concurrency: costConcurrency})
		if err != nil {
			return nil, err
		}
		run = w.Run
	} else {
		cons, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Concurrency: costConcurrency, Backoff: func(int) time.Duration { return time.Millisecond }})
		if err != nil {
			return nil, err
		}
		run = cons.Run
	}
	return &costSetup{run: run, enqueue: func(ctx context.Context) error {
		for i := range costJobs {
			if err := v.enqueue(ctx, p, pq, i); err != nil {
				return err
			}
		}
		return nil
	}}, nil
}

// cmdCost is one command's calls and time (INFO commandstats).
type cmdCost struct {
	calls int64
	usec  int64
}

// cmdCosts reads INFO commandstats: calls and microseconds per command.
func cmdCosts(ctx context.Context, admin *redis.Client) (map[string]cmdCost, error) {
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	m := make(map[string]cmdCost)
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		var c cmdCost
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				c.calls, _ = strconv.ParseInt(v, 10, 64)
			}
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				c.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		m[name] = c
	}
	return m, nil
}

// costDelta returns what happened between before and after per job,
// leaving out INFO (the benchmark's own probe), with the three commands
// that took the most time.
func costDelta(before, after map[string]cmdCost, jobs int) costRun {
	var r costRun
	type top struct {
		name string
		usec int64
	}
	var tops []top
	for k, a := range after {
		if k == "info" {
			continue
		}
		calls, usec := a.calls-before[k].calls, a.usec-before[k].usec
		if calls <= 0 {
			continue
		}
		r.cmds += float64(calls)
		r.usec += float64(usec)
		tops = append(tops, top{k, usec})
	}
	r.cmds /= float64(jobs)
	r.usec /= float64(jobs)
	for range 3 {
		best := -1
		for i, t := range tops {
			if best < 0 || t.usec > tops[best].usec {
				best = i
			}
		}
		if best < 0 {
			break
		}
		if r.top != "" {
			r.top += ", "
		}
		r.top += fmt.Sprintf("%s %.2f", tops[best].name, float64(tops[best].usec)/float64(jobs))
		tops = append(tops[:best], tops[best+1:]...)
	}
	return r
}
