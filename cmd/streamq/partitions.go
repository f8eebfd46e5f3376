package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/visible"
)

// partitionsJSON is the JSON shape of a partitioned queue's layout.
type partitionsJSON struct {
	Queue      string         `json:"queue"`
	Partitions int            `json:"partitions"`
	Draining   int            `json:"draining"`
	Epoch      int64          `json:"epoch"`
	Total      overviewJSON   `json:"total"`
	Each       []overviewJSON `json:"each"`
}

func newPartitionsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "partitions",
		Short: "Show or change the number of partitions of a queue",
		Long: `A partitioned queue is one logical queue over N partitions, each with a Redis
Cluster hash tag of its own ({orders}, {orders#1}, ...). See docs/partitions.md.`,
	}
	cmd.AddCommand(newPartitionsShowCmd(a), newPartitionsSetCmd(a), newPartitionsFinishCmd(a))
	return cmd
}

func newPartitionsShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show <queue>",
		Short: "Show a queue's partitions with the counts of each and their sum",
		Long: `Show the number of partitions producers write to, the partitions still
draining after it was lowered, and each partition's counts with their sum.

JSON: {"queue","partitions","draining","epoch","total","each"}`,
		Example: `  streamq partitions show orders`,
		Args:    exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.showPartitions(cmd, args[0])
		},
	}
}

func newPartitionsSetCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "set <queue> <n>",
		Short: "Set the number of partitions producers write to",
		Long: `Set the number of partitions producers write to (1 to 1024). Producers and
workers follow within their refresh interval (1 s by default). Raising it takes
effect at once; after lowering it, the dropped partitions are still read until
they are empty: run 'streamq partitions finish' then.

JSON: as partitions show, after the change`,
		Example: `  streamq partitions set orders 8`,
		Args:    exactArgs(2, "<queue> <n>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 || n > streamq.MaxPartitions {
				return usagef("<n> %q: use a number of partitions from 1 to %d", args[1], streamq.MaxPartitions)
			}
			pq, err := a.partitioned(cmd, args[0])
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			if _, err := pq.SetPartitions(ctx, n); err != nil {
				return err
			}
			return a.showPartitions(cmd, args[0])
		},
	}
}

func newPartitionsFinishCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "finish <queue>",
		Short: "Stop reading the partitions a lowered count dropped, once they are empty",
		Long: `After 'partitions set' lowered the number of partitions, workers go on reading
the dropped partitions. Once they hold no job (waiting, running, delayed or
dead) and the drain grace (30 s) has passed, finish stops that; until then it
says what is left and changes nothing.

JSON: as partitions show, after the change`,
		Example: `  streamq partitions finish orders`,
		Args:    exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			pq, err := a.partitioned(cmd, args[0])
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			if _, err := pq.FinishDrain(ctx); err != nil {
				return err
			}
			return a.showPartitions(cmd, args[0])
		},
	}
}

// partitioned connects and returns the partitioned queue name.
func (a *app) partitioned(cmd *cobra.Command, name string) (*streamq.PartitionedQueue, error) {
	c, err := a.connect(cmd.Context())
	if err != nil {
		return nil, err
	}
	return streamq.NewPartitionedQueue(c, name, &streamq.PartitionedQueueConfig{Queue: &streamq.QueueConfig{KeyPrefix: a.conn.prefix, Group: a.conn.group}})
}

func (a *app) showPartitions(cmd *cobra.Command, name string) error {
	in, err := a.inspector(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx(cmd)
	defer cancel()
	p, err := in.Partitioned(ctx, name)
	if err != nil {
		return err
	}
	total, err := p.Overview(ctx)
	if err != nil {
		return err
	}
	var each []*inspect.Overview
	for _, q := range p.Queues() {
		o, err := q.Overview(ctx)
		if err != nil {
			return err
		}
		each = append(each, o)
	}
	write, read := p.Partitions()
	draining := 0
	if read > write {
		draining = read
	}
	if a.json {
		out := partitionsJSON{Queue: name, Partitions: write, Draining: draining, Epoch: p.Epoch(), Total: newOverviewJSON(total)}
		for _, o := range each {
			out.Each = append(out.Each, newOverviewJSON(o))
		}
		return printJSON(a.stdout, out)
	}
	fmt.Fprintf(a.stdout, "queue %s: %d partitions (epoch %d)", visible.Escape(name, false), write, p.Epoch())
	if draining > 0 {
		fmt.Fprintf(a.stdout, ", partitions %d..%d draining", write, draining-1)
	}
	fmt.Fprintln(a.stdout)
	t := newTable(a.stdout, "PARTITION", "WAITING", "RUNNING", "DELAYED", "RETRYING", "DEAD", "CONSUMERS")
	for _, o := range append(each, total) {
		label := o.Name
		if o == total {
			label = "total"
		}
		t.row(visible.Escape(label, false), o.Waiting, o.Running, o.Delayed, o.Retrying, o.Dead, o.Consumers)
	}
	return t.flush()
}

// partitionJob returns the queue and ID to find job id of queue under: for
// an ID that names its partition ("p3~<ID>", as a partitioned producer
// returns it; see docs/partitions.md, "Job IDs"), the queue of that
// partition of queue's base name and the ID within it; else queue and id.
func partitionJob(queue, id string) (string, string) {
	k, bare, ok := rdb.SplitPartitionJobID(id)
	if !ok {
		return queue, id
	}
	base, _, _ := strings.Cut(queue, rdb.PartitionSep)
	return rdb.PartitionName(base, k), bare
}

// jobQueue returns the queue and ID to act on job id of q (named queue) by,
// as partitionJob says.
func (a *app) jobQueue(cmd *cobra.Command, q *inspect.Queue, queue, id string) (*inspect.Queue, string, error) {
	pname, bare := partitionJob(queue, id)
	if pname == q.Name() {
		return q, bare, nil
	}
	pq, err := a.queue(cmd, pname)
	return pq, bare, err
}
