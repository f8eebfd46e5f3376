package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
)

// State is the state of a workflow.
type State string

// States of a workflow.
const (
	StateRunning   State = "running"   // some node has not ended
	StateFinished  State = "finished"  // every node ended (succeeded, dead or cancelled)
	StateCancelled State = "cancelled" // cancelled with Client.Cancel
)

// NodeState is the state of a node.
type NodeState string

// States of a node.
const (
	NodeWaiting   NodeState = "waiting"   // waiting for its parents (see NodeInfo.WaitingFor)
	NodeRunnable  NodeState = "runnable"  // its parents allow it; being enqueued
	NodeEnqueued  NodeState = "enqueued"  // its job is in its queue (waiting or running)
	NodeRetrying  NodeState = "retrying"  // its job failed an attempt and will be retried
	NodeSucceeded NodeState = "succeeded" // its job succeeded
	NodeDead      NodeState = "dead"      // its job failed for good (dead-lettered)
	NodeCancelled NodeState = "cancelled" // cancelled by a parent's failure or Client.Cancel
)

// Progress counts the nodes of a workflow or batch by state.
type Progress struct {
	Total     int
	Succeeded int
	Failed    int // retrying after a failed attempt
	Dead      int
	Cancelled int
	Waiting   int // waiting for parents, runnable or enqueued (not ended)
}

// add counts one node in state s.
func (p *Progress) add(s NodeState) {
	p.Total++
	switch s {
	case NodeSucceeded:
		p.Succeeded++
	case NodeRetrying:
		p.Failed++
	case NodeDead:
		p.Dead++
	case NodeCancelled:
		p.Cancelled++
	default:
		p.Waiting++
	}
}

// NodeInfo is one node of a workflow as [Client.Show] reads it.
type NodeInfo struct {
	Name  string
	State NodeState
	// Queue and JobID locate the node's job once enqueued ("" before).
	Queue, JobID string
	// WaitingFor are the parents a waiting node still waits for.
	WaitingFor []string
}

// BatchInfo is one batch of a workflow.
type BatchInfo struct {
	Name                  string
	Members               []string
	OnSuccess, OnComplete string // callback nodes ("" none)
	Progress              Progress
}

// Info is a workflow as [Client.Show] reads it.
type Info struct {
	ID       string
	State    State
	Created  time.Time
	Finished time.Time // zero while running
	Progress Progress
	Nodes    []NodeInfo // sorted by name
	Batches  []BatchInfo
}

// Show returns workflow id with the state of each node, or [ErrNotFound].
func (c *Client) Show(ctx context.Context, id string) (*Info, error) {
	return Show(ctx, c.rdb, c.prefix, id)
}

// Show returns workflow id of key prefix prefix (QueueConfig.KeyPrefix) on
// client with the state of each node, or [ErrNotFound]: for tools that
// read workflows without running them (the streamq command). It reads the
// workflow in one MULTI, and the parents of its waiting nodes
// ([inspect.Inspector.Workflow]).
func Show(ctx context.Context, client redis.UniversalClient, prefix, id string) (*Info, error) {
	in, err := inspect.New(client, &inspect.Options{Prefix: prefix})
	if err != nil {
		return nil, fmt.Errorf("streamq: workflow %s: %w", id, err)
	}
	wi, err := in.Workflow(ctx, id)
	var nf *inspect.NotFoundError
	if errors.As(err, &nf) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("streamq: workflow %s: %w", id, err)
	}
	info := &Info{ID: id, State: State(wi.State), Created: wi.Created, Finished: wi.Finished}
	states := make(map[string]NodeState, len(wi.Nodes))
	for _, n := range wi.Nodes {
		ni := NodeInfo{Name: n.Name, State: NodeState(n.State), Queue: n.Queue, JobID: n.JobID, WaitingFor: n.WaitingFor}
		states[n.Name] = ni.State
		info.Nodes = append(info.Nodes, ni)
		info.Progress.add(ni.State)
	}
	for _, b := range wi.Batches {
		bi := BatchInfo{Name: b.Name, Members: b.Members, OnSuccess: b.OnSuccess, OnComplete: b.OnComplete}
		for _, m := range b.Members {
			bi.Progress.add(states[m])
		}
		info.Batches = append(info.Batches, bi)
	}
	return info, nil
}

// Batch returns the batch name of workflow id with its progress, or an
// error wrapping [ErrNotFound].
func (c *Client) Batch(ctx context.Context, id, name string) (*BatchInfo, error) {
	info, err := c.Show(ctx, id)
	if err != nil {
		return nil, err
	}
	for i := range info.Batches {
		if info.Batches[i].Name == name {
			return &info.Batches[i], nil
		}
	}
	return nil, fmt.Errorf("%w: workflow %s has no batch %q", ErrNotFound, id, name)
}

// Cancel cancels workflow id: every node that has not ended is cancelled
// (one script), so no further job of it is enqueued; then each job of it
// that is enqueued and has not ended is cancelled in its queue (a running
// one with inspect's cancel, a waiting one deleted). It reports false for a
// workflow that had already ended, and returns [ErrNotFound] for an
// unknown one. A job that could not be cancelled in its queue (it was
// starting) may still run; its outcome changes nothing in the workflow.
func (c *Client) Cancel(ctx context.Context, id string) (bool, error) {
	state, refs, err := rdb.NewWorkflow(c.rdb, c.prefix, id).Cancel(ctx)
	switch {
	case err != nil:
		return false, fmt.Errorf("streamq: workflow %s: cancel: %w", id, err)
	case state < 0:
		return false, fmt.Errorf("%w: %s", ErrNotFound, id)
	case state == 0:
		return false, nil
	}
	c.cancelJobs(ctx, refs)
	c.unregister(ctx, id)
	return true, nil
}

// cancelJobs cancels the jobs refs ("<queue>\t<job ID>") in their queues,
// best effort: what fails is logged.
func (c *Client) cancelJobs(ctx context.Context, refs []string) {
	for _, ref := range refs {
		qname, jid, _ := strings.Cut(ref, "\t")
		if err := c.cancelJob(ctx, qname, jid); err != nil {
			c.log.WarnContext(ctx, "streamq: cannot cancel a job of a cancelled workflow; it may still run, and changes nothing in the workflow", "queue", qname, "job_id", jid, "error", err)
		}
	}
}

// cancelJob cancels job jid of queue qname: a running one with inspect's
// cancel, a waiting, delayed or retrying one by deleting it
// ([inspect.Queue.Stop]).
func (c *Client) cancelJob(ctx context.Context, qname, jid string) error {
	iq, err := c.inspectQueue(ctx, qname)
	if err != nil {
		return err
	}
	_, err = iq.Stop(ctx, jid)
	return err
}

// inspectQueue returns the inspect view of queue qname.
func (c *Client) inspectQueue(ctx context.Context, qname string) (*inspect.Queue, error) {
	q := c.queues[qname]
	if q == nil {
		return nil, fmt.Errorf("queue %q was not given to workflow.NewClient", qname)
	}
	in, err := inspect.New(c.rdb, &inspect.Options{Prefix: c.prefix, Group: core.Of(q).Group})
	if err != nil {
		return nil, err
	}
	return in.Queue(ctx, qname)
}
