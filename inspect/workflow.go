package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// NodeWhy is why a node of a workflow (package workflow) has not started.
type NodeWhy struct {
	Workflow, Node string
	// State is the node's state as package workflow names it ("waiting",
	// "runnable", "enqueued", "retrying", "succeeded", "dead",
	// "cancelled").
	State string
	// Queue and JobID locate the node's job once it is enqueued; Job is
	// then the queue's answer ([Queue.Explain]) for it, nil before.
	Queue, JobID string
	Job          *Why
	// Reasons are why a node without a job waits: one [WaitParent] per
	// parent that has not ended, or [WaitRelease].
	Reasons []WaitReason
}

var nodeStateNames = map[string]string{
	"w": "waiting", "r": "runnable", "q": "enqueued", "f": "retrying",
	"s": "succeeded", "d": "dead", "c": "cancelled",
}

// ExplainNode returns why node of workflow id has not started: "waiting
// for parent X" for each parent that has not ended, being enqueued, or,
// once its job is in its queue, what [Queue.Explain] says of that job. An
// unknown workflow or node is a [*NotFoundError].
func (in *Inspector) ExplainNode(ctx context.Context, id, node string) (*NodeWhy, error) {
	wf := rdb.NewWorkflow(in.rdb, in.opts.Prefix, id)
	st, err := wf.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: explain workflow %s: %w", id, err)
	}
	if len(st.Meta) == 0 {
		return nil, &NotFoundError{What: "workflow", Name: id}
	}
	s, ok := st.State[node]
	if !ok {
		return nil, &NotFoundError{What: "workflow node", Name: node}
	}
	w := &NodeWhy{Workflow: id, Node: node, State: nodeStateNames[s]}
	if ref, ok := st.Jobs[node]; ok {
		w.Queue, w.JobID, _ = strings.Cut(ref, "\t")
	}
	switch s {
	case "w":
		by, err := wf.WaitingFor(ctx, []string{node}, st.State)
		if err != nil {
			return nil, fmt.Errorf("inspect: explain workflow %s: %w", id, err)
		}
		parents := by[node]
		slices.Sort(parents)
		for _, p := range parents {
			w.Reasons = append(w.Reasons, WaitReason{Reason: WaitParent, Parent: p,
				Detail: fmt.Sprintf("waiting for parent %s (%s)", p, nodeStateNames[st.State[p]])})
		}
	case "r":
		w.Reasons = []WaitReason{{Reason: WaitRelease, Detail: "its parents allow it; its job is being enqueued"}}
	case "q", "f":
		if w.JobID == "" {
			break
		}
		q, err := in.Queue(ctx, w.Queue)
		if err != nil {
			return nil, err
		}
		if w.Job, err = q.Explain(ctx, w.JobID); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// WorkflowInfo is a workflow (package workflow) as [Inspector.Workflow]
// reads it.
type WorkflowInfo struct {
	ID string
	// State is "running", "finished" or "cancelled".
	State    string
	Created  time.Time
	Finished time.Time // zero while running
	// Nodes are sorted by name.
	Nodes []WorkflowNode
	// Batches are sorted by name.
	Batches []WorkflowBatch
}

// WorkflowNode is one node of a [WorkflowInfo].
type WorkflowNode struct {
	Name string
	// State is as in [NodeWhy.State].
	State string
	// Queue and JobID locate the node's job once enqueued ("" before).
	Queue, JobID string
	// Kind is the kind of the node's job.
	Kind string
	// WaitingFor are the parents a waiting node still waits for, sorted.
	WaitingFor []string
}

// Ended reports whether the node succeeded, died or was cancelled.
func (n WorkflowNode) Ended() bool {
	return n.State == "succeeded" || n.State == "dead" || n.State == "cancelled"
}

// WorkflowBatch is one batch of a [WorkflowInfo]: its members and its
// callback nodes ("" for none).
type WorkflowBatch struct {
	Name                  string
	Members               []string
	OnSuccess, OnComplete string
}

// Workflow reads workflow id (in one MULTI, then the parents of its waiting
// nodes). An unknown or expired workflow is a [*NotFoundError].
func (in *Inspector) Workflow(ctx context.Context, id string) (*WorkflowInfo, error) {
	wf := rdb.NewWorkflow(in.rdb, in.opts.Prefix, id)
	st, err := wf.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: read workflow %s: %w", id, err)
	}
	if len(st.Meta) == 0 {
		return nil, &NotFoundError{What: "workflow", Name: id}
	}
	info := &WorkflowInfo{ID: id, State: st.Meta["state"], Created: time.UnixMilli(rdb.MillisField(st.Meta, "created"))}
	if f := rdb.MillisField(st.Meta, "finished"); f > 0 {
		info.Finished = time.UnixMilli(f)
	}
	kinds, err := nodeKinds(ctx, wf, st.State)
	if err != nil {
		return nil, fmt.Errorf("inspect: read workflow %s: %w", id, err)
	}
	var waiting []string
	for name, s := range st.State {
		n := WorkflowNode{Name: name, State: nodeStateNames[s], Kind: kinds[name]}
		if ref, ok := st.Jobs[name]; ok {
			n.Queue, n.JobID, _ = strings.Cut(ref, "\t")
		}
		if s == "w" {
			waiting = append(waiting, name)
		}
		info.Nodes = append(info.Nodes, n)
	}
	slices.SortFunc(info.Nodes, func(a, b WorkflowNode) int { return strings.Compare(a.Name, b.Name) })
	by, err := wf.WaitingFor(ctx, waiting, st.State)
	if err != nil {
		return nil, fmt.Errorf("inspect: read workflow %s: %w", id, err)
	}
	for i := range info.Nodes {
		info.Nodes[i].WaitingFor = by[info.Nodes[i].Name]
		slices.Sort(info.Nodes[i].WaitingFor)
	}
	for _, js := range st.Batches {
		var b struct {
			Name       string   `json:"name"`
			Members    []string `json:"members"`
			OnSuccess  string   `json:"on_success"`
			OnComplete string   `json:"on_complete"`
		}
		if err := json.Unmarshal([]byte(js), &b); err != nil {
			return nil, fmt.Errorf("inspect: workflow %s has a malformed batch: %w", id, err)
		}
		info.Batches = append(info.Batches, WorkflowBatch{Name: b.Name, Members: b.Members, OnSuccess: b.OnSuccess, OnComplete: b.OnComplete})
	}
	slices.SortFunc(info.Batches, func(a, b WorkflowBatch) int { return strings.Compare(a.Name, b.Name) })
	return info, nil
}

// nodeKinds reads the kind of each node's job from its stored spec.
func nodeKinds(ctx context.Context, wf *rdb.Workflow, states map[string]string) (map[string]string, error) {
	names := make([]string, 0, len(states))
	for name := range states {
		names = append(names, name)
	}
	specs, err := wf.Specs(ctx, names)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(specs))
	for _, sp := range specs {
		if s, err := wire.ParseSpec(sp.Spec); err == nil {
			out[sp.Name] = s.Kind
		}
	}
	return out, nil
}

// WorkflowEntry is one workflow of [Inspector.Workflows].
type WorkflowEntry struct {
	ID      string
	Created time.Time
}

// Workflows returns up to limit workflows that have not finished (the
// registry the workflow re-drive reads), newest first; finished and
// cancelled workflows leave it (read those by ID with
// [Inspector.Workflow]). It is one ZREVRANGE of at most limit entries.
func (in *Inspector) Workflows(ctx context.Context, limit int) ([]WorkflowEntry, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("inspect: workflows: limit %d: use a positive number", limit)
	}
	zs, err := in.rdb.ZRevRangeWithScores(ctx, rdb.WorkflowRegistry(in.opts.Prefix), 0, int64(limit)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("inspect: read the workflow registry: %w", err)
	}
	out := make([]WorkflowEntry, 0, len(zs))
	for _, z := range zs {
		id, _ := z.Member.(string)
		out = append(out, WorkflowEntry{ID: id, Created: time.UnixMilli(int64(z.Score))})
	}
	return out, nil
}

// WorkflowCancel is what [Inspector.CancelWorkflow] did.
type WorkflowCancel struct {
	Workflow string
	// Cancelled is false when the workflow had already ended: nothing was
	// done.
	Cancelled bool
	// Nodes are the nodes that had not ended and are cancelled now.
	Nodes []string
	// Jobs are the jobs of the workflow found in their queues, each with
	// what was done to it.
	Jobs []WorkflowJobStop
}

// WorkflowJobStop is one job of a cancelled workflow.
type WorkflowJobStop struct {
	Node, Queue, JobID string
	// Action is "cancelled" (it was running), "deleted" (it was waiting,
	// delayed or retrying), "" (it had ended), or "failed" (see Error: it
	// may still run, and its outcome changes nothing in the workflow).
	Action string
	Error  string
}

// CancelWorkflow cancels workflow id: every node that has not ended is
// cancelled in one script, so no further job of it is enqueued; then each
// of its jobs in a queue that has not ended is stopped ([Queue.Stop]: a
// running one cancelled, a waiting one deleted), and the workflow leaves
// the registry. A workflow that had already ended is left as it is
// (Cancelled false). An unknown workflow is a [*NotFoundError].
func (in *Inspector) CancelWorkflow(ctx context.Context, id string) (*WorkflowCancel, error) {
	wf := rdb.NewWorkflow(in.rdb, in.opts.Prefix, id)
	before, err := wf.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: cancel workflow %s: %w", id, err)
	}
	state, refs, err := wf.Cancel(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("inspect: cancel workflow %s: %w", id, err)
	case state < 0:
		return nil, &NotFoundError{What: "workflow", Name: id}
	}
	out := &WorkflowCancel{Workflow: id, Cancelled: state > 0}
	if !out.Cancelled {
		return out, nil
	}
	for name, s := range before.State {
		if s != "s" && s != "d" && s != "c" {
			out.Nodes = append(out.Nodes, name)
		}
	}
	slices.Sort(out.Nodes)
	nodeOf := make(map[string]string, len(before.Jobs))
	for name, ref := range before.Jobs {
		nodeOf[ref] = name
	}
	for _, ref := range refs {
		j := WorkflowJobStop{Node: nodeOf[ref]}
		j.Queue, j.JobID, _ = strings.Cut(ref, "\t")
		j.Action, err = in.stopJob(ctx, j.Queue, j.JobID)
		if err != nil {
			j.Action, j.Error = "failed", err.Error()
		}
		out.Jobs = append(out.Jobs, j)
	}
	if err := in.rdb.ZRem(ctx, rdb.WorkflowRegistry(in.opts.Prefix), id).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return out, fmt.Errorf("inspect: cancel workflow %s: remove it from the registry (the re-drive will): %w", id, err)
	}
	return out, nil
}

// stopJob stops job jid of queue qname ([Queue.Stop]).
func (in *Inspector) stopJob(ctx context.Context, qname, jid string) (string, error) {
	q, err := in.Queue(ctx, qname)
	if err != nil {
		return "", err
	}
	return q.Stop(ctx, jid)
}
