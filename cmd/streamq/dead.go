package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
)

func newDeadCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, show, requeue and purge dead letters (ls, show, requeue, purge)",
		Long: `Work with a queue's dead letters: jobs that exhausted their attempts, failed
permanently, or were cancelled (reason "cancelled"). Filters: --reason, --error
(text in the last error), --since and --until (RFC 3339 time, or a duration
meaning that long ago: 2h), or job IDs.`,
		Example: `  streamq dead ls orders --since 2h
  streamq dead show orders 1732500000000-0
  streamq dead requeue orders --error "connection refused" --yes
  streamq dead purge orders --until 168h --yes`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown subcommand %q of dead: use ls, show, requeue or purge", args[0])
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newDeadLsCmd(a), newDeadShowCmd(a), newDeadBulkCmd(a, true), newDeadBulkCmd(a, false))
	return cmd
}

// deadFlags are the filters of the dead-letter commands.
type deadFlags struct {
	reason, errText, since, until string
	all                           bool
}

func (f *deadFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.reason, "reason", "", "only dead letters with this reason: "+strings.Join(inspect.Reasons(), ", "))
	fs.StringVar(&f.errText, "error", "", "only dead letters whose last error contains this text")
	fs.StringVar(&f.since, "since", "", "only dead letters dead at or after this time (RFC 3339, or a duration ago: 2h)")
	fs.StringVar(&f.until, "until", "", "only dead letters dead before this time (RFC 3339, or a duration ago: 24h)")
}

func (f *deadFlags) filter(now time.Time, ids []string) (inspect.DeadFilter, error) {
	df := inspect.DeadFilter{Reason: f.reason, Error: f.errText, IDs: ids}
	var err error
	if f.reason != "" {
		if _, err := inspect.ParseReason(f.reason); err != nil {
			return df, usagef("--reason %q: use one of %s", f.reason, strings.Join(inspect.Reasons(), ", "))
		}
	}
	if df.Since, err = parseWhen("since", f.since, now); err != nil {
		return df, err
	}
	if df.Until, err = parseWhen("until", f.until, now); err != nil {
		return df, err
	}
	if !df.Since.IsZero() && !df.Until.IsZero() && !df.Since.Before(df.Until) {
		return df, usagef("--since %s is not before --until %s", f.since, f.until)
	}
	return df, nil
}

// filtered reports whether any filter flag is set.
func (f *deadFlags) filtered() bool {
	return f.reason != "" || f.errText != "" || f.since != "" || f.until != ""
}

func (f *deadFlags) String() string {
	var p []string
	for _, kv := range [][2]string{{"reason", f.reason}, {"error", f.errText}, {"since", f.since}, {"until", f.until}} {
		if kv[1] != "" {
			p = append(p, fmt.Sprintf("%s %q", kv[0], kv[1]))
		}
	}
	if len(p) == 0 {
		return "all"
	}
	return strings.Join(p, ", ")
}

// parseWhen reads an RFC 3339 time or a duration ago.
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usagef("--%s %q: use an RFC 3339 time (2026-11-25T08:00:00Z), a date (2026-11-25) or a duration ago (2h)", flag, s)
}

// again returns the filter flags of df for the next-page command, with
// times made absolute (a duration ago would move).
func (f *deadFlags) again(df inspect.DeadFilter) []string {
	var out []string
	if df.Reason != "" {
		out = append(out, "--reason", df.Reason)
	}
	if df.Error != "" {
		out = append(out, "--error", df.Error)
	}
	if !df.Since.IsZero() {
		out = append(out, "--since", df.Since.UTC().Format(time.RFC3339Nano))
	}
	if !df.Until.IsZero() {
		out = append(out, "--until", df.Until.UTC().Format(time.RFC3339Nano))
	}
	return out
}

func newDeadLsCmd(a *app) *cobra.Command {
	var lf listFlags
	var df deadFlags
	var cancelled bool
	cmd := &cobra.Command{
		Use:   "ls <queue>",
		Short: "List dead letters (or cancelled jobs with --cancelled), a page at a time",
		Long: `List a queue's dead letters, oldest first, a page at a time. A filtered page
examines up to 10,000 dead letters to fill it, so it may be short while more
follow: the command for the next page is printed after the table, with the
filters. --reason cancelled lists the cancelled jobs.

JSON: as 'streamq jobs --json'.`,
		Example: `  streamq dead ls orders
  streamq dead ls orders --reason exhausted --since 24h --json
  streamq dead ls orders --cancelled`,
		Args: exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			filter, err := df.filter(time.Now(), nil)
			if err != nil {
				return err
			}
			cancelled = cancelled || filter.Reason == streamq.ReasonCancelled
			lf.state = string(inspect.StateDead)
			again := []string{"dead", "ls", args[0]}
			if cancelled {
				lf.state = string(inspect.StateCancelled)
				again = append(again, "--cancelled")
			}
			o, err := lf.options()
			if err != nil {
				return err
			}
			o.Dead = filter
			return a.listJobs(cmd, args[0], o, slices.Concat(again, df.again(filter), lf.again()))
		},
	}
	lf.register(cmd, false)
	df.register(cmd)
	cmd.Flags().BoolVar(&cancelled, "cancelled", false, "list cancelled jobs instead of dead letters")
	return cmd
}

func newDeadShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "show <queue> <id>",
		Short:   "Show one dead letter (as 'streamq job')",
		Long:    "Show one dead letter: payload, headers, attempts, its errors and reason.\n\nJSON: as 'streamq job --json'.",
		Example: `  streamq dead show orders 1732500000000-0`,
		Args:    exactArgs(2, "<queue> <id>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.showJob(cmd, args[0], args[1])
		},
	}
}

// bulkJSON is the JSON shape of dead requeue and dead purge.
type bulkJSON struct {
	Queue   string `json:"queue"`
	Action  string `json:"action"`
	State   string `json:"state,omitempty"` // the state of a --all action of delete, run-now, cancel
	Matched int    `json:"matched"`
	Done    int    `json:"done"`
}

func newDeadBulkCmd(a *app, requeue bool) *cobra.Command {
	var df deadFlags
	var yes bool
	use, verb, past := "purge", "purge", "purged"
	short := "Delete dead letters for good (by IDs, filter, or --all)"
	example := `  streamq dead purge orders 1732500000000-0
  streamq dead purge orders --reason cancelled --until 168h --yes
  streamq dead purge orders --all --yes`
	if requeue {
		use, verb, past = "requeue", "requeue", "requeued"
		short = "Put dead letters back into their queue (by IDs, filter, or --all)"
		example = `  streamq dead requeue orders 1732500000000-0
  streamq dead requeue orders --error "connection refused" --since 1h --yes
  streamq dead requeue orders --all --yes`
	}
	cmd := &cobra.Command{
		Use:   use + " <queue> [id...]",
		Short: short,
		Long: short + `.

Name the jobs by ID, select them with filters, or take every one with --all.
Acting on more than one job asks for confirmation on a terminal and needs --yes
otherwise; a progress bar shows on a terminal.

JSON: {"queue","action":"` + verb + `","matched":<jobs selected>,"done":<jobs ` + past + `>}`,
		Example: example,
		Args:    rangeArgs(1, -1, "<queue> [id...]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := args[1:]
			switch {
			case len(ids) == 0 && !df.filtered() && !df.all:
				return usagef("say which dead letters to %s: job IDs, a filter (--reason, --error, --since, --until), or --all", verb)
			case df.all && (len(ids) > 0 || df.filtered()):
				return usagef("--all takes every dead letter: leave out the IDs and filters, or --all")
			}
			f, err := df.filter(time.Now(), ids)
			if err != nil {
				return err
			}
			q, err := a.queue(cmd, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			n := len(ids)
			if n == 0 {
				if n, err = a.countDead(cmd, q, f, df.all); err != nil {
					return err
				}
			}
			if n > 1 || len(ids) == 0 {
				what := fmt.Sprintf("%s %s of queue %s (%s)", verb, deadLetters(n), args[0], df.String())
				if len(ids) > 0 {
					what = fmt.Sprintf("%s %s of queue %s", verb, deadLetters(n), args[0])
				}
				if n == 0 {
					return a.bulkDone(bulkJSON{Queue: args[0], Action: verb}, past, deadLetters)
				}
				if err := a.confirm(what, yes); err != nil {
					return err
				}
			}
			bar := a.progress(verb, n)
			var done int
			if requeue {
				done, err = q.RequeueDead(ctx, f, bar.done)
			} else {
				done, err = q.PurgeDead(ctx, f, bar.done)
			}
			bar.end()
			if err != nil {
				return fmt.Errorf("%s after %d of %d: %w", verb, done, n, err)
			}
			if len(ids) > 0 && done < len(ids) {
				_ = a.bulkDone(bulkJSON{Queue: args[0], Action: verb, Matched: n, Done: done}, past, deadLetters)
				return &exitError{code: exitNotFound, err: fmt.Errorf("%d of the %d IDs are not dead letters of %s ('streamq dead ls %s' lists them)", len(ids)-done, len(ids), args[0], args[0])}
			}
			return a.bulkDone(bulkJSON{Queue: args[0], Action: verb, Matched: n, Done: done}, past, deadLetters)
		},
	}
	df.register(cmd)
	cmd.Flags().BoolVar(&df.all, "all", false, "take every dead letter of the queue")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (needed when stdin is not a terminal)")
	return cmd
}

// countDead counts the dead letters f selects, all of them (not the first
// ScanLimit only, as inspect's CountDead does): the length of the
// dead-letter stream for --all, else a walk over every letter, a bounded
// number per Redis call, until done or interrupted.
func (a *app) countDead(cmd *cobra.Command, q *inspect.Queue, f inspect.DeadFilter, all bool) (int, error) {
	ctx, cancel := a.ctx(cmd)
	ov, err := q.Overview(ctx)
	cancel()
	if err != nil {
		return 0, err
	}
	total := int(ov.Dead + ov.Cancelled)
	if all || total == 0 {
		return total, nil
	}
	in, err := inspect.New(a.client, &inspect.Options{Prefix: a.conn.prefix, Group: a.conn.group, ScanLimit: math.MaxInt})
	if err != nil {
		return 0, err
	}
	full, err := in.Queue(cmd.Context(), q.Name())
	if err != nil {
		return 0, err
	}
	return full.CountDead(cmd.Context(), f)
}

// bulkDone prints what a bulk action did; noun names its jobs.
func (a *app) bulkDone(out bulkJSON, past string, noun func(int) string) error {
	if a.json {
		return printJSON(a.stdout, out)
	}
	fmt.Fprintf(a.stdout, "%s %s of %s\n", past, noun(out.Done), out.Queue)
	return nil
}

// deadLetters is "1 dead letter" or "n dead letters".
func deadLetters(n int) string {
	if n == 1 {
		return "1 dead letter"
	}
	return fmt.Sprintf("%d dead letters", n)
}
