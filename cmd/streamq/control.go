package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq/inspect"
)

// pausedJSON is the JSON shape of pause and resume.
type pausedJSON struct {
	Queue  string `json:"queue"`
	Paused bool   `json:"paused"`
}

func newPauseCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "pause <queue>",
		Short: "Pause a queue: consumers finish running jobs and take no new ones",
		Long: `Pause a queue. Its consumers and workers see it within their control interval
(1 s by default), finish the jobs they run and take no new ones until resume.
Producers go on enqueueing.

JSON: {"queue","paused":true}`,
		Example: `  streamq pause orders`,
		Args:    exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.setPaused(cmd, args[0], true)
		},
	}
}

func newResumeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "resume <queue>",
		Short: "Resume a paused queue",
		Long: `Resume a paused queue: its consumers take jobs again within their control interval.

JSON: {"queue","paused":false}`,
		Example: `  streamq resume orders`,
		Args:    exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.setPaused(cmd, args[0], false)
		},
	}
}

func (a *app) setPaused(cmd *cobra.Command, name string, paused bool) error {
	q, err := a.queue(cmd, name)
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx(cmd)
	defer cancel()
	verb := "resumed"
	if paused {
		verb = "paused"
		err = q.Pause(ctx)
	} else {
		err = q.Resume(ctx)
	}
	if err != nil {
		return err
	}
	if a.json {
		return printJSON(a.stdout, pausedJSON{Queue: name, Paused: paused})
	}
	fmt.Fprintf(a.stdout, "%s %s\n", verb, name)
	return nil
}

// actionJSON is the JSON shape of cancel, delete and run-now.
type actionJSON struct {
	Queue  string       `json:"queue"`
	Action string       `json:"action"`
	Done   []string     `json:"done"`
	Failed []failedJSON `json:"failed"`
}

type failedJSON struct {
	ID    string `json:"id"`
	Code  string `json:"code"` // "not_found", "wrong_state" or "error"
	Error string `json:"error"`
}

// verb is one of the per-job control actions.
type verb struct {
	use, action, past string
	short, long       string
	example           string
	call              func(*inspect.Queue, context.Context, string) error
	confirmMany       bool
	// all does the action to every job of a state (--all); states are the
	// ones --state takes, the first the default.
	all    func(q *inspect.Queue, ctx context.Context, st inspect.State, progress func(int)) (int, error)
	states []inspect.State
}

func newJobVerbCmd(a *app, v verb) *cobra.Command {
	var yes, all bool
	var state string
	states := make([]string, len(v.states))
	for i, st := range v.states {
		states[i] = string(st)
	}
	cmd := &cobra.Command{
		Use:   v.use + " <queue> <id>... | " + v.use + " <queue> --all",
		Short: v.short,
		Long: v.long + `

With --all it takes every job in --state (` + strings.Join(states, ", ") + `; default ` + states[0] + `)
there is when it starts, 100 at a time, each with the same check as one job: it
says how many there are and asks for confirmation on a terminal (--yes
otherwise), and shows a progress bar on a terminal.

JSON: {"queue","action":"` + v.action + `","done":[ids],"failed":[{"id","code":"not_found|wrong_state|error","error"}]}
Exit code 3 when every failed job was not found, 1 for other failures.
With --all: {"queue","action":"` + v.action + `","state","matched":<jobs there>,"done":<jobs done>}`,
		Example: v.example,
		Args:    rangeArgs(1, -1, "<queue> <id>... or <queue> --all"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := args[1:]
			switch {
			case all && len(ids) > 0:
				return usagef("--all takes every %s job: leave out the IDs, or --all", state)
			case !all && len(ids) == 0:
				return usagef("say which jobs to %s: their IDs, or --all (with --state %s)", v.action, strings.Join(states, "|"))
			case !all && cmd.Flags().Changed("state"):
				return usagef("--state goes with --all: jobs named by ID are found in whichever state they are")
			}
			st := inspect.State(state)
			if all && !slices.Contains(v.states, st) {
				return usagef("--state %q: %s --all takes %s", state, v.use, strings.Join(states, ", "))
			}
			q, err := a.queue(cmd, args[0])
			if err != nil {
				return err
			}
			if all {
				return a.bulkState(cmd, q, v, st, yes)
			}
			if v.confirmMany && len(ids) > 1 {
				if err := a.confirm(fmt.Sprintf("%s %d jobs of queue %s", v.action, len(ids), args[0]), yes); err != nil {
					return err
				}
			}
			out := actionJSON{Queue: args[0], Action: v.action, Done: []string{}, Failed: []failedJSON{}}
			bar := a.progress(v.action, len(ids))
			code := exitOK
			for i, id := range ids {
				jq, jid, err := a.jobQueue(cmd, q, args[0], id)
				if err == nil {
					ctx, cancel := a.ctx(cmd)
					err = v.call(jq, ctx, jid)
					cancel()
				}
				bar.done(i + 1)
				if err == nil {
					out.Done = append(out.Done, id)
					continue
				}
				f := failedJSON{ID: id, Code: "error", Error: err.Error()}
				var se *inspect.StateError
				switch {
				case errors.Is(err, inspect.ErrJobNotFound):
					f.Code = "not_found"
					if code == exitOK {
						code = exitNotFound
					}
				case errors.As(err, &se):
					f.Code = "wrong_state"
					code = exitFailure
				default:
					code = exitFailure
				}
				out.Failed = append(out.Failed, f)
				if ctx := cmd.Context(); ctx.Err() != nil {
					break
				}
			}
			bar.end()
			if a.json {
				if err := printJSON(a.stdout, out); err != nil {
					return err
				}
			} else {
				for _, id := range out.Done {
					fmt.Fprintf(a.stdout, "%s %s\n", v.past, id)
				}
			}
			if code != exitOK {
				var msgs []string
				for _, f := range out.Failed {
					msgs = append(msgs, f.Error)
				}
				return &exitError{code: code, err: fmt.Errorf("%d of %d not %s: %s", len(out.Failed), len(ids), v.past, joinLines(msgs))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (needed when stdin is not a terminal)")
	cmd.Flags().BoolVar(&all, "all", false, "take every job in --state")
	cmd.Flags().StringVar(&state, "state", states[0], "with --all, the jobs to take: "+strings.Join(states, ", "))
	return cmd
}

// bulkState does v to every job of q in state st, after a confirmation that
// says how many there are.
func (a *app) bulkState(cmd *cobra.Command, q *inspect.Queue, v verb, st inspect.State, yes bool) error {
	ctx, cancel := a.ctx(cmd)
	n, err := q.Count(ctx, st)
	cancel()
	if err != nil {
		return err
	}
	out := bulkJSON{Queue: q.Name(), Action: v.action, State: string(st), Matched: int(n)}
	noun := jobsIn(st)
	if n == 0 {
		return a.bulkDone(out, v.past, noun)
	}
	if err := a.confirm(fmt.Sprintf("%s %s of queue %s", v.action, noun(int(n)), q.Name()), yes); err != nil {
		return err
	}
	bar := a.progress(v.action, int(n))
	out.Done, err = v.all(q, cmd.Context(), st, bar.done)
	bar.end()
	if err != nil {
		return fmt.Errorf("%s after %d of %d: %w", v.action, out.Done, n, err)
	}
	return a.bulkDone(out, v.past, noun)
}

// jobsIn returns the noun of n jobs in state st: "1 waiting job".
func jobsIn(st inspect.State) func(int) string {
	return func(n int) string {
		if n == 1 {
			return "1 " + string(st) + " job"
		}
		return fmt.Sprintf("%d %s jobs", n, st)
	}
}

func joinLines(s []string) string {
	if len(s) == 1 {
		return s[0]
	}
	out := ""
	for _, m := range s {
		out += "\n  " + m
	}
	return out
}

func newCancelCmd(a *app) *cobra.Command {
	return newJobVerbCmd(a, verb{
		use: "cancel", action: "cancel", past: "cancel requested for",
		short: "Cancel running jobs: their handler's context is cancelled, the job is dead-lettered as cancelled",
		long: `Ask the consumer that runs each job to cancel it: within its control interval the
handler's context is cancelled with cause streamq.ErrCancelled and the job is
dead-lettered with reason "cancelled" (not retried). Only running jobs can be
cancelled; delete a waiting or delayed job instead.`,
		example: `  streamq cancel orders 1732500000000-0
  streamq cancel orders 1732500000000-0 1732500000001-0 --json
  streamq cancel orders --all --yes`,
		call: (*inspect.Queue).Cancel,
		all: func(q *inspect.Queue, ctx context.Context, _ inspect.State, progress func(int)) (int, error) {
			return q.CancelAll(ctx, progress)
		},
		states: []inspect.State{inspect.StateRunning},
	})
}

func newDeleteCmd(a *app) *cobra.Command {
	return newJobVerbCmd(a, verb{
		use: "delete", action: "delete", past: "deleted",
		short: "Delete waiting, delayed, retrying, dead or cancelled jobs",
		long: `Delete jobs that are waiting, delayed, retrying, dead or cancelled. A running job
cannot be deleted: cancel it. Deleting more than one job asks for confirmation
on a terminal and needs --yes otherwise.`,
		example: `  streamq delete orders 1732500000000-0
  streamq delete orders 1732500000000-0 1732500000001-0 --yes
  streamq delete orders --all --state waiting --yes`,
		call:        (*inspect.Queue).Delete,
		confirmMany: true,
		all:         (*inspect.Queue).DeleteAll,
		states:      []inspect.State{inspect.StateWaiting, inspect.StateDelayed, inspect.StateRetrying},
	})
}

func newRunNowCmd(a *app) *cobra.Command {
	return newJobVerbCmd(a, verb{
		use: "run-now", action: "run-now", past: "due now:",
		short: "Make delayed or retrying jobs due at once (they join the end of the waiting jobs)",
		long: `Make delayed or retrying jobs due at once: each moves from the delayed set into
the stream, at the end of the jobs already waiting (a stream only grows at its
end), and runs when those have started; in a priority queue it moves into the
ready set at its priority. It does not jump the queue.`,
		example: `  streamq run-now orders 1732500000000-0
  streamq run-now orders --all --state retrying --yes`,
		call:   (*inspect.Queue).RunNow,
		all:    (*inspect.Queue).RunAllNow,
		states: []inspect.State{inspect.StateDelayed, inspect.StateRetrying},
	})
}
