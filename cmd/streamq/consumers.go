package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

// consumerJSON is the JSON shape of one consumer or worker.
type consumerJSON struct {
	Name        string     `json:"name"`
	Kind        string     `json:"kind"`
	Alive       bool       `json:"alive"`
	Pending     int64      `json:"pending"`
	IdleMS      int64      `json:"idle_ms"`
	LastSeen    *time.Time `json:"last_seen,omitempty"`
	Host        string     `json:"host,omitempty"`
	PID         int        `json:"pid,omitempty"`
	Concurrency int        `json:"concurrency,omitempty"`
	Version     string     `json:"version,omitempty"`
	Started     *time.Time `json:"started,omitempty"`
}

func newConsumersCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "consumers <queue>",
		Short: "List a queue's consumers (stream) or workers (priority) with their pending jobs and idle time",
		Long: `List the consumers of a queue's group (stream queues) or the workers of a
priority queue, with the jobs each holds, how long it has been idle, and
from its heartbeat whether it is alive, where it runs (host, PID), its
concurrency, streamq version and start time. A consumer that stops cleanly
leaves the list; one that crashed is listed as dead until pruned.

JSON: {"queue","consumers":[{"name","kind":"consumer|worker","alive","pending","idle_ms","last_seen",
"host","pid","concurrency","version","started"}]}`,
		Example: `  streamq consumers orders
  streamq consumers orders --json
  streamq consumers prune orders --idle 24h`,
		Args: exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := a.queue(cmd, args[0])
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			cs, err := q.Consumers(ctx)
			if err != nil {
				return err
			}
			if a.json {
				out := struct {
					Queue     string         `json:"queue"`
					Consumers []consumerJSON `json:"consumers"`
				}{Queue: args[0], Consumers: []consumerJSON{}}
				for _, c := range cs {
					out.Consumers = append(out.Consumers, consumerJSON{Name: c.Name, Kind: c.Kind, Alive: c.Alive, Pending: c.Pending, IdleMS: ms(c.Idle), LastSeen: jsonTime(c.LastSeen),
						Host: c.Host, PID: c.PID, Concurrency: c.Concurrency, Version: c.Version, Started: jsonTime(c.Started)})
				}
				return printJSON(a.stdout, out)
			}
			if len(cs) == 0 {
				fmt.Fprintf(a.stdout, "no consumers on %s\n", args[0])
				return nil
			}
			now := time.Now()
			t := newTable(a.stdout, "NAME", "KIND", "STATE", "PENDING", "IDLE", "LAST SEEN", "HOST", "PID", "CONC", "VERSION", "STARTED")
			for _, c := range cs {
				state := "dead"
				if c.Alive {
					state = "alive"
				}
				pid, conc := "-", "-"
				if c.PID > 0 {
					pid, conc = strconv.Itoa(c.PID), strconv.Itoa(c.Concurrency)
				}
				t.row(c.Name, c.Kind, state, c.Pending, age(c.Idle), since(c.LastSeen, now), dash(c.Host), pid, conc, dash(c.Version), since(c.Started, now))
			}
			return t.flush()
		},
	}
	cmd.AddCommand(newPruneCmd(a))
	return cmd
}

func newPruneCmd(a *app) *cobra.Command {
	var idle time.Duration
	cmd := &cobra.Command{
		Use:   "prune <queue>",
		Short: "Remove consumers idle for longer than --idle that hold no jobs",
		Long: `Remove the consumers of a queue that have been idle for longer than --idle and
hold no pending jobs (checked atomically: a consumer that holds a job is never
removed, so no job is lost).

JSON: {"queue","removed":[names]}`,
		Example: `  streamq consumers prune orders --idle 24h`,
		Args:    exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if idle < time.Second {
				return usagef("--idle %s: use at least 1s, and longer than any pause of a live consumer", idle)
			}
			q, err := a.queue(cmd, args[0])
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			removed, err := q.PruneConsumers(ctx, idle)
			if err != nil {
				return err
			}
			if a.json {
				if removed == nil {
					removed = []string{}
				}
				return printJSON(a.stdout, struct {
					Queue   string   `json:"queue"`
					Removed []string `json:"removed"`
				}{args[0], removed})
			}
			for _, n := range removed {
				fmt.Fprintf(a.stdout, "removed %s\n", n)
			}
			fmt.Fprintf(a.stdout, "%d consumers removed from %s\n", len(removed), args[0])
			return nil
		},
	}
	cmd.Flags().DurationVar(&idle, "idle", time.Hour, "remove consumers idle for longer than this")
	return cmd
}

// scheduleJSON is the JSON shape of one periodic schedule.
type scheduleJSON struct {
	Name     string     `json:"name"`
	Queue    string     `json:"queue"`
	Spec     string     `json:"spec"`
	LastTick *time.Time `json:"last_tick,omitempty"`
	NextTick *time.Time `json:"next_tick,omitempty"`
}

func newSchedulesCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "schedules [queue]",
		Short: "List the periodic schedules of a queue (or of all queues) with their last and next tick",
		Long: `List the schedules of periodic schedulers (package periodic) that enqueue into a
queue, or into any queue when none is named.

JSON: {"schedules":[{"name","queue","spec","last_tick","next_tick"}]}`,
		Example: `  streamq schedules orders
  streamq schedules --json`,
		Args: rangeArgs(0, 1, "[queue]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			queue := ""
			if len(args) == 1 {
				queue = args[0]
				if _, err := a.queue(cmd, queue); err != nil {
					return err
				}
			}
			in, err := a.inspector(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			ss, err := in.Schedules(ctx, queue)
			if err != nil {
				return err
			}
			if a.json {
				out := struct {
					Schedules []scheduleJSON `json:"schedules"`
				}{Schedules: []scheduleJSON{}}
				for _, s := range ss {
					out.Schedules = append(out.Schedules, scheduleJSON{Name: s.Name, Queue: s.Queue, Spec: s.Spec, LastTick: jsonTime(s.LastTick), NextTick: jsonTime(s.NextTick)})
				}
				return printJSON(a.stdout, out)
			}
			if len(ss) == 0 {
				fmt.Fprintln(a.stdout, "no schedules")
				return nil
			}
			now := time.Now()
			t := newTable(a.stdout, "NAME", "QUEUE", "SPEC", "LAST TICK", "NEXT TICK")
			for _, s := range ss {
				t.row(s.Name, s.Queue, s.Spec, since(s.LastTick, now), since(s.NextTick, now))
			}
			return t.flush()
		},
	}
}
