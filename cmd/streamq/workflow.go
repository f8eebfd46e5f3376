package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/visible"
	"github.com/streamq/streamq/workflow"
)

// workflowJSON is the JSON shape of workflow show.
type workflowJSON struct {
	ID       string               `json:"id"`
	State    string               `json:"state"`
	Created  time.Time            `json:"created"`
	Finished *time.Time           `json:"finished,omitempty"`
	Progress workflow.Progress    `json:"progress"`
	Nodes    []workflow.NodeInfo  `json:"nodes"`
	Batches  []workflow.BatchInfo `json:"batches,omitempty"`
}

func newWorkflowCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Show and cancel workflows: jobs that depend on jobs, batches and their callbacks",
	}
	cmd.AddCommand(newWorkflowShowCmd(a), newWorkflowCancelCmd(a))
	return cmd
}

func newWorkflowShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "show <id>",
		Short: "Show a workflow: its state, each node's state and job, its batches' progress",
		Long: `Show a workflow (package workflow) by ID: its state (running, finished,
cancelled), the progress of its nodes, each node's state, queue and job ID
(once enqueued), the parents a waiting node waits for, and each batch's
progress. A finished workflow is readable for its retention.

JSON: {"id","state","created","finished","progress","nodes","batches"}`,
		Example: `  streamq workflow show order-42`,
		Args:    exactArgs(1, "<id>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			defer cancel()
			info, err := workflow.Show(ctx, c, a.conn.prefix, args[0])
			if errors.Is(err, workflow.ErrNotFound) {
				return a.workflowNotFound(err)
			}
			if err != nil {
				return err
			}
			return a.printWorkflow(info)
		},
	}
}

// printWorkflow prints info as a table or JSON.
func (a *app) printWorkflow(info *workflow.Info) error {
	if a.json {
		out := workflowJSON{ID: info.ID, State: string(info.State), Created: info.Created, Progress: info.Progress, Nodes: info.Nodes, Batches: info.Batches}
		if !info.Finished.IsZero() {
			out.Finished = &info.Finished
		}
		return printJSON(a.stdout, out)
	}
	p := info.Progress
	fmt.Fprintf(a.stdout, "workflow %s: %s, %d nodes: %d succeeded, %d retrying, %d dead, %d cancelled, %d not ended\n",
		visible.Escape(info.ID, false), info.State, p.Total, p.Succeeded, p.Failed, p.Dead, p.Cancelled, p.Waiting)
	t := newTable(a.stdout, "NODE", "STATE", "QUEUE", "JOB ID", "WAITING FOR")
	for _, n := range info.Nodes {
		wait := ""
		if len(n.WaitingFor) > 0 {
			wait = "parent " + strings.Join(n.WaitingFor, ", ")
		}
		t.row(visible.Escape(n.Name, false), string(n.State), n.Queue, n.JobID, visible.Escape(wait, false))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, b := range info.Batches {
		bp := b.Progress
		fmt.Fprintf(a.stdout, "batch %s: %d members: %d succeeded, %d retrying, %d dead, %d cancelled, %d not ended (on success: %s, on complete: %s)\n",
			visible.Escape(b.Name, false), bp.Total, bp.Succeeded, bp.Failed, bp.Dead, bp.Cancelled, bp.Waiting, orNone(b.OnSuccess), orNone(b.OnComplete))
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return visible.Escape(s, false)
}

// workflowNotFound says where an unknown workflow may have gone.
func (a *app) workflowNotFound(err error) error {
	return &exitError{code: exitNotFound, err: fmt.Errorf("%w (never enqueued, or expired after its retention; --prefix %q)", err, a.conn.prefix)}
}

// workflowCancelJSON is the JSON shape of workflow cancel.
type workflowCancelJSON struct {
	Workflow  string            `json:"workflow"`
	Cancelled bool              `json:"cancelled"`
	State     string            `json:"state"`
	Nodes     []string          `json:"nodes"`
	Jobs      []workflowJobJSON `json:"jobs"`
}

type workflowJobJSON struct {
	Node   string `json:"node"`
	Queue  string `json:"queue"`
	JobID  string `json:"job_id"`
	Action string `json:"action"`
	Error  string `json:"error,omitempty"`
}

func newWorkflowCancelCmd(a *app) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "cancel <id>",
		Short: "Cancel a workflow: its nodes that have not ended, and their jobs in their queues",
		Long: `Cancel a workflow (package workflow) by ID: every node that has not ended is
cancelled in one script, so no further job of it is enqueued; then each of its
jobs in a queue is stopped: a running one is cancelled (its handler's context
within the consumers' control interval), a waiting, delayed or retrying one
deleted. Batches of the workflow end with it; their callbacks do not run.

It says what it will cancel and asks for confirmation on a terminal (--yes
otherwise), then prints every node and job it cancelled, for the record. A
workflow that already ended is left alone (exit 0, "cancelled": false). A job
that could not be stopped (exit 1) may still run; its outcome changes nothing
in the workflow.

JSON: {"workflow","cancelled","state","nodes":[names],"jobs":[{"node","queue","job_id","action":"cancelled|deleted|failed|","error"}]}`,
		Example: `  streamq workflow cancel order-42
  streamq workflow cancel order-42 --yes --json`,
		Args: exactArgs(1, "<id>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := a.inspector(cmd)
			if err != nil {
				return err
			}
			return a.cancelWorkflow(cmd, in, args[0], yes)
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (needed when stdin is not a terminal)")
	return cmd
}

// cancelWorkflow cancels workflow id after a confirmation that says what
// it cancels, and prints what it did.
func (a *app) cancelWorkflow(cmd *cobra.Command, in *inspect.Inspector, id string, yes bool) error {
	ctx, cancel := a.ctx(cmd)
	info, err := in.Workflow(ctx, id)
	cancel()
	if errors.Is(err, inspect.ErrWorkflowNotFound) {
		return a.workflowNotFound(fmt.Errorf("%w: %s", workflow.ErrNotFound, id))
	}
	if err != nil {
		return err
	}
	out := workflowCancelJSON{Workflow: id, State: info.State, Nodes: []string{}, Jobs: []workflowJobJSON{}}
	if info.State != string(workflow.StateRunning) {
		return a.printWorkflowCancel(out)
	}
	open, jobs := 0, 0
	for _, n := range info.Nodes {
		if !n.Ended() {
			open++
			if n.JobID != "" {
				jobs++
			}
		}
	}
	what := fmt.Sprintf("cancel workflow %s: %d of its %d nodes have not ended, %d of them with a job in a queue", visible.Escape(id, false), open, len(info.Nodes), jobs)
	if err := a.confirm(what, yes); err != nil {
		return err
	}
	ctx, cancel = a.ctx(cmd)
	res, err := in.CancelWorkflow(ctx, id)
	cancel()
	if err != nil && res == nil {
		return err
	}
	out.Cancelled, out.Nodes = res.Cancelled, append(out.Nodes, res.Nodes...)
	if res.Cancelled {
		out.State = string(workflow.StateCancelled)
	}
	var failed []string
	for _, j := range res.Jobs {
		out.Jobs = append(out.Jobs, workflowJobJSON{Node: j.Node, Queue: j.Queue, JobID: j.JobID, Action: j.Action, Error: j.Error})
		if j.Action == "failed" {
			failed = append(failed, fmt.Sprintf("job %s of queue %s (node %s): %s", j.JobID, j.Queue, j.Node, j.Error))
		}
	}
	if perr := a.printWorkflowCancel(out); perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("workflow %s is cancelled, but %d of its jobs could not be stopped and may still run: %s", id, len(failed), joinLines(failed))}
	}
	return nil
}

// printWorkflowCancel prints what workflow cancel did, as lines or JSON.
func (a *app) printWorkflowCancel(out workflowCancelJSON) error {
	if a.json {
		return printJSON(a.stdout, out)
	}
	id := visible.Escape(out.Workflow, false)
	if !out.Cancelled {
		fmt.Fprintf(a.stdout, "workflow %s had already ended (%s): nothing cancelled\n", id, out.State)
		return nil
	}
	fmt.Fprintf(a.stdout, "cancelled workflow %s: %d nodes\n", id, len(out.Nodes))
	for _, n := range out.Nodes {
		fmt.Fprintf(a.stdout, "cancelled node %s\n", visible.Escape(n, false))
	}
	for _, j := range out.Jobs {
		did := j.Action
		if did == "" {
			did = "left alone (it had ended)"
		}
		fmt.Fprintf(a.stdout, "job %s of queue %s (node %s): %s\n", j.JobID, j.Queue, visible.Escape(j.Node, false), did)
	}
	return nil
}
