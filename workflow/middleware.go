package workflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
)

type ctxKey struct{}

// jobState is what the middleware puts in a workflow job's context.
type jobState struct {
	c      *Client
	id     string
	node   string
	result []byte
	has    bool
}

// Retries of a record that Redis did not confirm (a connection cut, a
// failover): recordTries calls in all, waiting recordBackoff, doubling up
// to recordMaxBackoff, between two (about 2.3 s in all); then the job is
// handed back, uncharged, after handBackAfter.
const (
	recordTries      = 8
	recordBackoff    = 20 * time.Millisecond
	recordMaxBackoff = time.Second
	handBackAfter    = time.Second
)

// Middleware returns the middleware that runs the workflow side of jobs:
// put it in the ConsumerConfig.Middleware of every consumer that runs
// workflow jobs. Jobs without the workflow headers pass through untouched,
// at no cost (no Redis command).
//
// When a workflow job's handler returns, the middleware records the
// outcome in the workflow (one script on its slot) before it returns, so
// before the job is acknowledged, and enqueues the children that the
// outcome made runnable: a success (nil) releases the children; a final
// failure (a [streamq.Permanent] error, a cancel, or the job's last
// attempt) cancels or releases them by the policy of each dependency; a
// failure that will be retried records nothing but the failed attempt.
// The records of a workflow's jobs that end while one of its records is
// under way are sent together in the next call.
//
// A record that Redis does not confirm is tried again with backoff (about
// 2 s in all; a cancelled context of the handler whose job sends the call
// stops the waits). A success
// still not confirmed then hands the job back without charging an attempt
// ([streamq.Postpone]): recording twice changes nothing. Before a job runs
// again (any attempt after the first, or a copy handed back), the
// middleware reads its node's state: a node already recorded as succeeded
// does not run its handler again; the job is acknowledged, and the
// children its success made runnable are released.
func (c *Client) Middleware() streamq.Middleware {
	return func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) (err error) {
			id, node := msg.Headers[HeaderWorkflow], msg.Headers[HeaderNode]
			if id == "" || node == "" {
				return next.Handle(ctx, msg)
			}
			js := &jobState{c: c, id: id, node: node}
			if ranBefore(msg) {
				done, err := c.succeeded(ctx, js)
				switch {
				case err != nil:
					c.log.ErrorContext(ctx, "streamq: cannot read whether a workflow job already succeeded; handing it back", "workflow", id, "node", node, "error", err)
					return streamq.Postpone(handBackAfter, fmt.Errorf("streamq: workflow %s node %s: read its state: %w", id, node, err))
				case done:
					// Recorded before, but the job stayed: its handler
					// does not run again. Recording again releases the
					// children its success made runnable, if a crash
					// cut that short.
					return c.recorded(ctx, js, msg, nil)
				}
			}
			defer func() {
				if r := recover(); r != nil {
					// Record the failed attempt, then let the consumer
					// recover the panic as it does for any handler.
					_ = c.record(ctx, js, msg, &streamq.PanicError{Value: r})
					panic(r)
				}
			}()
			herr := next.Handle(context.WithValue(ctx, ctxKey{}, js), msg)
			return c.recorded(ctx, js, msg, herr)
		})
	}
}

// ranBefore reports whether the job may have run its handler before: an
// attempt after the first (a failure or a crash was charged), or a copy
// written again (retried, postponed or handed back at a shutdown: its
// entry is not the one its ID names). The first run of a job is neither,
// so it reads nothing.
func ranBefore(msg *streamq.Message) bool {
	return msg.Attempt > 1 || msg.EntryID != msg.ID
}

// succeeded reports whether the node of js is recorded as succeeded,
// trying again as record does.
func (c *Client) succeeded(ctx context.Context, js *jobState) (bool, error) {
	wf := rdb.NewWorkflow(c.rdb, c.prefix, js.id)
	var st string
	err := retry(ctx, func() error {
		var err error
		st, err = wf.NodeState(context.WithoutCancel(ctx), js.node)
		return err
	})
	return st == "s", err
}

// recorded records the outcome herr of the handler and returns what the
// middleware returns for it: herr, or, for a success not confirmed by
// Redis, a postponement (the job is handed back uncharged, and its next run
// finds the success if it was recorded).
func (c *Client) recorded(ctx context.Context, js *jobState, msg *streamq.Message, herr error) error {
	rerr := c.record(ctx, js, msg, herr)
	switch {
	case rerr == nil:
		return herr
	case herr == nil:
		c.log.ErrorContext(ctx, "streamq: a workflow job succeeded, but its success was not recorded; handing it back", "workflow", js.id, "node", js.node, "error", rerr)
		return streamq.Postpone(handBackAfter, fmt.Errorf("streamq: workflow %s node %s succeeded but was not recorded: %w", js.id, js.node, rerr))
	}
	c.log.ErrorContext(ctx, "streamq: cannot record a workflow job's failure; the re-drive will", "workflow", js.id, "node", js.node, "error", rerr)
	return herr
}

// maxGroup bounds the records of one complete script call.
const maxGroup = 128

// recorder groups the records of one workflow's jobs that end together:
// while a complete script call of a workflow is under way, the records of
// its other jobs wait, and the first of them then sends them all in one
// call (group commit). A job that ends alone is recorded at once. Each
// caller leads at most one call (its own record's), so no handler is
// held up by the records of jobs that end after it.
type recorder struct {
	mu   sync.Mutex
	byWF map[string]*group
}

// group is one workflow's records waiting for a call, and whether one is
// under way.
type group struct {
	busy bool
	recs []*rec
}

// rec is one record waiting to be sent: wake gets one value, once the
// record was sent (err says how it went) or when its caller is to lead
// the next call.
type rec struct {
	c    rdb.Completion
	wake chan struct{}
	lead bool
	err  error
}

// record records the outcome of a workflow job's attempt, grouped with
// those of other jobs of its workflow that end at the same time, and
// releases the children they made runnable. It returns an error only when
// the outcome was not recorded (after retries: see retry); a release that
// fails (the queue full, Redis unreachable) is logged and left to the
// re-drive, since the job need not run again.
func (c *Client) record(ctx context.Context, js *jobState, msg *streamq.Message, herr error) error {
	outcome := c.outcomeOf(msg, herr)
	if outcome == "" {
		return nil
	}
	r := &rec{c: rdb.Completion{Node: js.node, Outcome: outcome, Result: js.result, HasResult: js.has}, wake: make(chan struct{}, 1)}
	rc := &c.recs
	rc.mu.Lock()
	if rc.byWF == nil {
		rc.byWF = map[string]*group{}
	}
	g := rc.byWF[js.id]
	if g == nil {
		g = &group{}
		rc.byWF[js.id] = g
	}
	g.recs = append(g.recs, r)
	lead := !g.busy
	g.busy = true
	rc.mu.Unlock()
	if !lead {
		<-r.wake // the leader of the call under way sent it, or hands over
		if !r.lead {
			return r.err
		}
	}
	rc.mu.Lock()
	n := min(len(g.recs), maxGroup)
	batch := g.recs[:n:n]
	g.recs = g.recs[n:]
	rc.mu.Unlock()
	err := c.commit(ctx, js.id, batch)
	rc.mu.Lock()
	if len(g.recs) > 0 {
		next := g.recs[0]
		next.lead = true
		next.wake <- struct{}{}
	} else {
		g.busy = false
		delete(rc.byWF, js.id)
	}
	rc.mu.Unlock()
	for _, b := range batch {
		if b != r {
			b.err = err
			b.wake <- struct{}{}
		}
	}
	return err
}

// commit sends the records of batch, of workflow id, in one complete script
// call (tried again as retry says), then releases the children they made
// runnable. It returns an error when the records were not confirmed.
func (c *Client) commit(ctx context.Context, id string, batch []*rec) error {
	cs := make([]rdb.Completion, len(batch))
	nodes := make([]string, len(batch))
	for i, b := range batch {
		cs[i], nodes[i] = b.c, b.c.Node
	}
	wf := rdb.NewWorkflow(c.rdb, c.prefix, id)
	var (
		found    []bool
		finished bool
		run      []rdb.Runnable
	)
	err := retry(ctx, func() error {
		call := func() error {
			var err error
			found, finished, run, err = wf.Complete(context.WithoutCancel(ctx), cs)
			return err
		}
		if c.completeHook != nil {
			return c.completeHook(nodes, call)
		}
		return call()
	})
	if err != nil {
		return fmt.Errorf("record %d outcomes: %w", len(cs), err)
	}
	for i, ok := range found {
		if !ok {
			c.log.WarnContext(ctx, "streamq: a workflow job finished, but its workflow is gone (expired or never stored)", "workflow", id, "node", nodes[i])
		}
	}
	ctx = context.WithoutCancel(ctx)
	if err := c.release(ctx, id, wf, run); err != nil {
		// The outcomes are recorded: running the jobs again would not
		// help. The re-drive (or a rerun) releases the children.
		c.log.ErrorContext(ctx, "streamq: cannot enqueue the children of workflow jobs; the re-drive will", "workflow", id, "nodes", nodes, "error", err)
	}
	if finished {
		c.unregister(ctx, id)
	}
	return nil
}

// retry calls f until it succeeds, at most recordTries times, with backoff
// between calls; a cancelled ctx ends the waits (the call under way is
// not cut short: f gets a context of its own). It returns f's last error.
func retry(ctx context.Context, f func() error) error {
	wait := recordBackoff
	for try := 1; ; try++ {
		err := f()
		if err == nil || try == recordTries {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, recordMaxBackoff)
	}
}

// outcomeOf classifies the end of an attempt as the consumer will: "s"
// success, "d" a final failure, "f" a failure to retry, "" nothing to
// record (a postponement, an unknown kind, a shutdown: the job comes back
// uncharged).
func (c *Client) outcomeOf(msg *streamq.Message, err error) string {
	if err == nil {
		return "s"
	}
	var pe *streamq.PermanentError
	var po *streamq.PostponeError
	switch {
	case errors.As(err, &po), errors.Is(err, streamq.ErrUnknownKind), errors.Is(err, streamq.ErrShutdown), errors.Is(err, streamq.ErrClaimLost):
		return ""
	case errors.As(err, &pe), errors.Is(err, streamq.ErrMalformed), errors.Is(err, streamq.ErrCancelled):
		return "d"
	}
	budget := DefaultMaxAttempts
	if q := c.queues[msg.Queue]; q != nil {
		if n := core.Of(q).MessageOpts(msg).MaxAttempts; n > 0 {
			budget = n
		}
	}
	if msg.Attempt >= budget {
		return "d"
	}
	return "f"
}

// SetResult records the result of the running workflow job whose handler
// got ctx: stored with the node's success, it is what its children read
// with [ParentResults]. At most [MaxResultBytes]; a later call replaces
// it. Outside a workflow job (without the [Client.Middleware]) it returns
// an error.
func SetResult(ctx context.Context, result []byte) error {
	js, _ := ctx.Value(ctxKey{}).(*jobState)
	switch {
	case js == nil:
		return errors.New("streamq: workflow.SetResult: not in a workflow job: add Client.Middleware to the consumer")
	case len(result) > MaxResultBytes:
		return fmt.Errorf("%w: workflow result of %d bytes, more than %d: store it elsewhere and record a reference", streamq.ErrTooLarge, len(result), MaxResultBytes)
	}
	js.result, js.has = append([]byte(nil), result...), true
	return nil
}

// ParentResults returns the results of the parents of the running workflow
// job whose handler got ctx, by node name (a parent that set none, or did
// not succeed, is absent). One script call.
func ParentResults(ctx context.Context) (map[string][]byte, error) {
	js, _ := ctx.Value(ctxKey{}).(*jobState)
	if js == nil {
		return nil, errors.New("streamq: workflow.ParentResults: not in a workflow job: add Client.Middleware to the consumer")
	}
	res, err := rdb.NewWorkflow(js.c.rdb, js.c.prefix, js.id).Results(ctx, js.node)
	if err != nil {
		return nil, fmt.Errorf("streamq: workflow %s: parent results of %s: %w", js.id, js.node, err)
	}
	return res, nil
}

// Node returns the workflow ID and node name of the running workflow job
// whose handler got ctx (ok false outside one).
func Node(ctx context.Context) (id, node string, ok bool) {
	js, _ := ctx.Value(ctxKey{}).(*jobState)
	if js == nil {
		return "", "", false
	}
	return js.id, js.node, true
}

// unregister removes a finished workflow from the registry.
func (c *Client) unregister(ctx context.Context, id string) {
	if err := c.rdb.ZRem(ctx, rdb.WorkflowRegistry(c.prefix), id).Err(); err != nil {
		c.log.WarnContext(ctx, "streamq: cannot remove a finished workflow from the registry; the re-drive will", "workflow", id, "error", err)
	}
}
