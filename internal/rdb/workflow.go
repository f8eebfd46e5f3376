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
// into their queues by scriptWorkflowRelease under a mark per node (one slot:
// the queue's), so a release repeated after a crash stores nothing twice.
//
// Node states (the State hash): "w" waiting for parents, "r" runnable (its
// parents allow it; not yet in its queue), "q" released into its queue, "f"
// released and retrying after a failed attempt; terminal: "s" succeeded,
// "d" dead (failed for good: dead-lettered), "c" cancelled.

// WorkflowKeys are the keys of one workflow.
type WorkflowKeys struct {
	Meta    string // HASH state (running|finished|cancelled), sum, created, touched, finished, retention (ms), nodes, open
	Spec    string // HASH node -> the job to release (wire.Spec encoding)
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

// WorkflowMarks returns the key of the marks of the released jobs of
// workflow id in the queue of keys: a hash, node -> the job's ID, in the
// queue's slot.
func WorkflowMarks(keys Keys, id string) string { return keys.OutboxMark("wf:" + id) }

// scriptWorkflowRelease enqueues the jobs of runnable nodes of one
// workflow into one queue, each unless the workflow's marks in the queue
// name its node: a job whose mark exists was enqueued by an earlier call
// (a release repeated after a crash, a re-sent call), and is left alone.
// The new jobs go into the stream under the queue's cap (nothing is
// written when they do not fit). The marks are read with one HMGET and
// written with one HSET per 500 (hset_many): a new job costs its XADD.
//
// KEYS[1] stream, KEYS[2] the workflow's marks in the queue (WorkflowMarks)
// ARGV[1] cap (0 or less: none), ARGV[2] marks TTL (ms), ARGV[3] number
// of jobs n (at most 1,000); then per job: its node, its field/value count
// c and c field/value arguments.
// Returns {added, id_1, ..., id_n}: how many jobs the call enqueued, and
// each job's ID (the earlier call's for a marked one). Or an error reply
// starting with "QUEUEFULL" when the new jobs do not fit under the cap.
var scriptWorkflowRelease = redis.NewScript(streamLib + hsetLib + `
local cap, ttl, n = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local nodes, pos = {}, {}
local i = 4
for j = 1, n do
  nodes[j], pos[j] = ARGV[i], i
  i = i + 2 + tonumber(ARGV[i + 1])
end
local found, ids, new = redis.call('HMGET', KEYS[2], unpack(nodes)), {}, 0
for j = 1, n do
  if found[j] then ids[nodes[j]] = found[j] elseif ids[nodes[j]] == nil then
    ids[nodes[j]] = false
    new = new + 1
  end
end
if new > 0 then
  local full = no_room(KEYS[1], cap, new)
  if full then return redis.error_reply(full) end
end
local out, marks = {0}, {}
for j = 1, n do
  local id = ids[nodes[j]]
  if not id then
    local p = pos[j]
    id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, p + 2, p + 1 + tonumber(ARGV[p + 1])))
    ids[nodes[j]] = id
    marks[#marks + 1] = nodes[j]
    marks[#marks + 1] = id
    out[1] = out[1] + 1
  end
  out[j + 1] = id
end
hset_many(KEYS[2], marks)
redis.call('PEXPIRE', KEYS[2], ttl)
return out
`)

// WorkflowReleaseParams are one call of scriptWorkflowRelease: the jobs
// of one workflow for one queue, at most 1,000, added with Add.
type WorkflowReleaseParams struct {
	Workflow string        // the workflow's ID
	MarkTTL  time.Duration // how long the marks live
	// IDs receives the job IDs, in the order of Add.
	IDs []string

	nodes []string
	args  []any
}

// Add adds the job of node, with its wire fields (see wire.Job.Args).
func (p *WorkflowReleaseParams) Add(node string, fields []string) {
	if p.args == nil {
		p.args = make([]any, 3, 3+16*8)
	}
	p.nodes = append(p.nodes, node)
	p.args = append(p.args, node, len(fields))
	for _, f := range fields {
		p.args = append(p.args, f)
	}
}

// Len returns the number of jobs added.
func (p *WorkflowReleaseParams) Len() int { return len(p.nodes) }

// Nodes returns the nodes added, in the order of Add.
func (p *WorkflowReleaseParams) Nodes() []string { return p.nodes }

// WorkflowRelease runs scriptWorkflowRelease for the jobs of p and sets
// p.IDs. A refusal wraps [ErrQueueFull].
func (q *Queue) WorkflowRelease(ctx context.Context, p *WorkflowReleaseParams) error {
	if len(p.nodes) == 0 {
		return nil
	}
	args := p.args
	args[0], args[1], args[2] = q.maxLen, p.MarkTTL.Milliseconds(), len(p.nodes)
	keys := []string{q.keys.Stream, WorkflowMarks(q.keys, p.Workflow)}
	cmd, _ := q.runScript(ctx, scriptWorkflowRelease, Memo{}, Replicas{}, keys, args)
	res, err := cmd.Slice()
	if err != nil {
		return Translate(err)
	}
	if len(res) != len(p.nodes)+1 {
		return fmt.Errorf("workflow release replied %d elements for %d jobs", len(res), len(p.nodes))
	}
	p.IDs = make([]string, len(p.nodes))
	for i, v := range res[1:] {
		p.IDs[i], _ = v.(string)
	}
	return nil
}

// hsetLib holds hset_many, for scripts that write many fields of a hash
// at once: the workflow scripts, and the release of a workflow's jobs
// (their marks).
//
// A small hash is a listpack, which Redis searches field by field on each
// write, so filling one with hundreds of fields costs the square of their
// number (a workflow of 1,000 nodes: 1.3 ms per hash on Redis 7.0, against
// 0.2 ms for a hash table). A value longer than hash-max-listpack-value
// (64 bytes by default) makes Redis convert the hash to a hash table
// before it writes anything, so a call of 128 fields or more carries one
// such field, removed at once. Its name starts with a NUL byte, which no
// node or batch name may hold.
const hsetLib = `
-- hset_many sets the field/value pairs of t (a flat list) in hash key, in
-- chunks of 500 pairs (unpack's stack limit).
local function hset_many(key, t)
  local wide = #t >= 256
  for i = 1, #t, 1000 do
    if wide and i == 1 then
      redis.call('HSET', key, '\0wide', string.rep('-', 1024), unpack(t, i, math.min(i + 999, #t)))
    else
      redis.call('HSET', key, unpack(t, i, math.min(i + 999, #t)))
    end
  end
  if wide then redis.call('HDEL', key, '\0wide') end
end
`

// workflowLib holds the helpers of the workflow scripts. KEYS are those of
// WorkflowKeys, in its field order.
const workflowLib = timeLib + hsetLib + `
local K_META, K_SPEC, K_STATE, K_NEED, K_KIDS, K_PAR, K_JOBS, K_RES, K_BATCH =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]

local function terminal(s) return s == 's' or s == 'd' or s == 'c' end

-- hmget_many returns the values of fields names of hash key (false for a
-- missing one), in chunks of 1,000 fields.
local function hmget_many(key, names)
  local out = {}
  for i = 1, #names, 1000 do
    for _, v in ipairs(redis.call('HMGET', key, unpack(names, i, math.min(i + 999, #names)))) do
      out[#out + 1] = v
    end
  end
  return out
end

-- push_specs appends each of names and its spec to out (one HMGET per
-- 1,000 nodes).
local function push_specs(out, names)
  local specs = hmget_many(K_SPEC, names)
  for i, n in ipairs(names) do
    out[#out + 1] = n
    out[#out + 1] = specs[i] or ''
  end
end

-- settle ends nodes with outcomes (ends: a flat list of node, outcome;
-- outcome 's', 'd' or 'c') and applies each to its children by the policy
-- of each edge: 'c' cancels a waiting child when the parent did not
-- succeed (and so on down), any other policy counts the parent as
-- finished. Children whose last parent finished become runnable and are
-- appended to out with their specs. known holds states the caller read.
-- The children lists of the nodes in ends are read with one HMGET; the
-- states and counters it reads go through a cache and are written back
-- once, with one HSET per hash: a node's children cost one HMGET of their
-- states and one of their counters, whatever their number. Returns
-- how many nodes it ended. Its work is bounded by the size of the
-- workflow, which the builder bounds.
local function settle(ends, out, known)
  local state, need, sw, nw, runnable = known or {}, {}, {}, {}, {}
  local stack, closed, kidsof, first = {}, 0, {}, {}
  for i = #ends - 1, 1, -2 do stack[#stack + 1] = {ends[i], ends[i + 1]} end
  -- The children of the nodes the caller ends, with one HMGET (false: none).
  for i = 1, #ends, 2 do first[#first + 1] = ends[i] end
  for i, v in ipairs(hmget_many(K_KIDS, first)) do kidsof[first[i]] = v end
  while #stack > 0 do
    local top = table.remove(stack)
    local n, o = top[1], top[2]
    local st = state[n]
    if st == nil then
      st = redis.call('HGET', K_STATE, n)
      state[n] = st
    end
    if st and not terminal(st) then
      state[n] = o
      sw[#sw + 1] = n
      sw[#sw + 1] = o
      closed = closed + 1
      local kids = kidsof[n]
      if kids == nil then kids = redis.call('HGET', K_KIDS, n) end
      if kids then
        local es = cjson.decode(kids)
        local unread = {}
        for _, e in ipairs(es) do
          if state[e[1]] == nil then unread[#unread + 1] = e[1] end
        end
        if #unread > 0 then
          local vals = hmget_many(K_STATE, unread)
          for i, c in ipairs(unread) do state[c] = vals[i] end
        end
        unread = {}
        for _, e in ipairs(es) do
          if state[e[1]] == 'w' and need[e[1]] == nil then unread[#unread + 1] = e[1] end
        end
        if #unread > 0 then
          local vals = hmget_many(K_NEED, unread)
          for i, c in ipairs(unread) do need[c] = tonumber(vals[i]) or 0 end
        end
        for _, e in ipairs(es) do
          local c, pol = e[1], e[2]
          if state[c] == 'w' then
            if o ~= 's' and pol == 'c' then
              stack[#stack + 1] = {c, 'c'}
            else
              need[c] = need[c] - 1
              nw[#nw + 1] = c
              nw[#nw + 1] = need[c]
              if need[c] <= 0 then
                state[c] = 'r'
                sw[#sw + 1] = c
                sw[#sw + 1] = 'r'
                runnable[#runnable + 1] = c
              end
            end
          end
        end
      end
    end
  end
  hset_many(K_STATE, sw)
  hset_many(K_NEED, nw)
  push_specs(out, runnable)
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
  local st, runnable = redis.call('HGETALL', K_STATE), {}
  for i = 1, #st, 2 do
    if st[i + 1] == 'r' then runnable[#runnable + 1] = st[i] end
  end
  push_specs(out, runnable)
  return out
end
local now, n = now_ms(), tonumber(ARGV[3])
redis.call('HSET', K_META, 'state', 'running', 'sum', ARGV[2], 'created', now, 'touched', now,
  'retention', ARGV[1], 'nodes', n, 'open', n)
local spec, state, need, kids, par, runnable = {}, {}, {}, {}, {}, {}
local i = 4
for j = 1, n do
  local name, nd, k, p = ARGV[i], tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4]
  spec[#spec + 1] = name
  spec[#spec + 1] = ARGV[i + 1]
  state[#state + 1] = name
  if nd == 0 then
    state[#state + 1] = 'r'
    out[#out + 1] = name
    out[#out + 1] = ARGV[i + 1]
  else
    state[#state + 1] = 'w'
    need[#need + 1] = name
    need[#need + 1] = nd
  end
  if k ~= '' then
    kids[#kids + 1] = name
    kids[#kids + 1] = k
  end
  if p ~= '' then
    par[#par + 1] = name
    par[#par + 1] = p
  end
  i = i + 5
end
hset_many(K_SPEC, spec)
hset_many(K_STATE, state)
hset_many(K_NEED, need)
hset_many(K_KIDS, kids)
hset_many(K_PAR, par)
local nb, batches = tonumber(ARGV[i]), {}
for j = 1, 2 * nb do batches[j] = ARGV[i + j] end
hset_many(K_BATCH, batches)
return out
`)

// scriptWorkflowComplete records the outcomes of nodes' jobs, in order: 'f'
// a failed attempt that will be retried, 's' success (with its result),
// 'd' a final failure, 'c' cancelled. The terminal outcomes are applied to
// the children together (see settle); recording one again changes nothing
// and returns the node's children still runnable (not yet released), so
// that a worker that crashed before releasing them, or the re-drive,
// releases them. Workers record the jobs of one workflow that end
// together in one call.
//
// KEYS: WorkflowKeys
// ARGV[1] count n (at most a few hundred); per record 4 arguments: node,
// outcome, result, "1" when the result is one to store.
// Returns {finished (1 when this call finished the workflow), found (a
// string of n characters: "1" for a record of a known node, "0" for one of
// an unknown workflow or node: expired, never created), name_1, spec_1,
// ...} of the runnable children.
var scriptWorkflowComplete = redis.NewScript(workflowLib + `
local n = tonumber(ARGV[1])
local now = now_ms()
local known, found, ends, seen, again = {}, {}, {}, {}, {}
local failed = false
local names = {}
for j = 1, n do names[j] = ARGV[4 * j - 2] end
for j, st in ipairs(hmget_many(K_STATE, names)) do known[names[j]] = st end
for j = 1, n do
  local node, outcome = ARGV[4 * j - 2], ARGV[4 * j - 1]
  local st = known[node]
  found[j] = st and '1' or '0'
  if not st then
  elseif outcome == 'f' then
    if st == 'q' or st == 'r' then
      redis.call('HSET', K_STATE, node, 'f')
      known[node] = 'f'
      failed = true
    end
  elseif not terminal(st) and not seen[node] then
    seen[node] = true
    if outcome == 's' and ARGV[4 * j + 1] == '1' then redis.call('HSET', K_RES, node, ARGV[4 * j]) end
    ends[#ends + 1] = node
    ends[#ends + 1] = outcome
  elseif terminal(st) then
    again[#again + 1] = node
  end
end
local out = {0, table.concat(found)}
if #ends > 0 then
  out[1] = close(settle(ends, out, known), now)
elseif failed then
  redis.call('HSET', K_META, 'touched', now)
end
local listed = {}
for i = 3, #out, 2 do listed[out[i]] = true end
local runnable = {}
for _, node in ipairs(again) do
  local kids = redis.call('HGET', K_KIDS, node)
  if kids then
    local names = {}
    for _, e in ipairs(cjson.decode(kids)) do names[#names + 1] = e[1] end
    for i, s in ipairs(hmget_many(K_STATE, names)) do
      if s == 'r' and not listed[names[i]] then
        listed[names[i]] = true
        runnable[#runnable + 1] = names[i]
      end
    end
  end
end
push_specs(out, runnable)
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
local names, refs, seen = {}, {}, {}
for i = 1, #ARGV, 2 do
  if not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    names[#names + 1] = ARGV[i]
    refs[#refs + 1] = ARGV[i + 1]
  end
end
local sts, jobs = hmget_many(K_STATE, names), hmget_many(K_JOBS, names)
local jw, sw, out = {}, {}, {}
for j, n in ipairs(names) do
  local st = sts[j]
  if st and not jobs[j] then
    jw[#jw + 1] = n
    jw[#jw + 1] = refs[j]
  end
  if st == 'r' then
    sw[#sw + 1] = n
    sw[#sw + 1] = 'q'
  elseif st == 'c' then
    out[#out + 1] = refs[j]
  end
end
hset_many(K_JOBS, jw)
hset_many(K_STATE, sw)
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

// Completion is the outcome of one attempt of a node's job, for
// [Workflow.Complete]: "f" failed (to be retried), "s" succeeded, "d"
// failed for good, "c" cancelled.
type Completion struct {
	Node, Outcome string
	Result        []byte
	HasResult     bool // Result is one to store
}

// Complete runs scriptWorkflowComplete for cs. found[i] is false when the
// workflow or cs[i]'s node is unknown; finished is true when this call
// finished the workflow; run are the children now runnable.
func (w *Workflow) Complete(ctx context.Context, cs []Completion) (found []bool, finished bool, run []Runnable, err error) {
	args := make([]any, 0, 1+4*len(cs))
	args = append(args, len(cs))
	for _, c := range cs {
		flag := "0"
		if c.HasResult {
			flag = "1"
		}
		args = append(args, c.Node, c.Outcome, c.Result, flag)
	}
	res, err := scriptWorkflowComplete.Run(ctx, w.client, w.keys.list(), args...).Slice()
	if err != nil {
		return nil, false, nil, err
	}
	if len(res) < 2 {
		return nil, false, nil, fmt.Errorf("workflow complete: reply of %d elements", len(res))
	}
	f, _ := res[0].(int64)
	flags, _ := res[1].(string)
	if len(flags) != len(cs) {
		return nil, false, nil, fmt.Errorf("workflow complete: %d found flags for %d records", len(flags), len(cs))
	}
	found = make([]bool, len(cs))
	for i := range cs {
		found[i] = flags[i] == '1'
	}
	return found, f == 1, runnables(res[2:]), nil
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
