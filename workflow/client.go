package workflow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Headers that mark a job of a workflow: the workflow's ID and the node's
// name. The [Client.Middleware] reads them.
const (
	HeaderWorkflow = "streamq-workflow"
	HeaderNode     = "streamq-workflow-node"
)

// Defaults of [Config].
const (
	// DefaultRetention is how long a finished or cancelled workflow stays
	// readable when Config.Retention is 0.
	DefaultRetention = 24 * time.Hour
	// DefaultMaxAttempts is the attempt budget of a workflow job that sets
	// none with [streamq.MaxAttempts]: the jobs carry it, so that the
	// middleware knows which failure is the last.
	DefaultMaxAttempts = streamq.DefaultMaxDeliveries
	// DefaultRedriveInterval is the pause between two passes of
	// [Client.Run] when Config.RedriveInterval is 0.
	DefaultRedriveInterval = 10 * time.Second
	// DefaultRedriveAfter is how long a workflow must have been quiet
	// before a re-drive pass looks at it when Config.RedriveAfter is 0.
	DefaultRedriveAfter = 30 * time.Second
	// MaxResultBytes bounds a result set with [SetResult].
	MaxResultBytes = 64 << 10
)

// ErrNotFound is returned for a workflow that does not exist (never
// enqueued, or expired after its retention).
var ErrNotFound = errors.New("streamq: workflow not found")

// ErrExists is returned by [Client.Enqueue] for a workflow whose ID is
// taken by a different workflow. Enqueueing the same workflow again is
// not an error.
var ErrExists = errors.New("streamq: workflow ID taken by a different workflow")

// Config configures a [Client]. The zero value is valid.
type Config struct {
	// Retention is how long a workflow stays readable after it finished
	// or was cancelled; then all its keys expire. Defaults to
	// DefaultRetention.
	Retention time.Duration
	// MaxNodes bounds the nodes of one workflow. Defaults to
	// DefaultMaxNodes.
	MaxNodes int
	// MaxBytes bounds the encoded jobs of one workflow. Defaults to
	// DefaultMaxBytes.
	MaxBytes int
	// Codec encodes the args of the jobs; the workers' Mux must decode
	// with the same one. Defaults to [streamq.JSONCodec].
	Codec streamq.Codec
	// RedriveInterval is the pause between two re-drive passes of
	// [Client.Run]. Defaults to DefaultRedriveInterval.
	RedriveInterval time.Duration
	// RedriveAfter is how long a workflow must have been quiet (no job of
	// it recorded) before a re-drive pass examines it. Defaults to
	// DefaultRedriveAfter.
	RedriveAfter time.Duration
	// Logger logs what the middleware and the re-drive could not do (nil:
	// slog.Default()).
	Logger *slog.Logger
}

// Client enqueues, runs, inspects and cancels the workflows of a set of
// queues that share one key prefix. It is safe for concurrent use; the
// caller owns the Redis client.
type Client struct {
	rdb    redis.UniversalClient
	prefix string
	queues map[string]*streamq.Queue
	cfg    Config
	log    *slog.Logger

	registered sync.Map // queue name -> true once recorded in the prefix's registry

	recs recorder // the records waiting to be sent, by workflow

	// completeHook, set by tests only, runs each call of the complete
	// script (for the records of nodes) in place of call.
	completeHook func(nodes []string, call func() error) error
}

// NewClient returns a client of the workflows whose jobs run on queues
// (every queue a workflow names must be among them; they must share one
// QueueConfig.KeyPrefix, which the workflows live under). cfg may be nil.
func NewClient(queues []*streamq.Queue, cfg *Config) (*Client, error) {
	c := &Client{queues: map[string]*streamq.Queue{}}
	if cfg != nil {
		c.cfg = *cfg
	}
	if len(queues) == 0 {
		return nil, &streamq.ConfigError{Field: "queues", Reason: "is empty: pass the queues the workflows' jobs run on"}
	}
	for i, q := range queues {
		if q == nil {
			return nil, &streamq.ConfigError{Field: fmt.Sprintf("queues[%d]", i), Reason: "is nil: remove it"}
		}
		cq := core.Of(q)
		if c.rdb == nil {
			c.rdb, c.prefix = cq.RDB, cq.Prefix
		} else if cq.Prefix != c.prefix {
			return nil, &streamq.ConfigError{Field: fmt.Sprintf("queues[%d]", i), Reason: fmt.Sprintf("has key prefix %q, the others %q: use one client per prefix", cq.Prefix, c.prefix)}
		}
		c.queues[q.Name()] = q
	}
	if err := c.defaults(); err != nil {
		return nil, err
	}
	return c, nil
}

// defaults applies and checks the defaults of c.cfg.
func (c *Client) defaults() error {
	durs := []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{
		{"Retention", &c.cfg.Retention, DefaultRetention},
		{"RedriveInterval", &c.cfg.RedriveInterval, DefaultRedriveInterval},
		{"RedriveAfter", &c.cfg.RedriveAfter, DefaultRedriveAfter},
	}
	for _, d := range durs {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < time.Millisecond:
			return &streamq.ConfigError{Field: "Config." + d.field, Reason: fmt.Sprintf("%s: use at least 1ms, or 0 for the default (%s)", *d.v, d.def)}
		}
	}
	switch {
	case c.cfg.MaxNodes == 0:
		c.cfg.MaxNodes = DefaultMaxNodes
	case c.cfg.MaxNodes < 0:
		return &streamq.ConfigError{Field: "Config.MaxNodes", Reason: fmt.Sprintf("%d is negative: use a positive bound, or 0 for %d", c.cfg.MaxNodes, DefaultMaxNodes)}
	}
	switch {
	case c.cfg.MaxBytes == 0:
		c.cfg.MaxBytes = DefaultMaxBytes
	case c.cfg.MaxBytes < 0:
		return &streamq.ConfigError{Field: "Config.MaxBytes", Reason: fmt.Sprintf("%d is negative: use a positive bound, or 0 for %d", c.cfg.MaxBytes, DefaultMaxBytes)}
	}
	if c.cfg.Codec == nil {
		c.cfg.Codec = streamq.JSONCodec{}
	}
	c.log = c.cfg.Logger
	if c.log == nil {
		c.log = slog.Default()
	}
	return nil
}

// Enqueue stores workflow w in Redis, all or nothing (one script on the
// workflow's slot), then enqueues its nodes without parents into their
// queues. A workflow whose building went wrong, that has a cycle or an
// unknown parent, or that is larger than Config.MaxNodes or MaxBytes, is
// refused with an error that says what is wrong, and nothing is written.
//
// Enqueueing the same workflow again (after an error, say) stores nothing
// twice and releases what the first call may not have: each job is
// enqueued once. A different workflow under the same ID is refused with
// [ErrExists].
func (c *Client) Enqueue(ctx context.Context, w *Workflow) error {
	nodes, batches, sum, err := c.build(w)
	if err != nil {
		return err
	}
	wf := rdb.NewWorkflow(c.rdb, c.prefix, w.id)
	// Registered first, removed last: the re-drive finds every workflow
	// that may need it.
	if err := c.rdb.ZAddNX(ctx, rdb.WorkflowRegistry(c.prefix), redis.Z{Score: float64(time.Now().UnixMilli()), Member: w.id}).Err(); err != nil {
		return fmt.Errorf("streamq: workflow %s: register: %w", w.id, err)
	}
	run, err := wf.Create(ctx, c.cfg.Retention, sum, nodes, batches)
	if errors.Is(err, rdb.ErrWorkflowExists) {
		return fmt.Errorf("%w: %s", ErrExists, w.id)
	}
	if err != nil {
		return fmt.Errorf("streamq: workflow %s: create: %w", w.id, err)
	}
	return c.release(ctx, w.id, wf, run)
}

// build checks w and encodes it for the create script.
func (c *Client) build(w *Workflow) (nodes []rdb.WorkflowNode, batches [][2]string, sum string, err error) {
	if w == nil {
		return nil, nil, "", &streamq.ConfigError{Field: "workflow", Reason: "is nil: build one with workflow.New"}
	}
	if w.err != nil {
		return nil, nil, "", w.err
	}
	if len(w.nodes) == 0 {
		return nil, nil, "", fmt.Errorf("workflow %s: has no nodes: Add at least one", w.id)
	}
	if len(w.nodes) > c.cfg.MaxNodes {
		return nil, nil, "", fmt.Errorf("workflow %s: has %d nodes, more than Config.MaxNodes (%d): split it, or raise the bound", w.id, len(w.nodes), c.cfg.MaxNodes)
	}
	order, err := w.link()
	if err != nil {
		return nil, nil, "", err
	}
	h := sha256.New()
	size := 0
	var line []byte
	for _, n := range order {
		sp, err := c.spec(w.id, n)
		if err != nil {
			return nil, nil, "", err
		}
		rn := rdb.WorkflowNode{Name: n.name, Spec: string(sp), Need: len(n.parents)}
		if len(n.kids) > 0 {
			rn.Kids = jsonEdges(n.kids)
		}
		if len(n.parents) > 0 {
			rn.Parents = jsonNames(n.parents)
		}
		size += len(rn.Spec) + len(rn.Kids) + len(rn.Parents)
		if size > c.cfg.MaxBytes {
			return nil, nil, "", fmt.Errorf("workflow %s: its jobs take more than Config.MaxBytes (%d bytes) at node %q: store large payloads elsewhere, split the workflow, or raise the bound", w.id, c.cfg.MaxBytes, n.name)
		}
		// "<len>:<name>|<len>:<spec>|<kids>|<parents>\n"
		line = strconv.AppendInt(line[:0], int64(len(rn.Name)), 10)
		line = append(append(append(line, ':'), rn.Name...), '|')
		line = strconv.AppendInt(line, int64(len(rn.Spec)), 10)
		line = append(append(append(line, ':'), rn.Spec...), '|')
		line = append(append(append(append(line, rn.Kids...), '|'), rn.Parents...), '\n')
		h.Write(line)
		nodes = append(nodes, rn)
	}
	for _, b := range w.batches {
		js, _ := json.Marshal(b)
		batches = append(batches, [2]string{b.Name, string(js)})
		fmt.Fprintf(h, "batch %s\n", js)
	}
	return nodes, batches, hex.EncodeToString(h.Sum(nil)), nil
}

// spec encodes the job of n.
func (c *Client) spec(id string, n *node) ([]byte, error) {
	q := c.queues[n.queue.Name()]
	if q == nil {
		return nil, fmt.Errorf("workflow %s: node %q runs on queue %q, which this client was not given: pass it to workflow.NewClient", id, n.name, n.queue.Name())
	}
	if q != n.queue {
		return nil, fmt.Errorf("workflow %s: node %q runs on another *streamq.Queue named %q than this client's: pass the client's", id, n.name, n.queue.Name())
	}
	var o streamq.EnqueueOptions
	if wo, ok := n.args.(streamq.JobArgsWithOptions); ok {
		if err := apply(&o, wo.InsertOpts()); err != nil {
			return nil, fmt.Errorf("workflow %s: node %q: InsertOpts of %T: %w", id, n.name, n.args, err)
		}
	}
	if err := apply(&o, n.opts); err != nil {
		return nil, fmt.Errorf("workflow %s: node %q: %w", id, n.name, err)
	}
	if err := refused(&o); err != "" {
		return nil, fmt.Errorf("workflow %s: node %q: %s cannot be used in a workflow, which enqueues the job when its parents allow: drop it", id, n.name, err)
	}
	kind := n.args.Kind()
	if o.Kind != "" && o.Kind != kind {
		return nil, fmt.Errorf("workflow %s: node %q: WithKind sets kind %q on args of kind %q: drop the option", id, n.name, o.Kind, kind)
	}
	payload, err := c.cfg.Codec.Marshal(n.args)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: node %q: encode args %T: %w", id, n.name, n.args, err)
	}
	headers := make(map[string]string, len(o.Headers)+2)
	for k, v := range o.Headers {
		headers[k] = v
	}
	headers[HeaderWorkflow], headers[HeaderNode] = id, n.name
	if err := core.Of(q).CheckJob(payload, headers); err != nil {
		return nil, fmt.Errorf("workflow %s: node %q: %w", id, n.name, err)
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	j := wire.Job{Payload: payload, Headers: headers, Opts: wire.Opts{
		Kind: kind, MaxAttempts: o.MaxAttempts, Timeout: millis(o.Timeout), Retention: millis(o.ResultRetention), Tags: o.Tags,
	}}
	sp, err := wire.NewSpec(q.Name(), &j)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: node %q: %w", id, n.name, err)
	}
	return sp.Append(nil), nil
}

// apply applies opts to o.
func apply(o *streamq.EnqueueOptions, opts []streamq.EnqueueOption) error {
	for i, opt := range opts {
		if opt == nil {
			return fmt.Errorf("option %d is nil: remove it", i)
		}
		if err := opt(o); err != nil {
			return err
		}
	}
	return nil
}

// refused names an option of o that a workflow job cannot have, or "".
func refused(o *streamq.EnqueueOptions) string {
	switch {
	case !o.At.IsZero() || o.In != 0:
		return "ProcessAt/ProcessIn"
	case o.UniqueKey != "":
		return "Unique"
	case !o.Deadline.IsZero():
		return "Deadline"
	case o.JobID != "":
		return "a job ID"
	case o.FlowKey != "":
		return "FlowKey"
	case o.Priority != nil:
		return "a priority"
	}
	return ""
}

func millis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// jsonEdges returns es as JSON, [[node, policy], ...], as json.Marshal
// writes it.
func jsonEdges(es []edge) string {
	b := make([]byte, 0, 16*len(es))
	b = append(b, '[')
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(wire.AppendJSONString(append(b, '['), e.node), ',')
		b = append(wire.AppendJSONString(b, e.policy.code()), ']')
	}
	return string(append(b, ']'))
}

// jsonNames returns the nodes of es as a JSON array, as json.Marshal
// writes it.
func jsonNames(es []edge) string {
	b := make([]byte, 0, 12*len(es))
	b = append(b, '[')
	for i, e := range es {
		if i > 0 {
			b = append(b, ',')
		}
		b = wire.AppendJSONString(b, e.node)
	}
	return string(append(b, ']'))
}

// release enqueues the jobs of runnable nodes into their queues, each under
// the workflow's mark of its node in the queue (so a release repeated
// after a crash stores nothing twice), then marks the nodes released; jobs
// of nodes cancelled in between are cancelled. One script call per queue
// and 1,000 jobs, and one to mark them.
func (c *Client) release(ctx context.Context, id string, wf *rdb.Workflow, run []rdb.Runnable) error {
	if len(run) == 0 {
		return nil
	}
	byQueue := map[string]*rdb.WorkflowReleaseParams{}
	var order []string
	pairs := make([]string, 0, 2*len(run))
	flush := func(qname string) error {
		p := byQueue[qname]
		if p == nil || p.Len() == 0 {
			return nil
		}
		if err := core.Of(c.queues[qname]).DB.WorkflowRelease(ctx, p); err != nil {
			return fmt.Errorf("streamq: workflow %s: release into %s: %w", id, qname, err)
		}
		c.register(ctx, qname)
		for i, jid := range p.IDs {
			pairs = append(pairs, p.Nodes()[i], qname+"\t"+jid)
		}
		byQueue[qname] = nil
		return nil
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, r := range run {
		s, err := wire.ParseSpec(r.Spec)
		if err != nil {
			return fmt.Errorf("streamq: workflow %s: node %q has a malformed job: %w", id, r.Name, err)
		}
		s.Fields[s.Enq] = now
		q := c.queues[s.Queue]
		if q == nil {
			return fmt.Errorf("streamq: workflow %s: node %q runs on queue %q, which this client was not given: pass it to workflow.NewClient", id, r.Name, s.Queue)
		}
		p := byQueue[s.Queue]
		if p == nil {
			p = &rdb.WorkflowReleaseParams{Workflow: id, MarkTTL: c.cfg.Retention + 24*time.Hour}
			byQueue[s.Queue] = p
			order = append(order, s.Queue)
		}
		p.Add(r.Name, s.Fields)
		if p.Len() == streamq.MaxBatchChunk {
			if err := flush(s.Queue); err != nil {
				return err
			}
		}
	}
	for _, qname := range order {
		if err := flush(qname); err != nil {
			return err
		}
	}
	cancel, err := wf.Released(ctx, pairs)
	if err != nil {
		return fmt.Errorf("streamq: workflow %s: mark released: %w", id, err)
	}
	c.cancelJobs(ctx, cancel)
	return nil
}

// register records queue qname in the registry of the prefix once, as a
// producer does, so that inspect, the CLI and the dashboard see a queue
// that only workflows feed. A failure is retried on the next release.
func (c *Client) register(ctx context.Context, qname string) {
	if _, ok := c.registered.Load(qname); ok {
		return
	}
	if core.Of(c.queues[qname]).DB.Register(ctx, rdb.KindStream) == nil {
		c.registered.Store(qname, true)
	}
}
