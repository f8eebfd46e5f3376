package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/visible"
)

// flowJSON is the JSON shape of flow show and flow set.
type flowJSON struct {
	Queue  string             `json:"queue"`
	Global int                `json:"global"`
	PerKey int                `json:"per_key"`
	Keys   map[string]int     `json:"keys,omitempty"`
	Rate   float64            `json:"rate"`
	Rates  map[string]float64 `json:"rates,omitempty"`
	// Kinds and KindPerKey: caps of single kinds, in all and per key.
	Kinds      map[string]int   `json:"kinds,omitempty"`
	KindPerKey map[string]int   `json:"kind_per_key,omitempty"`
	KindSlots  map[string]int64 `json:"kind_slots,omitempty"`
	Weights    map[string]int   `json:"weights,omitempty"`
	Running    int64            `json:"running"`
	Slots      map[string]int64 `json:"slots"`
	Waiting    map[string]int64 `json:"waiting"`
}

func newFlowCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "flow",
		Short: "Show or set a queue's flow control: global and per-key concurrency caps",
	}
	cmd.AddCommand(newFlowShowCmd(a), newFlowSetCmd(a))
	return cmd
}

func newFlowShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show <queue>",
		Short: "Show a queue's caps, the jobs running per flow key and the jobs waiting aside",
		Long: `Show a queue's flow-control caps, how many jobs run in all and per flow key,
and how many wait aside per flow key (at most 1,000 keys).

JSON: {"queue","global","per_key","keys","rate","rates","kinds","kind_per_key","weights",
"running","slots","kind_slots","waiting"}`,
		Example: `  streamq flow show orders`,
		Args:    exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.showFlow(cmd, args[0])
		},
	}
}

func newFlowSetCmd(a *app) *cobra.Command {
	var global, perKey int
	var rate float64
	var keys, rates, kinds, kindPerKey, weights []string
	cmd := &cobra.Command{
		Use:   "set <queue>",
		Short: "Set a queue's caps (replacing them); 0 removes a cap",
		Long: `Replace a queue's flow-control caps. Running consumers apply them to the next
jobs they start; jobs waiting aside start at once into the room a raised cap
made. A lowered cap never stops a running job. Caps not given are removed.

JSON: as flow show, after the change`,
		Example: `  streamq flow set orders --global 50 --per-key 2 --key customer:42=10 --rate 10
  streamq flow set orders --kind report.build=2 --kind-per-key email.send=1
  streamq flow set orders --global 50 --weight customer:42=3`,
		Args: exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			l := inspect.FlowLimits{Global: global, PerKey: perKey}
			for _, kv := range keys {
				k, v, ok := strings.Cut(kv, "=")
				n, err := strconv.Atoi(v)
				if !ok || k == "" || err != nil || n < 1 {
					return usagef("--key %q: use <flow key>=<cap>, a cap of 1 or more", kv)
				}
				if l.Keys == nil {
					l.Keys = map[string]int{}
				}
				l.Keys[k] = n
			}
			l.Rate = rate
			for _, kv := range rates {
				k, v, ok := strings.Cut(kv, "=")
				r, err := strconv.ParseFloat(v, 64)
				if !ok || k == "" || err != nil || r <= 0 {
					return usagef("--key-rate %q: use <flow key>=<jobs per second>, above 0", kv)
				}
				if l.Rates == nil {
					l.Rates = map[string]float64{}
				}
				l.Rates[k] = r
			}
			var err error
			if l.Kinds, err = capFlags("--kind", "<kind>=<cap>", kinds); err != nil {
				return err
			}
			if l.KindPerKey, err = capFlags("--kind-per-key", "<kind>=<cap per flow key>", kindPerKey); err != nil {
				return err
			}
			if l.Weights, err = capFlags("--weight", "<flow key>=<weight>", weights); err != nil {
				return err
			}
			if global < 0 || perKey < 0 || rate < 0 {
				return usagef("caps must be 0 (none) or more")
			}
			q, err := a.queue(cmd, args[0])
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			if err := q.SetFlowLimits(ctx, l); err != nil {
				return err
			}
			return a.showFlow(cmd, args[0])
		},
	}
	f := cmd.Flags()
	f.IntVar(&global, "global", 0, "the most jobs of the queue running at once (0: no cap)")
	f.IntVar(&perKey, "per-key", 0, "the most jobs of each flow key running at once (0: no cap)")
	f.StringArrayVar(&keys, "key", nil, "cap of one flow key, <key>=<cap> (repeatable)")
	f.Float64Var(&rate, "rate", 0, "the most jobs of each flow key to start per second (0: no limit)")
	f.StringArrayVar(&rates, "key-rate", nil, "rate limit of one flow key, <key>=<jobs per second> (repeatable)")
	f.StringArrayVar(&weights, "weight", nil, "weight of one flow key in the round robin, <key>=<weight> (repeatable; others weigh 1)")
	f.StringArrayVar(&kinds, "kind", nil, "cap of the jobs of one kind, <kind>=<cap> (repeatable)")
	f.StringArrayVar(&kindPerKey, "kind-per-key", nil, "cap per flow key of the jobs of one kind, <kind>=<cap> (repeatable)")
	return cmd
}

// capFlags parses the values of a repeatable flag of "<name>=<cap>" pairs.
func capFlags(flag, form string, vals []string) (map[string]int, error) {
	var m map[string]int
	for _, kv := range vals {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || k == "" || err != nil || n < 1 {
			return nil, usagef("%s %q: use %s, a cap of 1 or more", flag, kv, form)
		}
		if m == nil {
			m = map[string]int{}
		}
		m[k] = n
	}
	return m, nil
}

func (a *app) showFlow(cmd *cobra.Command, name string) error {
	q, err := a.queue(cmd, name)
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx(cmd)
	defer cancel()
	st, err := q.Flow(ctx)
	if err != nil {
		return err
	}
	if a.json {
		return printJSON(a.stdout, flowJSON{Queue: name, Global: st.Limits.Global, PerKey: st.Limits.PerKey, Keys: st.Limits.Keys, Rate: st.Limits.Rate, Rates: st.Limits.Rates,
			Kinds: st.Limits.Kinds, KindPerKey: st.Limits.KindPerKey, KindSlots: st.PerKind, Weights: st.Limits.Weights,
			Running: st.Running, Slots: st.PerKey, Waiting: st.Waiting})
	}
	fmt.Fprintf(a.stdout, "queue %s: global cap %s, per-key cap %s, per-key rate %s, %d running\n", visible.Escape(name, false),
		capText(st.Limits.Global), capText(st.Limits.PerKey), rateText(st.Limits.Rate), st.Running)
	keys := make([]string, 0, len(st.PerKey)+len(st.Waiting))
	for k := range st.PerKey {
		keys = append(keys, k)
	}
	for k := range st.Waiting {
		if _, ok := st.PerKey[k]; !ok {
			keys = append(keys, k)
		}
	}
	for k := range st.Limits.Keys {
		if _, ok := st.PerKey[k]; !ok && st.Waiting[k] == 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for k := range st.Limits.Rates {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	t := newTable(a.stdout, "FLOW KEY", "RUNNING", "CAP", "RATE", "WAITING")
	for _, k := range keys {
		c := st.Limits.PerKey
		if n, ok := st.Limits.Keys[k]; ok {
			c = n
		}
		if k == "" {
			c = 0
		}
		r := st.Limits.Rate
		if v, ok := st.Limits.Rates[k]; ok {
			r = v
		}
		if k == "" {
			r = 0
		}
		t.row(k, st.PerKey[k], capText(c), rateText(r), st.Waiting[k])
	}
	if err := t.flush(); err != nil {
		return err
	}
	return showKinds(a, st)
}

// showKinds prints the caps per kind and the jobs each kind runs.
func showKinds(a *app, st *inspect.FlowState) error {
	kinds := make([]string, 0, len(st.PerKind))
	for k := range st.PerKind {
		kinds = append(kinds, k)
	}
	for _, m := range []map[string]int{st.Limits.Kinds, st.Limits.KindPerKey} {
		for k := range m {
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	if len(kinds) == 0 {
		return nil
	}
	slices.Sort(kinds)
	fmt.Fprintln(a.stdout)
	t := newTable(a.stdout, "KIND", "RUNNING", "CAP", "CAP PER KEY")
	for _, k := range kinds {
		t.row(k, st.PerKind[k], capText(st.Limits.Kinds[k]), capText(st.Limits.KindPerKey[k]))
	}
	return t.flush()
}

func rateText(r float64) string {
	if r <= 0 {
		return "none"
	}
	return strconv.FormatFloat(r, 'g', -1, 64) + "/s"
}

func capText(n int) string {
	if n <= 0 {
		return "none"
	}
	return strconv.Itoa(n)
}

// whyJSON is the JSON shape of why for one job.
type whyJSON struct {
	Queue   string   `json:"queue"`
	ID      string   `json:"id"`
	State   string   `json:"state"`
	Reasons []reason `json:"reasons"`
}

type reason struct {
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

func newWhyCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "why <queue> [job]",
		Short: "Say why a job has not started, or how many jobs each reason holds in a queue",
		Long: `With a job: why it has not started, every reason with its evidence: paused,
delayed or in retry backoff until T, its flow key at its cap (n of n running),
the queue at its global cap, behind N jobs, no live consumer. A running or
finished job has no reason.
Without: how many jobs of the queue each reason holds.

JSON: {"queue","id","state","reasons":[{"reason","detail"}]}, or
{"queue","reasons":{"<reason>":n}}`,
		Example: `  streamq why orders 1700000000000-0
  streamq why orders`,
		Args: rangeArgs(1, 2, "<queue> [job]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q, err := a.queue(cmd, args[0])
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			if len(args) == 1 {
				sum, err := q.WaitSummary(ctx)
				if err != nil {
					return err
				}
				if a.json {
					return printJSON(a.stdout, map[string]any{"queue": args[0], "reasons": sum})
				}
				t := newTable(a.stdout, "REASON", "JOBS")
				for _, r := range inspect.WaitReasons() {
					if n, ok := sum[r]; ok {
						t.row(r, n)
					}
				}
				return t.flush()
			}
			w, err := q.Explain(ctx, args[1])
			if err != nil {
				return err
			}
			out := whyJSON{Queue: args[0], ID: w.Job.ID, State: string(w.Job.State), Reasons: []reason{}}
			for _, r := range w.Reasons {
				out.Reasons = append(out.Reasons, reason{Reason: r.Reason, Detail: r.Detail})
			}
			if a.json {
				return printJSON(a.stdout, out)
			}
			if len(out.Reasons) == 0 {
				fmt.Fprintf(a.stdout, "job %s is %s: it waits for nothing\n", visible.Escape(out.ID, false), out.State)
				return nil
			}
			fmt.Fprintf(a.stdout, "job %s is %s:\n", visible.Escape(out.ID, false), out.State)
			for _, r := range out.Reasons {
				fmt.Fprintf(a.stdout, "  %s: %s\n", r.Reason, visible.Escape(r.Detail, false))
			}
			return nil
		},
	}
}
