package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq/inspect"
)

// watchJSON is one line of watch --json: a queue's counters at a time, with
// the jobs processed and failed in the last complete minute.
type watchJSON struct {
	At *time.Time `json:"at"`
	overviewJSON
	ProcessedPerMin int64 `json:"processed_per_min"`
	FailedPerMin    int64 `json:"failed_per_min"`
}

// sample is one queue at one refresh.
type sample struct {
	o                 *inspect.Overview
	processed, failed int64 // last complete minute
}

func newWatchCmd(a *app) *cobra.Command {
	var interval time.Duration
	var count int
	cmd := &cobra.Command{
		Use:   "watch [queue]",
		Short: "Refresh the counts and rates of every queue (or one) until interrupted",
		Long: `Show the jobs of every queue (or one) by state, with the jobs processed and
failed in the last complete minute, every --interval. On a terminal the view is
redrawn in place; otherwise one plain line per queue and refresh is printed, and
with --json one JSON document per line:

{"at","name","kind","paused","write_behind","length","waiting","running","delayed",
"retrying","dead","cancelled","consumers","oldest_waiting_ms","processed_per_min",
"failed_per_min"}

It runs until Ctrl-C, or for --count refreshes.`,
		Example: `  streamq watch
  streamq watch orders --interval 5s
  streamq watch --json --count 12 >> queues.jsonl`,
		Args: rangeArgs(0, 1, "[queue]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval < 100*time.Millisecond {
				return usagef("--interval %s: use at least 100ms", interval)
			}
			if count < 0 {
				return usagef("--count %d: use 0 (until interrupted) or more", count)
			}
			only := ""
			if len(args) == 1 {
				only = args[0]
			}
			return a.watch(cmd, only, interval, count)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "time between refreshes")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many refreshes (0: until interrupted)")
	return cmd
}

func (a *app) watch(cmd *cobra.Command, only string, interval time.Duration, count int) error {
	in, err := a.inspector(cmd)
	if err != nil {
		return err
	}
	live := a.stdoutTTY && !a.json
	for i := 0; count == 0 || i < count; i++ {
		if i > 0 {
			select {
			case <-cmd.Context().Done():
				return nil // Ctrl-C ends a watch normally
			case <-time.After(interval):
			}
		}
		now := time.Now()
		samples, err := a.sample(cmd, in, only)
		if err != nil {
			return err
		}
		switch {
		case a.json:
			enc := json.NewEncoder(a.stdout)
			for _, s := range samples {
				if err := enc.Encode(watchJSON{At: jsonTime(now), overviewJSON: newOverviewJSON(s.o), ProcessedPerMin: s.processed, FailedPerMin: s.failed}); err != nil {
					return err
				}
			}
		case live:
			fmt.Fprint(a.stdout, "\033[H\033[2J") // home, clear screen
			fmt.Fprintf(a.stdout, "streamq watch  %s  every %s (Ctrl-C to stop)\n\n", now.UTC().Format("15:04:05Z"), interval)
			t := newTable(a.stdout, "QUEUE", "STATE", "WAITING", "RUNNING", "DELAYED", "RETRYING", "DEAD", "OLDEST", "DONE/MIN", "FAILED/MIN")
			for _, s := range samples {
				o := s.o
				t.row(o.Name, state(o.Paused), o.Waiting, o.Running, o.Delayed, o.Retrying, o.Dead, age(o.OldestWaiting), s.processed, s.failed)
			}
			if err := t.flush(); err != nil {
				return err
			}
		default:
			for _, s := range samples {
				o := s.o
				fmt.Fprintf(a.stdout, "%s %s %s waiting=%d running=%d delayed=%d retrying=%d dead=%d cancelled=%d oldest_waiting=%s processed/min=%d failed/min=%d\n",
					now.UTC().Format(time.RFC3339), o.Name, state(o.Paused), o.Waiting, o.Running, o.Delayed, o.Retrying, o.Dead, o.Cancelled, age(o.OldestWaiting), s.processed, s.failed)
			}
		}
	}
	return nil
}

// sample reads every queue (or only one) once.
func (a *app) sample(cmd *cobra.Command, in *inspect.Inspector, only string) ([]sample, error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
	defer cancel()
	names := []string{only}
	if only == "" {
		qs, err := in.Queues(ctx)
		if err != nil {
			return nil, err
		}
		names = names[:0]
		for _, q := range qs {
			names = append(names, q.Name)
		}
	}
	out := make([]sample, 0, len(names))
	for _, n := range names {
		q, err := in.Queue(ctx, n)
		if err != nil {
			return nil, describe(err)
		}
		o, err := q.Overview(ctx)
		if err != nil {
			return nil, err
		}
		s := sample{o: o}
		pts, err := q.Throughput(ctx, 2)
		if err != nil {
			return nil, err
		}
		if len(pts) >= 2 { // the last point is the current, partial minute
			s.processed, s.failed = pts[len(pts)-2].Processed, pts[len(pts)-2].Failed
		}
		out = append(out, s)
	}
	return out, nil
}
