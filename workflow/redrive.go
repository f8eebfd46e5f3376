package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/rdb"
)

// redrivePage is the number of workflows one registry read returns.
const redrivePage = 200

// maxLookups bounds the jobs one re-drive pass looks up in their queues.
const maxLookups = 2000

// Redriven counts what one re-drive pass did.
type Redriven struct {
	Examined int // quiet workflows examined
	Released int // runnable nodes enqueued (their release had been cut short)
	Ended    int // enqueued nodes whose job was found dead-lettered or gone, recorded as dead
	Expired  int // ended or expired workflows removed from the registry
}

// Redrive makes one pass over the unfinished workflows and repairs what a
// crash left: it enqueues the nodes that became runnable but whose job was
// not enqueued (a worker died between recording its outcome and the
// release), and records as dead the nodes whose job was dead-lettered
// without the middleware seeing it (a job that crashed its workers, or was
// deleted by an operator). It examines only workflows quiet for
// Config.RedriveAfter, so it never races a worker in the middle of a
// release (and a race would change nothing: releases and records are
// idempotent). Its work is bounded: pages of the registry, and at most a
// few thousand job lookups per pass. [Client.Run] calls it periodically.
func (c *Client) Redrive(ctx context.Context) (Redriven, error) {
	var r Redriven
	now, err := c.rdb.Time(ctx).Result() // Redis's clock, as the scripts' "touched"
	if err != nil {
		return r, fmt.Errorf("streamq: workflow re-drive: read the time: %w", err)
	}
	lookups := 0
	for start := int64(0); ; start += redrivePage {
		ids, err := c.rdb.ZRange(ctx, rdb.WorkflowRegistry(c.prefix), start, start+redrivePage-1).Result()
		if err != nil {
			return r, fmt.Errorf("streamq: workflow re-drive: read the registry: %w", err)
		}
		for _, id := range ids {
			if err := c.redriveOne(ctx, id, now, &r, &lookups); err != nil {
				return r, fmt.Errorf("streamq: workflow %s: re-drive: %w", id, err)
			}
		}
		if len(ids) < redrivePage || lookups >= maxLookups {
			return r, nil
		}
	}
}

// redriveOne repairs workflow id if it has been quiet long enough.
func (c *Client) redriveOne(ctx context.Context, id string, now time.Time, r *Redriven, lookups *int) error {
	wf := rdb.NewWorkflow(c.rdb, c.prefix, id)
	meta, err := c.rdb.HMGet(ctx, wf.Keys().Meta, "state", "touched").Result()
	if err != nil {
		return err
	}
	state, _ := meta[0].(string)
	if state != string(StateRunning) {
		// Expired or ended: its record was removed (or is about to be).
		r.Expired++
		return c.rdb.ZRem(ctx, rdb.WorkflowRegistry(c.prefix), id).Err()
	}
	touched, _ := meta[1].(string)
	if t := rdb.MillisField(map[string]string{"t": touched}, "t"); now.Sub(time.UnixMilli(t)) < c.cfg.RedriveAfter {
		return nil
	}
	r.Examined++
	st, err := wf.Read(ctx)
	if err != nil {
		return err
	}
	var runnable []string
	for name, s := range st.State {
		switch s {
		case "r":
			runnable = append(runnable, name)
		case "q", "f":
			if *lookups >= maxLookups {
				continue
			}
			*lookups++
			if err := c.checkJob(ctx, wf, id, name, st.Jobs[name], r); err != nil {
				return err
			}
		}
	}
	specs, err := wf.Specs(ctx, runnable)
	if err != nil {
		return err
	}
	r.Released += len(specs)
	return c.release(ctx, id, wf, specs)
}

// checkJob looks up the job of an enqueued node and records the node dead
// if its job is dead-lettered, cancelled or gone.
func (c *Client) checkJob(ctx context.Context, wf *rdb.Workflow, id, node, ref string, r *Redriven) error {
	qname, jid, ok := strings.Cut(ref, "\t")
	if !ok {
		return nil
	}
	iq, err := c.inspectQueue(ctx, qname)
	if err != nil {
		return err
	}
	j, err := iq.Job(ctx, jid)
	var nf *inspect.NotFoundError
	switch {
	case errors.As(err, &nf):
		c.log.WarnContext(ctx, "streamq: the job of a workflow node is gone (deleted?): the node is recorded dead", "workflow", id, "node", node, "queue", qname, "job_id", jid)
	case err != nil:
		return err
	case j.State == inspect.StateDead || j.State == inspect.StateCancelled:
	default:
		return nil
	}
	found, finished, run, err := wf.Complete(ctx, []rdb.Completion{{Node: node, Outcome: "d"}})
	if err != nil || !found[0] {
		return err
	}
	r.Ended++
	if err := c.release(ctx, id, wf, run); err != nil {
		return err
	}
	if finished {
		c.unregister(ctx, id)
	}
	return nil
}

// Run calls [Client.Redrive] every Config.RedriveInterval until ctx is
// cancelled, then returns nil. A failed pass is logged and the next one
// tries again. Run one per deployment or more (passes are idempotent).
func (c *Client) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.RedriveInterval)
	defer t.Stop()
	for {
		if _, err := c.Redrive(ctx); err != nil && ctx.Err() == nil {
			c.log.ErrorContext(ctx, "streamq: workflow re-drive pass failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
