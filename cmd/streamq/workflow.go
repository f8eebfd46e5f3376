package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
		Short: "Show workflows: jobs that depend on jobs, batches and their callbacks",
	}
	cmd.AddCommand(newWorkflowShowCmd(a))
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
				return fmt.Errorf("%w (never enqueued, or expired after its retention; --prefix %q)", err, a.conn.prefix)
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
