package rdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Workflows (package workflow): the state of one workflow lives under its
// own hash tag, "<prefix>:{wf:<id>}:", so that every change of it is one
// script in one slot, whichever queues its jobs live on. Jobs are released
// into their queues by the Outbox script under a mark per node (one slot:
// the queue's), so a release repeated after a crash stores nothing twice.
//
// Node states (the State hash): "w" waiting for parents, "r" runnable (its
// parents allow it; not yet in its queue), "q" released into its queue, "f"
// released and retrying after a failed attempt; terminal: "s" succeeded,
// "d" dead (failed for good: dead-lettered), "c" cancelled.

// WorkflowKeys are the keys of one workflow.
type WorkflowKeys struct {
	Meta    string // HASH state (running|finished|cancelled), sum, created, touched, finished, retention (ms), nodes, open
	Spec    string // HASH node -> the job to release (JSON, package workflow)
	State   string // HASH node -> state (see above)
	Need    string // HASH node -> parents still to finish
	Kids    string // HASH node -> JSON [[child, policy], ...]
	Parents string // HASH node -> JSON [parent, ...]
	Jobs    string // HASH node -> "<queue>\t<job ID>" once released
	Result  string // HASH node -> result of a succeeded node
	Batches string // HASH batch -> JSON (package workflow)
}

// WorkflowRegistry returns the key of the registry of the unfinished
// workflows of prefix: a sorted set of workflow IDs scored by creation
// time (Unix ms). It has no hash tag: single commands write it, never a
// script with a workflow's keys.
func WorkflowRegistry(prefix string) string { return prefix + ":workflows" }

// NewWorkflowKeys returns the keys of workflow id under prefix.
func NewWorkflowKeys(prefix, id string) WorkflowKeys {
	b := prefix + ":{wf:" + id + "}:"
	return WorkflowKeys{
		Meta: b + "meta", Spec: b + "spec", State: b + "state", Need: b + "need", Kids: b + "kids",
		Parents: b + "parents", Jobs: b + "jobs", Result: b + "result", Batches: b + "batches",
	}
}

func (k WorkflowKeys) list() []string {
	return []string{k.Meta, k.Spec, k.State, k.Need, k.Kids, k.Parents, k.Jobs, k.Result, k.Batches}
}

// WorkflowMark returns the outbox row that the release of node of workflow
// id writes its mark under in the node's queue (see Keys.OutboxMark).
func WorkflowMark(id, node string) string { return "wf:" + id + ":" + node }

// workflowLib holds the helpers of the workflow scripts. KEYS are those of
// WorkflowKeys, in its field order.
const workflowLib = timeLib + `
local K_META, K_SPEC, K_STATE, K_NEED, K_KIDS, K_PAR, K_JOBS, K_RES, K_BATCH =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]

local function terminal(s) return s == 's' or s == 'd' or s == 'c' end

-- push_runnable appends node and its spec to out.
local function push_runnable(out, node)
  table.insert(out, node)
  table.insert(out, redis.call('HGET', K_SPEC, node) or '')
end

-- settle ends node with outcome ('s', 'd' or 'c') and applies it to its
-- children by the policy of each edge: 'c' cancels a waiting child when the
-- parent did not succeed (and so on down), any other policy counts the
-- parent as finished. Children whose last parent finished become runnable
-- and are appended to out. Returns how many nodes it ended. Its work is
-- bounded by the size of the workflow, which the builder bounds.
local function settle(node, outcome, out)
  local stack, closed = {{node, outcome}}, 0
  while #stack > 0 do
    local top = table.remove(stack)
    local n, o = top[1], top[2]
    local st = redis.call('HGET', K_STATE, n)
    if st and not terminal(st) then
      redis.call('HSET', K_STATE, n, o)
      closed = closed + 1
      local kids = redis.call('HGET', K_KIDS, n)
      if kids then
        for _, e in ipairs(cjson.decode(kids)) do
          local c, pol = e[1], e[2]
          if redis.call('HGET', K_STATE, c) == 'w' then
            if o ~= 's' and pol == 'c' then
              table.insert(stack, {c, 'c'})
            elseif redis.call('HINCRBY', K_NEED, c, -1) <= 0 then
              redis.call('HSET', K_STATE, c, 'r')
              push_runnable(out, c)
            end
          end
        end
      end
    end
  end
  return closed
end

-- expire_all gives every key of the workflow the retention of its meta.
local function expire_all()
  local ttl = redis.call('HGET', K_META, 'retention')
  for i = 1, 9 do redis.call('PEXPIRE', KEYS[i], ttl) end
end

-- close counts closed nodes as ended; when none is open any more, the
-- workflow is finished and expires after its retention. Returns 1 then.
local function close(closed, now)
  local open = redis.call('HINCRBY', K_META, 'open', -closed)
  redis.call('HSET', K_META, 'touched', now)
  if open <= 0 and redis.call('HGET', K_META, 'state') == 'running' then
    redis.call('HSET', K_META, 'state', 'finished', 'finished', now)
    expire_all()
    return 1
  end
  return 0
end
`

// scriptWorkflowCreate stores a workflow: every node with its job, parents
// count, children and parents, and its batches; nodes without parents are
// runnable. A re-sent create (same ID and fingerprint) stores nothing and
// returns the nodes still runnable, so that the caller releases them
// (idempotently); another workflow under the ID is refused.
//
// KEYS: WorkflowKeys
// ARGV[1] retention (ms) once finished, ARGV[2] fingerprint, ARGV[3] node
// count n; per node 5 arguments: name, spec, parent count, children JSON
// ("" none), parents JSON ("" none); then the batch count and per batch
// its name and JSON.
// Returns {name_1, spec_1, ...} of the runnable nodes, or an error reply
// starting with "WFEXISTS".
var scriptWorkflowCreate = redis.NewScript(workflowLib + `
local out = {}
if redis.call('EXISTS', K_META) == 1 then
  if redis.call('HGET', K_META, 'sum') ~= ARGV[2] then
    return redis.error_reply('WFEXISTS another workflow has this ID')
  end
  local st = redis.call('HGETALL', K_STATE)
  for i = 1, #st, 2 do
    if st[i + 1] == 'r' then push_runnable(out, st[i]) end
  end
  return out
end
local now, n = now_ms(), tonumber(ARGV[3])
redis.call('HSET', K_META, 'state', 'running', 'sum', ARGV[2], 'created', now, 'touched', now,
  'retention', ARGV[1], 'nodes', n, 'open', n)
local i = 4
for j = 1, n do
  local name, spec, need, kids, par = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4]
  redis.call('HSET', K_SPEC, name, spec)
  if need == 0 then
    redis.call('HSET', K_STATE, name, 'r')
    table.insert(out, name)
    table.insert(out, spec)
  else
    redis.call('HSET', K_STATE, name, 'w')
    redis.call('HSET', K_NEED, name, need)
  end
  if kids ~= '' then redis.call('HSET', K_KIDS, name, kids) end
  if par ~= '' then redis.call('HSET', K_PAR, name, par) end
  i = i + 5
end
local nb = tonumber(ARGV[i])
for j = 1, nb do
  redis.call('HSET', K_BATCH, ARGV[i + 2 * j - 1], ARGV[i + 2 * j])
end
return out
`)

// scriptWorkflowComplete records the outcome of a node's job: 'f' a failed
// attempt that will be retried, 's' success (with its result), 'd' a final
// failure, 'c' cancelled. A terminal outcome is applied to the children
// (see settle); recording it again changes nothing and returns the
// children still runnable (not yet released), so that a worker that
// crashed before releasing them, or the re-drive, releases them.
//
// KEYS: WorkflowKeys
// ARGV[1] node, ARGV[2] outcome, ARGV[3] result, ARGV[4] "1" when ARGV[3]
// is a result to store.
// Returns {-1} when the workflow or node is unknown (expired, never
// created), else {finished (1 when this call finished the workflow),
// name_1, spec_1, ...} of the runnable children.
var scriptWorkflowComplete = redis.NewScript(workflowLib + `
local node, outcome = ARGV[1], ARGV[2]
local st = redis.call('HGET', K_STATE, node)
if not st then return {-1} end
local now = now_ms()
if outcome == 'f' then
  if st == 'q' or st == 'r' then
    redis.call('HSET', K_STATE, node, 'f')
    redis.call('HSET', K_META, 'touched', now)
  end
  return {0}
end
local out = {0}
if not terminal(st) then
  if outcome == 's' and ARGV[4] == '1' then redis.call('HSET', K_RES, node, ARGV[3]) end
  out[1] = close(settle(node, outcome, out), now)
  return out
end
local kids = redis.call('HGET', K_KIDS, node)
if kids then
  for _, e in ipairs(cjson.decode(kids)) do
    if redis.call('HGET', K_STATE, e[1]) == 'r' then push_runnable(out, e[1]) end
  end
end
return out
`)

// scriptWorkflowReleased marks runnable nodes as released into their
// queues, and records their jobs (also of a node whose job already ran and
// was recorded: a fast worker can finish it before this call). A node
// cancelled in between keeps its state, and its job is returned to be
// cancelled.
//
// KEYS: WorkflowKeys
// ARGV: pairs of node and job reference ("<queue>\t<job ID>").
// Returns the references of the jobs of cancelled nodes.
var scriptWorkflowReleased = redis.NewScript(workflowLib + `
local out = {}
for i = 1, #ARGV, 2 do
  local st = redis.call('HGET', K_STATE, ARGV[i])
  if st then redis.call('HSETNX', K_JOBS, ARGV[i], ARGV[i + 1]) end
  if st == 'r' then
    redis.call('HSET', K_STATE, ARGV[i], 'q')
  elseif st == 'c' then
    table.insert(out, ARGV[i + 1])
  end
end
if redis.call('EXISTS', K_META) == 1 then redis.call('HSET', K_META, 'touched', now_ms()) end
return out
`)

// scriptWorkflowCancel cancels a running workflow: every node not ended is
// cancelled, and the workflow expires after its retention.
//
// KEYS: WorkflowKeys
// Returns {-1} for an unknown workflow, {0} for one that had ended, else
// {1, ref_1, ...}: the references of the released jobs that were not
// finished (for the caller to cancel in their queues).
var scriptWorkflowCancel = redis.NewScript(workflowLib + `
if redis.call('EXISTS', K_META) == 0 then return {-1} end
if redis.call('HGET', K_META, 'state') ~= 'running' then return {0} end
local out = {1}
local st = redis.call('HGETALL', K_STATE)
for i = 1, #st, 2 do
  local s = st[i + 1]
  if not terminal(s) then
    if s == 'q' or s == 'f' then
      local ref = redis.call('HGET', K_JOBS, st[i])
      if ref then table.insert(out, ref) end
    end
    redis.call('HSET', K_STATE, st[i], 'c')
  end
end
local now = now_ms()
redis.call('HSET', K_META, 'state', 'cancelled', 'open', 0, 'touched', now, 'finished', now)
expire_all()
return out
`)

// scriptWorkflowResults returns the results of a node's parents.
//
// KEYS: WorkflowKeys
// ARGV[1] node.
// Returns {parent_1, result_1 or false, ...}.
var scriptWorkflowResults = redis.NewScript(workflowLib + `
local par = redis.call('HGET', K_PAR, ARGV[1])
if not par then return {} end
local names = cjson.decode(par)
if #names == 0 then return {} end
local res = redis.call('HMGET', K_RES, unpack(names))
local out = {}
for i, n in ipairs(names) do
  table.insert(out, n)
  table.insert(out, res[i])
end
return out
`)

// WorkflowNode is one node of a workflow to create.
type WorkflowNode struct {
	Name, Spec    string
	Need          int
	Kids, Parents string // JSON, "" for none
}

// Runnable is a node whose job may be released into its queue.
type Runnable struct{ Name, Spec string }

// Workflow makes the Redis calls of one workflow.
type Workflow struct {
	client redis.UniversalClient
	keys   WorkflowKeys
}

// NewWorkflow returns the calls of workflow id under prefix.
func NewWorkflow(client redis.UniversalClient, prefix, id string) *Workflow {
	return &Workflow{client: client, keys: NewWorkflowKeys(prefix, id)}
}

// Keys returns the workflow's keys.
func (w *Workflow) Keys() WorkflowKeys { return w.keys }

// ErrWorkflowExists is the refusal to create a workflow under the ID of
// another one.
var ErrWorkflowExists = fmt.Errorf("streamq: another workflow has this ID")

// Create runs scriptWorkflowCreate.
func (w *Workflow) Create(ctx context.Context, retention time.Duration, sum string, nodes []WorkflowNode, batches [][2]string) ([]Runnable, error) {
	args := make([]any, 0, 4+5*len(nodes)+2*len(batches))
	args = append(args, retention.Milliseconds(), sum, len(nodes))
	for _, n := range nodes {
		args = append(args, n.Name, n.Spec, n.Need, n.Kids, n.Parents)
	}
	args = append(args, len(batches))
	for _, b := range batches {
		args = append(args, b[0], b[1])
	}
	res, err := scriptWorkflowCreate.Run(ctx, w.client, w.keys.list(), args...).Slice()
	if err != nil {
		if redis.HasErrorPrefix(err, "WFEXISTS") {
			return nil, ErrWorkflowExists
		}
		return nil, err
	}
	return runnables(res), nil
}

// Complete runs scriptWorkflowComplete. found is false when the workflow
// or node is unknown.
func (w *Workflow) Complete(ctx context.Context, node, outcome string, result []byte, hasResult bool) (found, finished bool, run []Runnable, err error) {
	flag := "0"
	if hasResult {
		flag = "1"
	}
	res, err := scriptWorkflowComplete.Run(ctx, w.client, w.keys.list(), node, outcome, result, flag).Slice()
	if err != nil {
		return false, false, nil, err
	}
	if len(res) == 0 {
		return false, false, nil, fmt.Errorf("workflow complete: empty reply")
	}
	f, _ := res[0].(int64)
	if f < 0 {
		return false, false, nil, nil
	}
	return true, f == 1, runnables(res[1:]), nil
}

// NodeState returns the state of node ("" for an unknown workflow or
// node).
func (w *Workflow) NodeState(ctx context.Context, node string) (string, error) {
	st, err := w.client.HGet(ctx, w.keys.State, node).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return st, err
}

// Released runs scriptWorkflowReleased for pairs node, job reference and
// returns the references of jobs to cancel.
func (w *Workflow) Released(ctx context.Context, pairs []string) ([]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	args := make([]any, len(pairs))
	for i, p := range pairs {
		args[i] = p
	}
	return scriptWorkflowReleased.Run(ctx, w.client, w.keys.list(), args...).StringSlice()
}

// Cancel runs scriptWorkflowCancel: state -1 unknown, 0 already ended, 1
// cancelled now; refs are the released jobs to cancel.
func (w *Workflow) Cancel(ctx context.Context) (state int, refs []string, err error) {
	res, err := scriptWorkflowCancel.Run(ctx, w.client, w.keys.list()).Slice()
	if err != nil {
		return 0, nil, err
	}
	s, _ := res[0].(int64)
	for _, v := range res[1:] {
		if r, ok := v.(string); ok {
			refs = append(refs, r)
		}
	}
	return int(s), refs, nil
}

// Results runs scriptWorkflowResults: the results of node's parents (a
// parent without a result is absent).
func (w *Workflow) Results(ctx context.Context, node string) (map[string][]byte, error) {
	res, err := scriptWorkflowResults.Run(ctx, w.client, w.keys.list(), node).Slice()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		name, _ := res[i].(string)
		if v, ok := res[i+1].(string); ok {
			out[name] = []byte(v)
		}
	}
	return out, nil
}

// WorkflowState is a snapshot of a workflow, read in one MULTI.
type WorkflowState struct {
	Meta, State, Jobs, Batches, Need map[string]string
}

// Read returns a snapshot of the workflow (empty maps for an unknown one).
func (w *Workflow) Read(ctx context.Context) (*WorkflowState, error) {
	var cmds [5]*redis.MapStringStringCmd
	_, err := w.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range []string{w.keys.Meta, w.keys.State, w.keys.Jobs, w.keys.Batches, w.keys.Need} {
			cmds[i] = p.HGetAll(ctx, k)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &WorkflowState{Meta: cmds[0].Val(), State: cmds[1].Val(), Jobs: cmds[2].Val(), Batches: cmds[3].Val(), Need: cmds[4].Val()}, nil
}

// Specs returns the specs of nodes.
func (w *Workflow) Specs(ctx context.Context, nodes []string) ([]Runnable, error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	vals, err := w.client.HMGet(ctx, w.keys.Spec, nodes...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Runnable, 0, len(nodes))
	for i, v := range vals {
		s, _ := v.(string)
		out = append(out, Runnable{Name: nodes[i], Spec: s})
	}
	return out, nil
}

// WaitingFor returns, for each of nodes (waiting ones), the parents that
// have not ended, by states (the workflow's node states).
func (w *Workflow) WaitingFor(ctx context.Context, nodes []string, states map[string]string) (map[string][]string, error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	vals, err := w.client.HMGet(ctx, w.keys.Parents, nodes...).Result()
	if err != nil {
		return nil, fmt.Errorf("read parents: %w", err)
	}
	by := make(map[string][]string, len(nodes))
	for i, v := range vals {
		s, _ := v.(string)
		var parents []string
		_ = json.Unmarshal([]byte(s), &parents)
		for _, p := range parents {
			if st := states[p]; st != "s" && st != "d" && st != "c" {
				by[nodes[i]] = append(by[nodes[i]], p)
			}
		}
	}
	return by, nil
}

// runnables parses name/spec pairs.
func runnables(res []any) []Runnable {
	out := make([]Runnable, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		name, _ := res[i].(string)
		spec, _ := res[i+1].(string)
		out = append(out, Runnable{Name: name, Spec: spec})
	}
	return out
}

// MillisField parses a millisecond field of a workflow's meta (0 when
// absent or malformed).
func MillisField(m map[string]string, f string) int64 {
	n, _ := strconv.ParseInt(m[f], 10, 64)
	return n
}
