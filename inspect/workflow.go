package inspect

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/streamq/streamq/internal/rdb"
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
