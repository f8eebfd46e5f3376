package workflow

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/streamq/streamq"
)

// Policy says what the failure of a parent (its job dead-lettered or
// cancelled) does to a child that depends on it.
type Policy int

// Policies of a dependency.
const (
	// CancelDependents cancels the child (and, by their policies, its own
	// dependents) when the parent fails. The default.
	CancelDependents Policy = iota
	// RunAnyway counts the parent as finished whatever its outcome: the
	// child runs once all its parents finished, and sees no result of a
	// failed one.
	RunAnyway
	// Ignore lets the child run whatever the parent's outcome, as if the
	// parent had succeeded. It behaves exactly as RunAnyway: the child
	// waits until the parent ended (its outcome is not known before), runs
	// then, and reads no result of a failed parent ([ParentResults]
	// leaves it out, as it leaves out a parent that set none); the
	// parent's failure cancels nothing and is counted where it happened
	// (its node is dead, its batch counts it). Only the name differs, to
	// say that the child does not care about that parent's outcome.
	Ignore
)

// String returns the policy's name.
func (p Policy) String() string {
	switch p {
	case CancelDependents:
		return "cancel_dependents"
	case RunAnyway:
		return "run_anyway"
	case Ignore:
		return "ignore"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// code is the policy as the scripts store it: "c" cancels, anything else
// runs the child.
func (p Policy) code() string {
	switch p {
	case RunAnyway:
		return "r"
	case Ignore:
		return "i"
	}
	return "c"
}

// Limits of a workflow.
const (
	// MaxIDLen is the longest workflow ID, in bytes.
	MaxIDLen = 200
	// MaxNodeNameLen is the longest node name, in bytes.
	MaxNodeNameLen = 255
	// DefaultMaxNodes is the most nodes a workflow may have when
	// Config.MaxNodes is 0.
	DefaultMaxNodes = 20_000
	// DefaultMaxBytes bounds the encoded jobs of one workflow when
	// Config.MaxBytes is 0: the workflow is stored by one script call.
	DefaultMaxBytes = 32 << 20
)

// Workflow is a set of jobs (nodes) with dependencies between them, built
// with [New], [Workflow.Add], [Workflow.Chain] and [Workflow.Batch], and
// enqueued all at once with [Client.Enqueue]. Mistakes (an unknown
// parent, a cycle, a duplicate name, args that do not encode) are kept and
// returned by [Workflow.Err] and by Client.Enqueue, which then writes
// nothing. A Workflow is not safe for concurrent use.
type Workflow struct {
	id      string
	nodes   []*node
	byName  map[string]*node
	batches []*batch
	err     error
}

type node struct {
	name    string
	queue   *streamq.Queue
	args    streamq.JobArgs
	opts    []streamq.EnqueueOption
	parents []edge
	kids    []edge
}

type edge struct {
	node   string
	policy Policy
}

type batch struct {
	Name       string   `json:"name"`
	Members    []string `json:"members"`
	OnSuccess  string   `json:"on_success,omitempty"`
	OnComplete string   `json:"on_complete,omitempty"`
}

// New returns an empty workflow with ID id: 1 to [MaxIDLen] bytes of UTF-8
// without spaces, control characters or braces. The ID names the
// workflow in Redis and in every tool; enqueueing the same workflow again
// under its ID stores nothing twice.
func New(id string) *Workflow {
	w := &Workflow{id: id, byName: map[string]*node{}}
	w.err = checkName("workflow ID", id, MaxIDLen, `"order-42"`)
	if w.err == nil {
		for _, r := range id {
			if r == '{' || r == '}' {
				w.err = fmt.Errorf("workflow: the workflow ID %q contains a brace, which would break the Redis Cluster hash tag: use another character", id)
				break
			}
		}
	}
	return w
}

// ID returns the workflow's ID.
func (w *Workflow) ID() string { return w.id }

// Err returns the first mistake made while building w, or nil.
func (w *Workflow) Err() error { return w.err }

// NodeOption configures a node added by [Workflow.Add].
type NodeOption func(*node) error

// After makes the node depend on parents, with the [CancelDependents]
// policy: it runs only after every parent succeeded.
func After(parents ...string) NodeOption { return AfterPolicy(CancelDependents, parents...) }

// AfterPolicy makes the node depend on parents with policy p.
func AfterPolicy(p Policy, parents ...string) NodeOption {
	return func(n *node) error {
		if p < CancelDependents || p > Ignore {
			return fmt.Errorf("workflow: node %q: unknown policy %d: use CancelDependents, RunAnyway or Ignore", n.name, int(p))
		}
		for _, par := range parents {
			n.parents = append(n.parents, edge{node: par, policy: p})
		}
		return nil
	}
}

// With sets enqueue options of the node's job. Allowed: [streamq.WithHeaders],
// [streamq.WithHeader], [streamq.MaxAttempts], [streamq.Timeout],
// [streamq.ResultRetention], [streamq.Tags]; the others (delays, unique
// keys, deadlines, flow keys, priorities, job IDs) are refused by
// Client.Enqueue, since the workflow decides when a job is enqueued.
func With(opts ...streamq.EnqueueOption) NodeOption {
	return func(n *node) error {
		n.opts = append(n.opts, opts...)
		return nil
	}
}

// Add adds a node named name: a job with args on queue q, enqueued when its
// parents allow (at once for a node without parents). Names are 1 to
// [MaxNodeNameLen] bytes of UTF-8 without control characters, unique in
// the workflow. Parents may be added after their children; they must exist
// when the workflow is enqueued. Add returns w for chaining.
func (w *Workflow) Add(name string, q *streamq.Queue, args streamq.JobArgs, opts ...NodeOption) *Workflow {
	if w.err != nil {
		return w
	}
	n := &node{name: name, queue: q, args: args}
	switch {
	case w.setErr(checkName("node name", name, MaxNodeNameLen, `"resize-1"`)):
		return w
	case w.byName[name] != nil:
		w.err = fmt.Errorf("workflow %s: node %q is added twice: give each node its own name", w.id, name)
		return w
	case q == nil:
		w.err = fmt.Errorf("workflow %s: node %q has a nil queue: pass a *streamq.Queue", w.id, name)
		return w
	case args == nil:
		w.err = fmt.Errorf("workflow %s: node %q has nil args: pass a value of a streamq.JobArgs type", w.id, name)
		return w
	}
	for i, o := range opts {
		if o == nil {
			w.err = fmt.Errorf("workflow %s: node %q: option %d is nil: remove it", w.id, name, i)
			return w
		}
		if w.setErr(o(n)) {
			return w
		}
	}
	w.nodes = append(w.nodes, n)
	w.byName[name] = n
	return w
}

// Chain makes each named node depend on the one before it (A, then B, then
// C) with the [CancelDependents] policy. The nodes must have been added.
func (w *Workflow) Chain(names ...string) *Workflow {
	for i := 1; i < len(names) && w.err == nil; i++ {
		w.depend(names[i], names[i-1], CancelDependents)
	}
	return w
}

// Batch groups members under name, with two optional callback nodes (""
// for none, else a node added to w): onSuccess runs once when every member
// succeeded (it is cancelled when one fails), onComplete once when every
// member finished, whatever the outcome, dead letters included. A batch's
// progress is read with [Client.Batch].
func (w *Workflow) Batch(name string, members []string, onSuccess, onComplete string) *Workflow {
	if w.err != nil || w.setErr(checkName("batch name", name, MaxNodeNameLen, `"thumbnails"`)) {
		return w
	}
	for _, b := range w.batches {
		if b.Name == name {
			w.err = fmt.Errorf("workflow %s: batch %q is declared twice", w.id, name)
			return w
		}
	}
	if len(members) == 0 {
		w.err = fmt.Errorf("workflow %s: batch %q has no members: list the nodes it groups", w.id, name)
		return w
	}
	for _, m := range members {
		if w.byName[m] == nil {
			w.err = fmt.Errorf("workflow %s: batch %q: member %q is not a node: Add it first", w.id, name, m)
			return w
		}
		if onSuccess != "" {
			w.depend(onSuccess, m, CancelDependents)
		}
		if onComplete != "" {
			w.depend(onComplete, m, RunAnyway)
		}
	}
	if w.err == nil {
		w.batches = append(w.batches, &batch{Name: name, Members: append([]string(nil), members...), OnSuccess: onSuccess, OnComplete: onComplete})
	}
	return w
}

// depend adds the edge parent -> child with policy p.
func (w *Workflow) depend(child, parent string, p Policy) {
	c := w.byName[child]
	if c == nil {
		w.err = fmt.Errorf("workflow %s: node %q is not added: Add it before naming it in Chain or Batch", w.id, child)
		return
	}
	if w.byName[parent] == nil {
		w.err = fmt.Errorf("workflow %s: node %q is not added: Add it before naming it in Chain or Batch", w.id, parent)
		return
	}
	c.parents = append(c.parents, edge{node: parent, policy: p})
}

// setErr keeps err as w's error and reports whether it was one.
func (w *Workflow) setErr(err error) bool {
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("workflow %s: %w", w.id, err)
	}
	return err != nil
}

// link checks the graph (every parent exists, no edge twice, no cycle) and
// fills each node's children. It returns the nodes in an order where every
// parent comes before its children.
func (w *Workflow) link() ([]*node, error) {
	for _, n := range w.nodes {
		n.kids = nil
	}
	for _, n := range w.nodes {
		seen := map[string]bool{}
		for _, e := range n.parents {
			p := w.byName[e.node]
			switch {
			case p == nil:
				return nil, fmt.Errorf("workflow %s: node %q depends on %q, which is not a node of the workflow: Add it or fix the name", w.id, n.name, e.node)
			case p == n:
				return nil, fmt.Errorf("workflow %s: node %q depends on itself", w.id, n.name)
			case seen[e.node]:
				return nil, fmt.Errorf("workflow %s: node %q depends on %q twice: declare each dependency once", w.id, n.name, e.node)
			}
			seen[e.node] = true
			p.kids = append(p.kids, edge{node: n.name, policy: e.policy})
		}
	}
	// Kahn's algorithm: what is left after it is on a cycle.
	need := make(map[string]int, len(w.nodes))
	var order, ready []*node
	for _, n := range w.nodes {
		need[n.name] = len(n.parents)
		if len(n.parents) == 0 {
			ready = append(ready, n)
		}
	}
	for len(ready) > 0 {
		n := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		order = append(order, n)
		for _, k := range n.kids {
			if need[k.node]--; need[k.node] == 0 {
				ready = append(ready, w.byName[k.node])
			}
		}
	}
	if len(order) < len(w.nodes) {
		var on []string
		for _, n := range w.nodes {
			if need[n.name] > 0 {
				on = append(on, n.name)
			}
		}
		return nil, fmt.Errorf("workflow %s: the dependencies form a cycle through %q: a node cannot wait for itself", w.id, on)
	}
	return order, nil
}

// checkName checks an ID or a name: 1 to maxLen bytes of UTF-8 without
// spaces or control characters.
func checkName(what, s string, maxLen int, example string) error {
	switch {
	case s == "":
		return fmt.Errorf("the %s is empty: use a name such as %s", what, example)
	case len(s) > maxLen:
		return fmt.Errorf("the %s is %d bytes long: use at most %d", what, len(s), maxLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("the %s %q is not valid UTF-8", what, s)
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("the %s %q contains a space or control character: use a name such as %s", what, s, example)
		}
	}
	return nil
}
