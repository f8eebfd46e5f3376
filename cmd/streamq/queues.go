package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
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
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "List every queue with its kind, sizes, oldest waiting job and state",
		Long: `List every queue registered under the key prefix, with its kind (stream or
priority), its jobs by state, its consumers, the age of its oldest waiting job,
and whether it is paused.

JSON: {"queues":[{"name","kind","paused","write_behind","length","waiting",
"running","delayed","retrying","dead","cancelled","consumers","oldest_waiting_ms"}]}`,
		Example: `  streamq queues
  streamq queues --prefix myapp --json
  streamq queues prune`,
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
	cmd.AddCommand(newQueuesPruneCmd(a))
	return cmd
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
	History     *historyJSON     `json:"history,omitempty"`
	Levels      []levelJSON      `json:"levels,omitempty"`
	WriteBehind *writeBehindJSON `json:"write_behind,omitempty"`
}

type pointJSON struct {
	At        *time.Time `json:"at"`
	Processed int64      `json:"processed"`
	Failed    int64      `json:"failed"`
}

// historyJSON is the JSON shape of stats --history.
type historyJSON struct {
	StepS     int64              `json:"step_s"`
	Kind      *string            `json:"kind,omitempty"` // with --kind: the kind the points are of
	Points    []historyPointJSON `json:"points"`
	Kinds     []kindHistoryJSON  `json:"kinds"`
	Untracked int64              `json:"untracked"`
}

// historyPointJSON is a point of stats --history: a pointJSON with the
// wait and run time percentiles in milliseconds.
type historyPointJSON struct {
	pointJSON
	WaitP50MS float64 `json:"wait_p50_ms"`
	WaitP95MS float64 `json:"wait_p95_ms"`
	RunP50MS  float64 `json:"run_p50_ms"`
	RunP95MS  float64 `json:"run_p95_ms"`
}

type kindHistoryJSON struct {
	Kind   string             `json:"kind"`
	Points []historyPointJSON `json:"points"`
}

// fms is d in milliseconds, to the microsecond.
func fms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func historyPointsJSON(pts []inspect.Point) []historyPointJSON {
	base := pointsJSON(pts)
	out := make([]historyPointJSON, len(pts))
	for i, p := range pts {
		out[i] = historyPointJSON{pointJSON: base[i], WaitP50MS: fms(p.WaitP50), WaitP95MS: fms(p.WaitP95), RunP50MS: fms(p.RunP50), RunP95MS: fms(p.RunP95)}
	}
	return out
}

// newHistoryJSON is h as JSON; with kind, its points are those of kind.
func newHistoryJSON(h *inspect.History, kind *string) *historyJSON {
	out := &historyJSON{StepS: int64(h.Step / time.Second), Kind: kind, Points: historyPointsJSON(h.Points), Kinds: []kindHistoryJSON{}, Untracked: h.Untracked}
	for _, k := range h.Kinds {
		out.Kinds = append(out.Kinds, kindHistoryJSON{Kind: k.Kind, Points: historyPointsJSON(k.Points)})
	}
	return out
}

// kindOnly returns h with the points of kind only (no Kinds), or an error
// naming the kinds that ran if kind did not.
func kindOnly(h *inspect.History, kind string, span time.Duration) (*inspect.History, error) {
	var names []string
	for _, k := range h.Kinds {
		if k.Kind == kind {
			return &inspect.History{Step: h.Step, Points: k.Points}, nil
		}
		names = append(names, strconv.Quote(k.Kind))
	}
	ran := "no kind ran"
	if len(names) > 0 {
		ran = "kinds that ran: " + strings.Join(names, ", ")
	}
	return nil, usagef("--kind %q: no job of that kind ran in the last %s (%s); untyped jobs are kind \"\"", kind, span, ran)
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
	var history, kind string
	var rollup bool
	cmd := &cobra.Command{
		Use:   "stats <queue> | stats --rollup",
		Short: "Show one queue's counters, throughput per minute or hour, priority levels and write-behind state",
		Long: `Show one queue: jobs by state, consumers, the oldest waiting job, jobs processed
and failed per minute over the last --minutes, the jobs per priority (priority
queues) and the write-behind backlog (queues fed by a writebehind.Writer).

--history SPAN shows processed and failed jobs over SPAN instead: per minute
up to 2h, per hour up to 7d (SPAN like 90m, 2h, 24h, 7d), with the median and
95th percentile of the time jobs waited before a handler started (WAIT) and
of the handlers' run times (RUN), each within 6.25 %. --kind KIND shows the
jobs of one kind (processed and failed are then the handler runs that
returned nil and an error). Consumers count per minute, and those counters
are kept 2 hours; each run of stats (and the dashboard) copies them into hour
counters kept 7 days. Without a dashboard open, run 'streamq stats --rollup'
hourly (cron) to keep the 7-day history complete: it rolls up every queue and
prints how many (the counts need it every 2 hours, the percentiles hourly).

JSON: {"queue":{...as in queues...},"throughput":[{"at","processed","failed"}],
"history":{"step_s":60|3600,"kind"(with --kind),"points":[{"at","processed",
"failed","wait_p50_ms","wait_p95_ms","run_p50_ms","run_p95_ms"}],
"kinds":[{"kind","points":[...]}],"untracked"},
"levels":[{"priority","count"}],"write_behind":{"unpersisted","oldest_age_ms",
"retrying","dead","last_error"}}; with --rollup: {"rolled_up":<queues>}`,
		Example: `  streamq stats orders
  streamq stats orders --minutes 60 --json
  streamq stats orders --history 7d
  streamq stats orders --history 2h --kind email
  streamq stats --rollup    # from cron, hourly: 0 * * * *`,
		Args: rangeArgs(0, 1, "<queue> (or --rollup alone)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if minutes < 1 || minutes > 120 {
				return usagef("--minutes %d: use 1..120 (the counters are kept 2 hours)", minutes)
			}
			span, err := parseSpan(history)
			if err != nil {
				return err
			}
			var kindp *string
			if cmd.Flags().Changed("kind") {
				if span == 0 {
					return usagef("--kind wants --history SPAN: the kinds' histories are shown over a span")
				}
				kindp = &kind
			}
			if len(args) == 0 {
				if !rollup {
					return usagef("stats: wants <queue>, or --rollup alone to roll up every queue")
				}
				return a.rollUpAll(cmd)
			}
			q, err := a.queue(cmd, args[0])
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			if err := q.RollUp(ctx); err != nil {
				fmt.Fprintf(a.stderr, "streamq: warning: %v (the 7-day history misses these minutes until a roll-up succeeds)\n", err)
			}
			return a.stats(ctx, q, minutes, span, kindp)
		},
	}
	cmd.Flags().IntVar(&minutes, "minutes", 10, "minutes of throughput to show (1..120)")
	cmd.Flags().StringVar(&history, "history", "", "show processed and failed jobs over this span: per minute up to 2h, per hour up to 7d")
	cmd.Flags().StringVar(&kind, "kind", "", "with --history: show the jobs of this kind only (\"\" for untyped jobs)")
	cmd.Flags().BoolVar(&rollup, "rollup", false, "without a queue: copy every queue's minute counters into the 7-day hour counters (cron)")
	return cmd
}

// parseSpan reads --history: a Go duration, or whole days ("7d").
func parseSpan(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		var n int
		if _, err2 := fmt.Sscanf(days, "%d", &n); err2 == nil && fmt.Sprint(n) == days {
			d, err = time.Duration(n)*24*time.Hour, nil
		}
	}
	if err != nil || d < time.Minute || d > inspect.HourHistory {
		return 0, usagef("--history %q: use a span from 1m to 7d, like 2h or 7d (per minute up to 2h, per hour beyond)", s)
	}
	return d, nil
}

// rollUpAll runs the roll-up of every queue.
func (a *app) rollUpAll(cmd *cobra.Command) error {
	var n int
	err := a.withInspector(cmd, func(ctx context.Context, in *inspect.Inspector) (err error) {
		n, err = in.RollUp(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("rolled up %d queues: %w", n, err)
	}
	if a.json {
		return printJSON(a.stdout, struct {
			RolledUp int `json:"rolled_up"`
		}{n})
	}
	fmt.Fprintf(a.stdout, "rolled up %d queues\n", n)
	return nil
}

func (a *app) stats(ctx context.Context, q *inspect.Queue, minutes int, span time.Duration, kind *string) error {
	o, err := q.Overview(ctx)
	if err != nil {
		return err
	}
	pts, err := q.Throughput(ctx, minutes)
	if err != nil {
		return err
	}
	var hist *inspect.History
	if span > 0 {
		if hist, err = q.History(ctx, span); err != nil {
			return err
		}
		if kind != nil {
			if hist, err = kindOnly(hist, *kind, span); err != nil {
				return err
			}
		}
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
		out.Throughput = pointsJSON(pts)
		if hist != nil {
			out.History = newHistoryJSON(hist, kind)
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
	if hist != nil {
		return historyTable(w, hist, kind)
	}
	fmt.Fprintln(w, "\nThroughput per minute (UTC):")
	t := newTable(w, "  MINUTE", "PROCESSED", "FAILED")
	for _, p := range pts {
		t.row("  "+p.At.UTC().Format("15:04"), p.Processed, p.Failed)
	}
	return t.flush()
}

// historyTable writes a History as a table, per minute or per hour, with a
// line on the kinds (or the kind the points are of).
func historyTable(w io.Writer, h *inspect.History, kind *string) error {
	step, col, layout := "minute", "  MINUTE", "15:04"
	if h.Step == time.Hour {
		step, col, layout = "hour", "  HOUR", "Jan 02 15:00"
	}
	var sumP, sumF int64
	for _, p := range h.Points {
		sumP += p.Processed
		sumF += p.Failed
	}
	of := ""
	if kind != nil {
		of = fmt.Sprintf(" of kind %s", escape([]byte(strconv.Quote(*kind))))
	}
	fmt.Fprintf(w, "\nHistory%s per %s (UTC), %d processed and %d failed in all:\n", of, step, sumP, sumF)
	t := newTable(w, col, "PROCESSED", "FAILED", "WAIT P50", "WAIT P95", "RUN P50", "RUN P95")
	for _, p := range h.Points {
		t.row("  "+p.At.UTC().Format(layout), p.Processed, p.Failed, dur(p.WaitP50), dur(p.WaitP95), dur(p.RunP50), dur(p.RunP95))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if kind == nil && len(h.Kinds) > 0 {
		names := make([]string, len(h.Kinds))
		for i, k := range h.Kinds {
			names[i] = strconv.Quote(k.Kind)
		}
		fmt.Fprintf(w, "Kinds: %s (--kind KIND shows one)\n", escape([]byte(strings.Join(names, ", "))))
	}
	if h.Untracked > 0 {
		fmt.Fprintf(w, "%d runs of kinds over the 32 a worker tracks per minute are in the queue's figures only\n", h.Untracked)
	}
	return nil
}

// dur is a percentile for a table: "-" when no job ran, else rounded to
// three significant digits.
func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// pointsJSON is pts in JSON.
func pointsJSON(pts []inspect.Point) []pointJSON {
	out := make([]pointJSON, len(pts))
	for i, p := range pts {
		out[i] = pointJSON{At: jsonTime(p.At), Processed: p.Processed, Failed: p.Failed}
	}
	return out
}
