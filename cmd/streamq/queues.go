package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq/inspect"
)

// overviewJSON is the JSON shape of one queue's counters (queues, stats).
type overviewJSON struct {
	Name            string `json:"name"`
	Kind            string `json:"kind"`
	Paused          bool   `json:"paused"`
	WriteBehind     bool   `json:"write_behind"`
	Length          int64  `json:"length"`
	Waiting         int64  `json:"waiting"`
	Running         int64  `json:"running"`
	Delayed         int64  `json:"delayed"`
	Retrying        int64  `json:"retrying"`
	Dead            int64  `json:"dead"`
	Cancelled       int64  `json:"cancelled"`
	Consumers       int    `json:"consumers"`
	OldestWaitingMS int64  `json:"oldest_waiting_ms"`
}

func newOverviewJSON(o *inspect.Overview) overviewJSON {
	return overviewJSON{
		Name: o.Name, Kind: string(o.Kind), Paused: o.Paused, WriteBehind: o.WriteBehind,
		Length: o.Length, Waiting: o.Waiting, Running: o.Running, Delayed: o.Delayed,
		Retrying: o.Retrying, Dead: o.Dead, Cancelled: o.Cancelled, Consumers: o.Consumers,
		OldestWaitingMS: ms(o.OldestWaiting),
	}
}

// overviews reads the overview of every queue.
func (a *app) overviews(cmd *cobra.Command, only string) ([]*inspect.Overview, error) {
	in, err := a.inspector(cmd)
	if err != nil {
		return nil, err
	}
	ctx, cancel := a.ctx(cmd)
	defer cancel()
	var names []string
	if only != "" {
		names = []string{only}
	} else {
		qs, err := in.Queues(ctx)
		if err != nil {
			return nil, err
		}
		for _, q := range qs {
			names = append(names, q.Name)
		}
	}
	out := make([]*inspect.Overview, 0, len(names))
	for _, n := range names {
		q, err := in.Queue(ctx, n)
		if err != nil {
			return nil, describe(err)
		}
		o, err := q.Overview(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

func newQueuesCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "queues",
		Short: "List every queue with its kind, sizes, oldest waiting job and state",
		Long: `List every queue registered under the key prefix, with its kind (stream or
priority), its jobs by state, its consumers, the age of its oldest waiting job,
and whether it is paused.

JSON: {"queues":[{"name","kind","paused","write_behind","length","waiting",
"running","delayed","retrying","dead","cancelled","consumers","oldest_waiting_ms"}]}`,
		Example: `  streamq queues
  streamq queues --prefix myapp --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ovs, err := a.overviews(cmd, "")
			if err != nil {
				return err
			}
			if a.json {
				out := struct {
					Queues []overviewJSON `json:"queues"`
				}{Queues: []overviewJSON{}}
				for _, o := range ovs {
					out.Queues = append(out.Queues, newOverviewJSON(o))
				}
				return printJSON(a.stdout, out)
			}
			if len(ovs) == 0 {
				fmt.Fprintf(a.stdout, "no queues under prefix %q (a queue appears once a producer, consumer or Setup used it)\n", a.conn.prefix)
				return nil
			}
			return overviewTable(a.stdout, ovs)
		},
	}
}

func overviewTable(w io.Writer, ovs []*inspect.Overview) error {
	t := newTable(w, "QUEUE", "KIND", "STATE", "WAITING", "RUNNING", "DELAYED", "RETRYING", "DEAD", "CANCELLED", "CONSUMERS", "OLDEST WAITING")
	for _, o := range ovs {
		t.row(o.Name, kindName(o.Kind, o.WriteBehind), state(o.Paused), o.Waiting, o.Running, o.Delayed, o.Retrying, o.Dead, o.Cancelled, o.Consumers, age(o.OldestWaiting))
	}
	return t.flush()
}

func kindName(k inspect.Kind, wb bool) string {
	if wb {
		return string(k) + "+writebehind"
	}
	return string(k)
}

func state(paused bool) string {
	if paused {
		return "paused"
	}
	return "running"
}

// statsJSON is the JSON shape of stats.
type statsJSON struct {
	Queue       overviewJSON     `json:"queue"`
	Throughput  []pointJSON      `json:"throughput"`
	Levels      []levelJSON      `json:"levels,omitempty"`
	WriteBehind *writeBehindJSON `json:"write_behind,omitempty"`
}

type pointJSON struct {
	At        *time.Time `json:"at"`
	Processed int64      `json:"processed"`
	Failed    int64      `json:"failed"`
}

type levelJSON struct {
	Priority int64 `json:"priority"`
	Count    int64 `json:"count"`
}

type writeBehindJSON struct {
	Unpersisted int64  `json:"unpersisted"`
	OldestAgeMS int64  `json:"oldest_age_ms"`
	Retrying    int64  `json:"retrying"`
	Dead        int64  `json:"dead"`
	LastError   string `json:"last_error,omitempty"`
}

func newStatsCmd(a *app) *cobra.Command {
	var minutes int
	cmd := &cobra.Command{
		Use:   "stats <queue>",
		Short: "Show one queue's counters, throughput per minute, priority levels and write-behind state",
		Long: `Show one queue: jobs by state, consumers, the oldest waiting job, jobs processed
and failed per minute over the last --minutes, the jobs per priority (priority
queues) and the write-behind backlog (queues fed by a writebehind.Writer).

JSON: {"queue":{...as in queues...},"throughput":[{"at","processed","failed"}],
"levels":[{"priority","count"}],"write_behind":{"unpersisted","oldest_age_ms",
"retrying","dead","last_error"}}`,
		Example: `  streamq stats orders
  streamq stats orders --minutes 60 --json`,
		Args: exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if minutes < 1 || minutes > 120 {
				return usagef("--minutes %d: use 1..120 (the counters are kept 2 hours)", minutes)
			}
			q, err := a.queue(cmd, args[0])
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			return a.stats(ctx, q, minutes)
		},
	}
	cmd.Flags().IntVar(&minutes, "minutes", 10, "minutes of throughput to show (1..120)")
	return cmd
}

func (a *app) stats(ctx context.Context, q *inspect.Queue, minutes int) error {
	o, err := q.Overview(ctx)
	if err != nil {
		return err
	}
	pts, err := q.Throughput(ctx, minutes)
	if err != nil {
		return err
	}
	var levels []inspect.Level
	if q.Kind() == inspect.KindPriority {
		if levels, err = q.Levels(ctx); err != nil {
			return err
		}
	}
	var wb *inspect.WriteBehindStatus
	if o.WriteBehind {
		if wb, err = q.WriteBehind(ctx); err != nil {
			return err
		}
	}
	if a.json {
		out := statsJSON{Queue: newOverviewJSON(o), Throughput: []pointJSON{}}
		for _, p := range pts {
			out.Throughput = append(out.Throughput, pointJSON{At: jsonTime(p.At), Processed: p.Processed, Failed: p.Failed})
		}
		for _, l := range levels {
			out.Levels = append(out.Levels, levelJSON{Priority: l.Priority, Count: l.Count})
		}
		if wb != nil {
			out.WriteBehind = &writeBehindJSON{Unpersisted: wb.Unpersisted, OldestAgeMS: ms(wb.OldestAge), Retrying: wb.Retrying, Dead: wb.Dead, LastError: wb.LastError}
		}
		return printJSON(a.stdout, out)
	}
	w := a.stdout
	fmt.Fprintf(w, "Queue:           %s (%s, %s)\n", escape([]byte(o.Name)), kindName(o.Kind, o.WriteBehind), state(o.Paused))
	fmt.Fprintf(w, "Stream entries:  %d (finished jobs too, until trimmed: not a backlog)\n", o.Length)
	fmt.Fprintf(w, "Jobs:            waiting %d, running %d, delayed %d, retrying %d, dead %d, cancelled %d\n",
		o.Waiting, o.Running, o.Delayed, o.Retrying, o.Dead, o.Cancelled)
	fmt.Fprintf(w, "Consumers:       %d\n", o.Consumers)
	fmt.Fprintf(w, "Oldest waiting:  %s\n", age(o.OldestWaiting))
	if wb != nil {
		fmt.Fprintf(w, "Write-behind:    %d unpersisted (oldest %s), %d retrying, %d dead", wb.Unpersisted, age(wb.OldestAge), wb.Retrying, wb.Dead)
		if wb.LastError != "" {
			fmt.Fprintf(w, ", last error: %s", escape([]byte(wb.LastError)))
		}
		fmt.Fprintln(w)
	}
	if len(levels) > 0 {
		fmt.Fprintln(w, "\nPriority levels:")
		t := newTable(w, "  PRIORITY", "JOBS")
		for _, l := range levels {
			t.row(fmt.Sprintf("  %d", l.Priority), l.Count)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nThroughput per minute (UTC):")
	t := newTable(w, "  MINUTE", "PROCESSED", "FAILED")
	for _, p := range pts {
		t.row("  "+p.At.UTC().Format("15:04"), p.Processed, p.Failed)
	}
	return t.flush()
}
