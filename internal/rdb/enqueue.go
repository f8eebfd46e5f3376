package rdb

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/wire"
)

// Enqueue: adding jobs to the stream under the cap (plain, in batches, or
// under a unique-key lock), and trimming acknowledged history.

// scriptEnqueue adds jobs to the stream unless the cap would be exceeded,
// and remembers the call under its memo token (see memo.go). The first job
// gets an ID from XADD *, the others the IDs that follow it (same
// milliseconds, sequence + 1 each), so the reply is one ID whatever the
// batch size, and so is what the memo remembers.
//
// The cheap path of a call is an XLEN (with a cap), the XADDs and one
// HSETNX of the token: a send that finds the token taken (a re-send of a
// call that ran) deletes the entries it has just added and answers with the
// first send's reply, so it changes nothing but the stream's counters
// (entries-added, the last generated ID). The cap's slow path (trimming
// acknowledged history, see no_room in streamLib) is only compiled into a
// closure when the stream is near its cap.
//
// KEYS[1] stream, KEYS[2] memo hash
// ARGV[1] cap (0 or less: none); ARGV[2] number of jobs n; ARGV[3] memo
// token; ARGV[4] memo TTL (ms; "0": leave it); ARGV[5] t, the number of
// template arguments. With t > 0 every job has the fields of the template
// ARGV[6..5+t] (field/value pairs) but for the value at template position
// ARGV[6+t], which is the job's own: the n values follow. With t = 0 every
// job brings its fields: its field/value count and that many arguments.
// Returns the first entry ID (the others follow it); or, when its sequence
// number is too large to count on exactly, the array of the new entry IDs.
// Or an error reply starting with "QUEUEFULL" when nothing was added
// because the cap was reached.
var scriptEnqueue = redis.NewScript(`
local call, tonumber, unpack = redis.call, tonumber, unpack
local stream, memo, tok = KEYS[1], KEYS[2], ARGV[3]
local cap, njobs = tonumber(ARGV[1]), tonumber(ARGV[2])
` + enqueueCapLua + `
local t = tonumber(ARGV[5])
local first, ids
if t == 0 and njobs == 1 then
  first = call('XADD', stream, '*', unpack(ARGV, 7, 6 + tonumber(ARGV[6])))
elseif t > 0 then
  local f, p, at = {}, tonumber(ARGV[6 + t]), 6 + t
  for i = 1, t do f[i] = ARGV[5 + i] end
  f[p] = ARGV[at + 1]
  first = call('XADD', stream, '*', unpack(f))
  local ms, seq = string.match(first, '^(%d+)-(%d+)$')
  if #seq < 14 then
    local base, s = ms .. '-', tonumber(seq) - 1
    for j = 2, njobs do
      f[p] = ARGV[at + j]
      call('XADD', stream, base .. (s + j), unpack(f))
    end
  else
    ids = {first}
    for j = 2, njobs do
      f[p] = ARGV[at + j]
      ids[j] = call('XADD', stream, '*', unpack(f))
    end
  end
else
  local i = 6
  local n = tonumber(ARGV[i])
  first = call('XADD', stream, '*', unpack(ARGV, i + 1, i + n))
  i = i + n + 1
  local ms, seq = string.match(first, '^(%d+)-(%d+)$')
  if #seq < 14 then
    local base, s = ms .. '-', tonumber(seq) - 1
    for j = 2, njobs do
      n = tonumber(ARGV[i])
      call('XADD', stream, base .. (s + j), unpack(ARGV, i + 1, i + n))
      i = i + n + 1
    end
  else
    ids = {first}
    for j = 2, njobs do
      n = tonumber(ARGV[i])
      ids[j] = call('XADD', stream, '*', unpack(ARGV, i + 1, i + n))
      i = i + n + 1
    end
  end
end
local v = first
if ids then v = 'm' .. cmsgpack.pack(ids) end
if call('HSETNX', memo, tok, v) == 0 then
  -- A re-send of a call that ran: take back what this send added.
  if not ids then
    ids = {first}
    local ms, seq = string.match(first, '^(%d+)-(%d+)$')
    for j = 2, njobs do ids[j] = ms .. '-' .. (tonumber(seq) + j - 1) end
  end
  call('XDEL', stream, unpack(ids))
  return remembered(call('HGET', memo, tok))
end
if ARGV[4] ~= '0' then call('PEXPIRE', memo, ARGV[4]) end
return ids or first
`)

// enqueueCapLua is the start of the enqueue scripts: the cap check, and
// remembered, which turns a remembered reply back into the reply. The cap's
// slow path (trimming acknowledged history, see no_room in streamLib) is
// only made into closures when the stream is near its cap: the Lua
// functions of streamLib cost nothing on the cheap path. It reads the
// locals call, stream, memo, tok (the memo token), cap and njobs.
const enqueueCapLua = `
local function remembered(v)
  if string.sub(v, 1, 1) == 'm' then return cmsgpack.unpack(string.sub(v, 2)) end
  return v
end
if cap > 0 and call('XLEN', stream) + njobs > cap then
  local full = (function()
` + streamLib + `
    return no_room(stream, cap, njobs)
  end)()
  if full then
    local v = call('HGET', memo, tok)
    if v then return remembered(v) end -- a re-send of a call that ran
    return redis.error_reply(full)
  end
end
`

// scriptEnqueuePlain is scriptEnqueue for the call most producers make: one
// job with the fields of a plain job (wire version 1: v, payload, enq; see
// [plainJob]). The field names are constants of the script, so the call
// carries three arguments instead of twelve: most of what an EVALSHA costs
// Redis beyond the commands it runs is spent per argument (the Lua strings
// of ARGV, and again the command's arguments of each redis.call). A queue
// without a cap skips the XLEN. The rest is scriptEnqueue's: write first,
// remember the reply with HSETNX, and a re-send that finds its token takes
// back its entry and answers the first send's reply.
//
// KEYS[1] stream, KEYS[2] memo hash
// ARGV[1] memo token, ARGV[2] payload, ARGV[3] enqueue time (Unix ms);
// ARGV[4] cap (absent, or 0 or less: none); ARGV[5] memo TTL (ms; absent:
// leave it).
// Returns the entry ID, or an error reply starting with "QUEUEFULL".
var scriptEnqueuePlain = redis.NewScript(`
local call, stream, memo, tok = redis.call, KEYS[1], KEYS[2], ARGV[1]
local cap, njobs = tonumber(ARGV[4] or 0), 1
` + enqueueCapLua + `
local id = call('XADD', stream, '*', '` + wire.FieldVersion + `', '1', '` + wire.FieldPayload + `', ARGV[2], '` + wire.FieldEnqueued + `', ARGV[3])
if call('HSETNX', memo, tok, id) == 0 then
  call('XDEL', stream, id) -- a re-send of a call that ran: take back this send's entry
  return remembered(call('HGET', memo, tok))
end
if ARGV[5] then call('PEXPIRE', memo, ARGV[5]) end
return id
`)

// plainJob reports whether fields (a job's [wire.Job.Args]) are those of a
// plain job, which scriptEnqueuePlain writes: the version 1 fields v,
// payload and enq and no other.
func plainJob(fields []any) bool {
	return len(fields) == 6 && fields[0] == wire.FieldVersion && fields[1] == "1" &&
		fields[2] == wire.FieldPayload && fields[4] == wire.FieldEnqueued
}

// EnqueueParams are one enqueue call (scriptEnqueue) of at most
// MaxBatchChunk jobs: the jobs, added with AddJob and AddLike, and how to
// send them. While every job has the fields of the first but for its
// payload (added with AddLike), the call carries those fields once (a
// template) and each job only its payload.
type EnqueueParams struct {
	// IDs receives the entry IDs of the jobs, in order; it must have room
	// for every job.
	IDs []string
	// Replicas is what the write waits for (zero: none).
	Replicas Replicas
	Memo     Memo // the call's memo (zero: a fresh one), the same for every send of it

	n int
	// one is the ARGV of a call of the first job alone: room for the head
	// (enqueueHead), the field count and the first job's fields.
	one      []any
	first    []any // the first job's fields (a window of one)
	template bool  // every job so far is first with its own payload
	pays     []any // the payloads of the jobs after the first, while template
	args     []any // per job: its field count and fields, once not template
}

// enqueueHead is the number of ARGV of scriptEnqueue before the jobs'
// arguments: the cap, n, the memo token and TTL, t.
const enqueueHead = 5

// AddJob adds job j.
func (a *EnqueueParams) AddJob(j *wire.Job) {
	if a.n == 0 {
		a.n = 1
		a.one = j.AppendArgs(make([]any, enqueueHead+1, enqueueHead+1+16))
		a.first = a.one[enqueueHead+1:]
		a.template = true
		return
	}
	a.add(j.Args())
}

// AddLike adds a job with the first job's fields but for its payload, v.
func (a *EnqueueParams) AddLike(v any) {
	if a.template {
		a.n++
		a.pays = append(a.pays, v)
		return
	}
	a.add(a.like(v))
}

// like returns the first job's fields with payload v.
func (a *EnqueueParams) like(v any) []any {
	f := slices.Clone(a.first)
	f[wire.PayloadArg] = v
	return f
}

// add adds a job with its own fields; from then on every job brings its
// fields.
func (a *EnqueueParams) add(fields []any) {
	if a.template {
		a.template = false
		a.args = append(append(a.args, len(a.first)), a.first...)
		for _, v := range a.pays {
			f := a.like(v)
			a.args = append(append(a.args, len(f)), f...)
		}
		a.pays = nil
	}
	a.n++
	a.args = append(append(a.args, len(fields)), fields...)
}

// argv returns the ARGV of the call, with the head (cap, n, token, TTL)
// left for the caller to fill.
func (a *EnqueueParams) argv() []any {
	switch {
	case a.n == 1:
		a.one[enqueueHead-1], a.one[enqueueHead] = 0, len(a.first)
		return a.one
	case a.template:
		out := make([]any, enqueueHead, enqueueHead+len(a.first)+2+len(a.pays))
		out[enqueueHead-1] = len(a.first)
		out = append(out, a.first[:wire.PayloadArg]...)
		out = append(out, "")
		out = append(out, a.first[wire.PayloadArg+1:]...)
		out = append(out, wire.PayloadArg+1, a.first[wire.PayloadArg])
		return append(out, a.pays...)
	}
	out := make([]any, enqueueHead, enqueueHead+len(a.args))
	out[enqueueHead-1] = 0
	return append(out, a.args...)
}

// plainArgv returns the ARGV of scriptEnqueuePlain for the call's one plain
// job of queue q, with memo m. It uses the room of the head of a.one, which
// a call of one job does not otherwise use.
func (a *EnqueueParams) plainArgv(q *Queue, m Memo) []any {
	out := append(a.one[:0:enqueueHead], m.Token, a.first[wire.PayloadArg], a.first[wire.PayloadArg+2])
	switch {
	case m.TTL > 0:
		return append(out, q.maxLen, m.TTL)
	case q.capped:
		return append(out, q.maxLen)
	}
	return out
}

// Enqueue runs scriptEnqueue (scriptEnqueuePlain for one plain job) for the jobs of p under the queue's cap, and
// sets their entry IDs in p.IDs. A refusal wraps [ErrQueueFull]; a write
// that p.Replicas did not acknowledge sets its IDs and returns a
// [*streamqtype.NotReplicatedError].
func (q *Queue) Enqueue(ctx context.Context, p *EnqueueParams) error {
	m := q.memoOr(p.Memo)
	s, keys, args := q.enqueueCall(p, m)
	cmd, werr := q.runScript(ctx, s, m, p.Replicas, keys, args)
	if err := cmd.Err(); err != nil {
		return Translate(err)
	}
	if err := entryIDs(cmd.Val(), p.IDs[:p.n]); err != nil {
		return err
	}
	return werr
}

// enqueueCall returns the script, keys and arguments of p's call with
// memo m.
func (q *Queue) enqueueCall(p *EnqueueParams, m Memo) (*redis.Script, []string, []any) {
	s, args := scriptEnqueue, p.argv()
	if p.n == 1 && plainJob(p.first) {
		s, args = scriptEnqueuePlain, p.plainArgv(q, m)
	} else {
		args[0], args[1], args[2], args[3] = q.maxLen, p.n, m.Token, m.TTL
	}
	return s, []string{q.keys.Stream, m.Key}, args
}

// EnqueuePiped queues p's call on pipe (an EVALSHA), for a caller that
// sends the calls of several queues in one pipeline per node, and returns
// the function that finishes it once the pipeline ran: it sets p.IDs from
// the reply; when the pipelined call failed (its script not loaded on that
// node yet, a connection lost, a refusal) it sends the call again with
// [Queue.Enqueue] and the same memo, so a call that Redis ran stores its
// jobs once, and returns what that returns. p.Replicas must be zero.
func (q *Queue) EnqueuePiped(ctx context.Context, pipe redis.Pipeliner, p *EnqueueParams) func() error {
	p.Memo = q.memoOr(p.Memo)
	s, keys, args := q.enqueueCall(p, p.Memo)
	cmd := s.EvalSha(ctx, pipe, keys, args...)
	return func() error {
		if cmd.Err() != nil {
			return q.Enqueue(ctx, p)
		}
		p.Memo.done()
		return entryIDs(cmd.Val(), p.IDs[:p.n])
	}
}

// entryIDs expands scriptEnqueue's reply into the IDs of len(ids) entries.
func entryIDs(res any, ids []string) error {
	switch v := res.(type) {
	case string:
		ids[0] = v
		if len(ids) == 1 {
			return nil
		}
		ms, seq, found := strings.Cut(v, "-")
		s, err := strconv.ParseUint(seq, 10, 64)
		if !found || err != nil {
			return fmt.Errorf("unexpected enqueue reply %q", v)
		}
		for j := 1; j < len(ids); j++ {
			ids[j] = ms + "-" + strconv.FormatUint(s+uint64(j), 10)
		}
		return nil
	case []any:
		if len(v) != len(ids) {
			return fmt.Errorf("enqueue replied %d IDs for %d jobs", len(v), len(ids))
		}
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("unexpected enqueue reply element %T", e)
			}
			ids[i] = s
		}
		return nil
	}
	return fmt.Errorf("unexpected enqueue reply %T", res)
}

// scriptEnqueueOne enqueues one job into the stream (under the cap) or the
// delayed set, with a job ID its producer chose and under a lock of a dedup
// mode, each optional:
//
//   - a chosen job ID is refused when the trail knows it (the job lives) or
//     its done marker exists (it finished within the done retention); the
//     trail records where the new job lives from the start;
//   - "unique": a lock released when the job finishes (succeeds or is
//     dead-lettered) and expiring after its TTL in any case; with states,
//     it holds only while its job is in one of them ('w' waiting in the
//     stream, 'd' delayed: scheduled or retrying, 'r' running; a job of a
//     priority set counts as waiting and running), and a job found in none
//     of them loses it to the new job;
//   - "throttle": a lock never released: the first job of each window wins;
//   - "debounce": while the lock's job still waits in the delayed set, the
//     call replaces its fields (keeping its stable ID) and moves its start
//     to the quiet period after now; else the job is stored to run after
//     the quiet period, and takes the lock.
//
// Due times of debounced jobs are the server's (TIME).
//
// KEYS[1] stream, KEYS[2] delayed sorted set, KEYS[3] delayed job hash,
// KEYS[4] trail hash, KEYS[5] done marker of the chosen ID (any key of the
// queue without one), KEYS[6] lock key (any key of the queue without a
// lock), KEYS[7] dead-letter stream, KEYS[8] memo hash
// ARGV[1] cap (0 or less: none), ARGV[2] due time (see due_at: "+<ms>"
// after the server's time, Unix ms, or "0": into the stream now), ARGV[3] delayed-set ID (for a delayed job), ARGV[4] chosen
// job ID ("": none), ARGV[5] lock mode ("", "unique", "throttle",
// "debounce"), ARGV[6] lock TTL (ms; the quiet period for "debounce"),
// ARGV[7] lock token, ARGV[8] group, ARGV[9] states of a "unique" lock (""
// for all), ARGV[10..] field/value arguments of the job; then the memo token
// and TTL.
// Returns {1, job ID} when enqueued, {0, existing job ID} for a duplicate
// (the chosen ID is taken, or the lock is held), {2, job ID} when a waiting
// debounced job was updated, or a QUEUEFULL error reply. A re-sent call
// returns what the first returned.
var scriptEnqueueOne = redis.NewScript(idempotent(streamLib+inspectLib+jobIDLib, `
local stream, delayed, jobs, trail, done, lock = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local due, member, jid, mode, ttl = due_at(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
if jid ~= '' and id_taken(stream, delayed, KEYS[7], trail, done, jid) then return {0, jid} end
-- state returns the state letter of the job with stable ID id: 'w', 'd',
-- 'r', 'p' (in a priority set), or '-' (finished or gone).
local function state(id)
  local loc = redis.call('HGET', trail, id)
  local kind, at = 's', id
  if loc then
    kind, at = string.sub(loc, 1, 1), string.sub(loc, 3)
  elseif redis.call('ZSCORE', delayed, id) then
    return 'd'
  end
  if kind == 'd' then
    if redis.call('ZSCORE', delayed, at) then return 'd' end
  elseif kind == 'p' then
    return 'p'
  elseif kind == 's' and string.match(at, '^%d+%-?%d*$') then
    local s = entry_state(stream, ARGV[8], at)
    if s == 'waiting' then return 'w' elseif s == 'running' then return 'r' end
  end
  return '-'
end
local fields = {unpack(ARGV, 10)}
local held_by_other = mode ~= '' and redis.call('EXISTS', lock) == 1
if held_by_other then
  local held = redis.call('HGET', lock, 'id') or ''
  if mode == 'debounce' then
    local m = redis.call('HGET', lock, 'member')
    if m and redis.call('ZSCORE', delayed, m) then
      for i = 1, #fields - 1, 2 do
        if fields[i] == 'jid' then fields[i + 1] = held end
      end
      redis.call('HSET', jobs, m, cmsgpack.pack(fields))
      redis.call('ZADD', delayed, now_ms() + ttl, m)
      redis.call('PEXPIRE', lock, ttl + 3600000)
      return {2, held}
    end
  elseif mode ~= 'unique' or ARGV[9] == '' then
    return {0, held}
  else
    local s = state(held)
    if s == 'p' then s = 'wr' end
    if s ~= '-' and string.find(ARGV[9], s, 1, true) then return {0, held} end
  end
end
local id, at
if mode == 'debounce' then due = now_ms() + ttl end
if due > 0 then
  redis.call('HSET', jobs, member, cmsgpack.pack(fields))
  redis.call('ZADD', delayed, due, member)
  id, at = member, 'd:' .. member
else
  local full = no_room(stream, tonumber(ARGV[1]), 1)
  if full then return redis.error_reply(full) end
  id = redis.call('XADD', stream, '*', unpack(fields))
  at = 's:' .. id
end
if jid ~= '' then
  redis.call('HSET', trail, jid, at)
  id = jid
end
if mode ~= '' then
  if held_by_other then redis.call('DEL', lock) end -- taken over from a job past its states
  redis.call('HSET', lock, 'token', ARGV[7], 'id', id)
  if mode == 'debounce' then
    redis.call('HSET', lock, 'member', member)
    ttl = ttl + 3600000
  end
  redis.call('PEXPIRE', lock, ttl)
end
return {1, id}
`))

// Lock modes of [EnqueueOneParams] (see scriptEnqueueOne).
const (
	LockUnique   = "unique"
	LockThrottle = "throttle"
	LockDebounce = "debounce"
)

// Lock is the dedup lock of one enqueue (see scriptEnqueueOne).
type Lock struct {
	Mode string // LockUnique, LockThrottle or LockDebounce ("": no lock)
	Key  string // the dedup key
	// TTL is how long the lock lives at most (a debounce's quiet period:
	// the job runs after it, counted from the last enqueue).
	TTL time.Duration
	// States limits a unique lock to a job in these states: letters 'w'
	// (waiting), 'd' (delayed or retrying), 'r' (running); "": all.
	States string
}

// key returns the Redis key of the lock.
func (l *Lock) key(k *Keys) string {
	switch l.Mode {
	case LockThrottle:
		return k.base + "throttle:" + l.Key
	case LockDebounce:
		return k.base + "debounce:" + l.Key
	case LockUnique:
		return k.Unique(l.Key)
	}
	return k.Stream // no lock: any key of the queue
}

// Enqueue outcomes of [Queue.EnqueueOne].
const (
	Duplicate = 0 // the chosen ID is taken or the lock held: nothing written
	Enqueued  = 1 // the job was stored
	Debounced = 2 // a waiting debounced job was updated in place
)

// EnqueueOneParams are one call of scriptEnqueueOne.
type EnqueueOneParams struct {
	// Job is the job. EnqueueOne sets its JobID (the chosen ID, or a
	// delayed job's generated one) and, for a unique lock, its Key and
	// KeyToken.
	Job *wire.Job
	// ID is the job ID the producer chose ("": one is generated).
	ID string
	// Due is when a delayed job is due, unless In is set (both zero: the
	// job goes into the stream now, under the queue's cap). A debounced job
	// is due after its quiet period whatever they say.
	Due time.Time
	// In is how long after the server's time a delayed job is due.
	In time.Duration
	// Lock is the dedup lock (zero Mode: none).
	Lock Lock
	// Replicas is what the write waits for (zero: none).
	Replicas Replicas
	Memo     Memo // the call's memo (zero: a fresh one), the same for every send of it
}

// EnqueueOne runs scriptEnqueueOne. It returns the outcome and the job's
// ID (the existing job's for a Duplicate). A refusal wraps
// [ErrQueueFull]. A write that p.Replicas did not acknowledge returns its
// result and a [*streamqtype.NotReplicatedError].
func (q *Queue) EnqueueOne(ctx context.Context, p *EnqueueOneParams) (int, string, error) {
	due := "0"
	var member string
	j := p.Job
	j.JobID = p.ID
	if !p.Due.IsZero() || p.In > 0 || p.Lock.Mode == LockDebounce {
		member = q.NewDelayedID()
		if j.JobID == "" {
			j.JobID = member
		}
		if !p.Due.IsZero() || p.In > 0 {
			due = DueArg(p.Due, p.In)
		}
	}
	var token string
	if p.Lock.Mode != "" {
		token = NewToken()
	}
	if p.Lock.Mode == LockUnique {
		j.Key, j.KeyToken = p.Lock.Key, token
	}
	done := q.keys.Stream
	if p.ID != "" {
		done = q.keys.Done(p.ID)
	}
	args := append([]any{q.maxLen, due, member, p.ID, p.Lock.Mode, p.Lock.TTL.Milliseconds(), token, q.group, p.Lock.States}, j.Args()...)
	keys := []string{q.keys.Stream, q.keys.Delayed, q.keys.DelayedJobs, q.keys.Trail, done, p.Lock.key(&q.keys), q.keys.Dead}
	cmd, werr := q.runWrite(ctx, scriptEnqueueOne, q.memoOr(p.Memo), p.Replicas, keys, args)
	res, err := cmd.Slice()
	if err != nil {
		return 0, "", Translate(err)
	}
	if len(res) != 2 {
		return 0, "", fmt.Errorf("unexpected reply with %d elements", len(res))
	}
	outcome, _ := res[0].(int64)
	id, _ := res[1].(string)
	return int(outcome), id, werr
}

// scriptTrim trims acknowledged history, a bounded part per call: whole
// stream nodes below the oldest entry some group has not acknowledged (see
// trim_acked in streamLib), then, behind that entry (a long job), the
// acknowledged entries one by one (drop_acked), walking the stream with a
// cursor.
//
// KEYS[1] stream
// ARGV[1] cursor: "-" on the first call, then what the last call returned
// Returns {entries deleted, next cursor}; the cursor is "" when the walk
// reached the entries not yet read, or the end of the stream.
var scriptTrim = redis.NewScript(streamLib + `
local n = trim_acked(KEYS[1])
if n > 0 then return {n, ARGV[1]} end
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, ''} end
local states = group_states(KEYS[1])
if #states == 0 then return {0, ''} end
local d, nextc = drop_acked(KEYS[1], states, trim_budget, ARGV[1])
return {d, nextc}
`)

// maxTrimCalls bounds the calls of one Trim (each bounded work); a history
// longer than that many calls can free is left for the next Trim.
const maxTrimCalls = 1_000_000

// Trim runs scriptTrim until the walk ends, and returns the number of
// entries deleted: all the acknowledged history, also behind a pending
// entry. Each call is bounded; the history goes in as many calls as it
// takes.
func (q *Queue) Trim(ctx context.Context) (int64, error) {
	var total int64
	cursor := "-"
	for range maxTrimCalls {
		res, err := scriptTrim.Run(ctx, q.client, []string{q.keys.Stream}, cursor).Slice()
		if err != nil {
			return total, err
		}
		if len(res) != 2 {
			return total, fmt.Errorf("unexpected trim reply with %d elements", len(res))
		}
		n, _ := res[0].(int64)
		total += n
		cursor, _ = res[1].(string)
		if cursor == "" {
			return total, nil
		}
	}
	return total, nil
}
