package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/streamq/streamq/inspect"
)

const (
	// maxWorkflowsListed bounds the unfinished workflows the workflow
	// page lists (one ZREVRANGE of the re-drive's registry).
	maxWorkflowsListed = 50
	// maxExplained bounds the nodes of one workflow page asked why they
	// wait (one Inspector.ExplainNode each); the others show the parents
	// they wait for.
	maxExplained = 25
)

// workflowsData is the workflow page without an ID: the lookup form and
// the unfinished workflows.
type workflowsData struct {
	Recent []inspect.WorkflowEntry
	Max    int
}

// workflowRow is one node of a workflow's page.
type workflowRow struct {
	inspect.WorkflowNode
	JobURL  string
	Reasons []string // why it has not started (a node that has not ended)
}

// workflowData is a workflow's page.
type workflowData struct {
	Info      *inspect.WorkflowInfo
	Rows      []workflowRow
	Counts    map[string]int // nodes per state
	Batches   []batchRow
	CanCancel bool
}

// batchRow is one batch of a workflow's page.
type batchRow struct {
	inspect.WorkflowBatch
	Progress string // "2 of 3 ended: 2 succeeded"
}

// workflows shows the lookup form and the newest unfinished workflows; with
// ?id= it goes to that workflow's page.
func (s *server) workflows(w http.ResponseWriter, r *http.Request) {
	if id := strings.TrimSpace(r.URL.Query().Get("id")); id != "" {
		http.Redirect(w, r, pathOf(s.opts.BasePath, "workflows", id), http.StatusSeeOther)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	recent, err := s.in.Workflows(ctx, maxWorkflowsListed)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "workflows", &view{Title: "Workflows", Tab: "workflows", Data: &workflowsData{Recent: recent, Max: maxWorkflowsListed}})
}

// workflow shows one workflow or batch: each node's job, queue, kind and
// state, and why a node that has not ended waits.
func (s *server) workflow(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	d, err := s.workflowPage(ctx, r.PathValue("workflow"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "workflow", &view{Title: "Workflow " + d.Info.ID, Tab: "workflows", LiveURL: s.live(r), Next: s.here(r, nil), Data: d})
}

// workflowPage reads workflow id and why its nodes wait.
func (s *server) workflowPage(ctx context.Context, id string) (*workflowData, error) {
	info, err := s.in.Workflow(ctx, id)
	if err != nil {
		return nil, err
	}
	d := &workflowData{Info: info, Counts: map[string]int{}, CanCancel: info.State == "running"}
	states := make(map[string]string, len(info.Nodes))
	explained := 0
	for _, n := range info.Nodes {
		states[n.Name] = n.State
		d.Counts[n.State]++
		row := workflowRow{WorkflowNode: n}
		if n.JobID != "" {
			row.JobURL = pathOf(s.opts.BasePath, "queues", n.Queue, "jobs", n.JobID)
		}
		if !n.Ended() {
			if row.Reasons, err = s.nodeReasons(ctx, id, n, &explained); err != nil {
				return nil, err
			}
		}
		d.Rows = append(d.Rows, row)
	}
	for _, b := range info.Batches {
		d.Batches = append(d.Batches, batchRow{WorkflowBatch: b, Progress: batchProgress(b, states)})
	}
	return d, nil
}

// nodeReasons says why node n of workflow id has not started: from
// Inspector.ExplainNode for the first maxExplained nodes (counted in
// explained), from the parents it waits for after that.
func (s *server) nodeReasons(ctx context.Context, id string, n inspect.WorkflowNode, explained *int) ([]string, error) {
	if *explained >= maxExplained {
		var out []string
		for _, p := range n.WaitingFor {
			out = append(out, "waiting for parent "+p)
		}
		return out, nil
	}
	*explained++
	why, err := s.in.ExplainNode(ctx, id, n.Name)
	var nf *inspect.NotFoundError
	if errors.As(err, &nf) && nf.What == "job" {
		return []string{"its job is gone from queue " + n.Queue}, nil
	}
	if err != nil {
		return nil, err
	}
	reasons := why.Reasons
	if why.Job != nil {
		reasons = why.Job.Reasons
	}
	out := make([]string, 0, len(reasons))
	for _, wr := range reasons {
		out = append(out, wr.Detail)
	}
	return out, nil
}

// batchProgress says how far batch b got.
func batchProgress(b inspect.WorkflowBatch, states map[string]string) string {
	by := map[string]int{}
	ended := 0
	for _, m := range b.Members {
		st := states[m]
		by[st]++
		if st == "succeeded" || st == "dead" || st == "cancelled" {
			ended++
		}
	}
	var parts []string
	for _, st := range []string{"succeeded", "dead", "cancelled", "retrying"} {
		if by[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", by[st], st))
		}
	}
	out := fmt.Sprintf("%d of %d ended", ended, len(b.Members))
	if len(parts) > 0 {
		out += ": " + strings.Join(parts, ", ")
	}
	return out
}

// workflowAction cancels a workflow (the only action on workflows).
func (s *server) workflowAction(ctx context.Context, _ http.ResponseWriter, r *http.Request, _ *inspect.Queue) (*done, error) {
	id := r.PathValue("workflow")
	if a := r.PathValue("action"); a != "cancel" {
		return nil, badRequest("unknown action " + a)
	}
	res, err := s.in.CancelWorkflow(ctx, id)
	if err != nil {
		return nil, err
	}
	next := pathOf(s.opts.BasePath, "workflows", id)
	if !res.Cancelled {
		return &done{msg: "Workflow " + id + " had already ended: nothing cancelled.", next: next, count: 0}, nil
	}
	msg := fmt.Sprintf("Cancelled workflow %s: %d nodes", id, len(res.Nodes))
	var failed []string
	for _, j := range res.Jobs {
		if j.Action == "failed" {
			failed = append(failed, j.JobID+" ("+j.Error+")")
		}
	}
	msg += fmt.Sprintf(", %d jobs stopped in their queues.", len(res.Jobs)-len(failed))
	if len(failed) > 0 {
		msg += " Could not stop (they may still run; their outcome changes nothing): " + strings.Join(failed, ", ") + "."
	}
	return &done{msg: msg, next: next, count: len(res.Jobs)}, nil
}
