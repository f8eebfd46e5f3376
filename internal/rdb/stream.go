package rdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/wire"
)

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

// EnqueueArgs builds the arguments of one enqueue call (scriptEnqueue).
// While every job has the fields of the first but for its payload (added
// with AddLike), the call carries those fields once (a template) and each
// job only its payload.
type EnqueueArgs struct {
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
func (a *EnqueueArgs) AddJob(j *wire.Job) {
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
func (a *EnqueueArgs) AddLike(v any) {
	if a.template {
		a.n++
		a.pays = append(a.pays, v)
		return
	}
	a.add(a.like(v))
}

// like returns the first job's fields with payload v.
func (a *EnqueueArgs) like(v any) []any {
	f := slices.Clone(a.first)
	f[wire.PayloadArg] = v
	return f
}

// add adds a job with its own fields; from then on every job brings its
// fields.
func (a *EnqueueArgs) add(fields []any) {
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
func (a *EnqueueArgs) argv() []any {
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

// Enqueue runs scriptEnqueue for the jobs of a (a call of at most
// MaxBatchChunk jobs) with maxLen, the cap (an int64, 0 or less: none),
// and sets their entry IDs in ids. A refusal wraps [ErrQueueFull]; a
// write that rep's replicas did not acknowledge sets its IDs and returns a
// [*streamqtype.NotReplicatedError].
func Enqueue(ctx context.Context, c redis.Scripter, k Keys, m Memo, rep Replicas, maxLen any, a *EnqueueArgs, ids []string) error {
	args := a.argv()
	args[0], args[1], args[2], args[3] = maxLen, a.n, m.Token, m.TTL
	cmd, werr := runScript(ctx, c, scriptEnqueue, m, rep, []string{k.Stream, m.Key}, args)
	if err := cmd.Err(); err != nil {
		return Translate(err)
	}
	if err := entryIDs(cmd.Val(), ids[:a.n]); err != nil {
		return err
	}
	return werr
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

// scriptTrim trims acknowledged history, a bounded part per call (see
// trim_acked in streamLib).
//
// KEYS[1] stream
// Returns the number of entries deleted; 0 when no history is left.
var scriptTrim = redis.NewScript(streamLib + `
return trim_acked(KEYS[1])
`)

// Trim runs scriptTrim until it deletes nothing more, and returns the
// number of entries deleted. Each call is bounded; the history goes in as
// many calls as it takes.
func Trim(ctx context.Context, c redis.Scripter, k Keys) (int64, error) {
	var total int64
	for {
		n, err := scriptTrim.Run(ctx, c, []string{k.Stream}).Int64()
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// scriptSchedule stores jobs in the delayed set.
//
// KEYS[1] delayed sorted set, KEYS[2] delayed job hash, KEYS[3] memo hash
// ARGV[1] due time (Unix ms); ARGV[2] number of jobs; then for each job: its
// token, its field/value count n, and n field/value arguments; then the
// memo token and TTL.
// Returns the number of jobs stored. A re-sent call stores nothing again
// (not even a job that was moved into the stream since).
var scriptSchedule = redis.NewScript(idempotent("", `
local i = 3
local njobs = tonumber(ARGV[2])
for j = 1, njobs do
  local tok = ARGV[i]
  local n = tonumber(ARGV[i + 1])
  redis.call('HSET', KEYS[2], tok, cmsgpack.pack({unpack(ARGV, i + 2, i + 1 + n)}))
  redis.call('ZADD', KEYS[1], ARGV[1], tok)
  i = i + n + 2
end
return njobs
`))

// Schedule runs scriptSchedule; args are ARGV from ARGV[1] on, up to the
// memo. A write that rep's replicas did not acknowledge returns a
// [*streamqtype.NotReplicatedError].
func Schedule(ctx context.Context, c redis.Scripter, k Keys, m Memo, rep Replicas, args []any) error {
	cmd, werr := runWrite(ctx, c, scriptSchedule, m, rep, []string{k.Delayed, k.DelayedJobs}, args)
	if err := cmd.Err(); err != nil {
		return err
	}
	return werr
}

// scriptPromote moves due jobs from the delayed set into the stream. A job
// whose data cannot be a stream entry (not one MessagePack array of an even
// number of strings, at most wire.MaxFields fields) is dead-lettered instead,
// with reason ARGV[5] and its data kept in the field "data", so that one
// corrupt job cannot stop the others. The data is checked before the XADD,
// so an XADD that fails is a fault of the stream (a foreign key, memory),
// and aborts the call without dead-lettering anything.
//
// KEYS[1] stream, KEYS[2] delayed sorted set, KEYS[3] delayed job hash,
// KEYS[4] dead-letter stream, KEYS[5] trail hash (a moved job's new place
// is recorded under its jid field, if it has one)
// ARGV[1] now (Unix ms); ARGV[2] maximum number of jobs to move; ARGV[3]
// queue name; ARGV[4] dead-letter cap (0: none); ARGV[5] dead-letter reason
// Returns {number of due jobs handled (moved, dead-lettered or without
// data), {delayed-set IDs of the jobs dead-lettered}}. Many schedulers may
// run it concurrently: a job is moved exactly once. Each job is written to
// its new place before it is removed from the delayed set.
var scriptPromote = redis.NewScript(`
local max_fields = ` + strconv.Itoa(wire.MaxFields) + `
local function check(ok, f, ...)
  if not ok then return nil, 'not MessagePack (' .. tostring(f) .. ')' end
  if select('#', ...) > 0 then return nil, 'more than one MessagePack value' end
  if type(f) ~= 'table' then return nil, 'not a MessagePack array' end
  local n = 0
  for k, v in pairs(f) do
    if type(k) ~= 'number' then return nil, 'a MessagePack map, not an array' end
    if type(v) ~= 'string' and type(v) ~= 'number' then return nil, 'an element of type ' .. type(v) .. ', not a string' end
    n = n + 1
    if n > 2 * max_fields then return nil, 'more than ' .. max_fields .. ' fields' end
  end
  if n == 0 or n % 2 ~= 0 or #f ~= n then return nil, n .. ' elements, not field/value pairs' end
  return f
end
local dead = {}
local due = redis.call('ZRANGE', KEYS[2], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
for _, tok in ipairs(due) do
  local data = redis.call('HGET', KEYS[3], tok)
  if data then
    local f, why = check(pcall(cmsgpack.unpack, data))
    if f then
      local sid = redis.call('XADD', KEYS[1], '*', unpack(f))
      for i = 1, #f - 1, 2 do
        if f[i] == 'jid' then redis.call('HSET', KEYS[5], f[i + 1], 's:' .. sid) break end
      end
    else
      local dl = {'dl_queue', ARGV[3], 'dl_id', tok, 'dl_reason', ARGV[5],
        'dl_error', 'the delayed job cannot be moved into the stream: its data is ' .. why,
        'dl_attempts', '0', 'dl_first_failed', ARGV[1], 'dl_failed', ARGV[1], 'data', data}
      if tonumber(ARGV[4]) > 0 then
        redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[4], '*', unpack(dl))
      else
        redis.call('XADD', KEYS[4], '*', unpack(dl))
      end
      dead[#dead + 1] = tok
    end
    redis.call('HDEL', KEYS[3], tok)
  end
  redis.call('ZREM', KEYS[2], tok)
end
return {#due, dead}
`)

// Promote runs scriptPromote: it moves up to limit jobs due at nowMillis
// into the stream and returns how many due jobs it handled, and the
// delayed-set IDs of those it dead-lettered (with reason) because their data
// was corrupt.
func Promote(ctx context.Context, c redis.Scripter, k Keys, queue string, nowMillis int64, limit int, dlCap int64, reason string) (int, []string, error) {
	var res []any
	err := Redo(ctx, c, func() (err error) {
		res, err = scriptPromote.Run(ctx, c, []string{k.Stream, k.Delayed, k.DelayedJobs, k.Dead, k.Trail}, nowMillis, limit, queue, dlCap, reason).Slice()
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	if len(res) != 2 {
		return 0, nil, fmt.Errorf("unexpected promote reply with %d elements", len(res))
	}
	n, _ := res[0].(int64)
	var dead []string
	raw, _ := res[1].([]any)
	for _, v := range raw {
		s, _ := v.(string)
		dead = append(dead, s)
	}
	return int(n), dead, nil
}

// scriptMove settles an attempt by writing the job again as a new copy:
// into the delayed set when it is due later (a retry, a postponement), or
// straight back into the stream (a hand-back, a retry without delay). The
// new copy is written before the old entry is acknowledged and deleted; the
// trail records where the job lives now, and a failed attempt is counted in
// the minute's throughput counters.
//
// KEYS[1] stream, KEYS[2] delayed sorted set, KEYS[3] delayed job hash,
// KEYS[4] trail hash, KEYS[5] the minute's counters; KEYS[6] memo hash
// ARGV[1] group, ARGV[2] consumer, ARGV[3] entry ID, ARGV[4] due time (Unix
// ms; 0: into the stream now), ARGV[5] delayed-set ID, ARGV[6] the job's
// stable ID, ARGV[7] "1" to count a failure, ARGV[8..] field/value
// arguments of the new copy; then the memo token and TTL.
// Returns 1 when moved; 0 when the entry is no longer pending for this
// consumer (another consumer took it over), in which case nothing changed.
// A re-sent call returns what the first returned (the pending check alone
// keeps it from moving anything again, but would say 0).
var scriptMove = redis.NewScript(idempotent(streamLib+statsLib, `
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local at
if tonumber(ARGV[4]) > 0 then
  redis.call('HSET', KEYS[3], ARGV[5], cmsgpack.pack({unpack(ARGV, 8)}))
  redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
  at = 'd:' .. ARGV[5]
else
  at = 's:' .. redis.call('XADD', KEYS[1], '*', unpack(ARGV, 8))
end
redis.call('HSET', KEYS[4], ARGV[6], at)
if ARGV[7] == '1' then count(KEYS[5], 'failed', 1) end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return 1
`))

// Settle is what a settlement records besides moving the job: its stable
// ID (for the trail), whether the attempt counts as a failure in the
// throughput counters, and the minute it happens in.
type Settle struct {
	JobID  string
	Failed bool
	Minute int64 // Unix seconds / 60
}

func (s Settle) failed() string {
	if s.Failed {
		return "1"
	}
	return "0"
}

// Move runs scriptMove. dueMillis 0 puts the copy straight into the stream.
func Move(ctx context.Context, c redis.Scripter, k Keys, group, consumer, id string, dueMillis int64, token string, st Settle, fields []any) (bool, error) {
	args := append([]any{group, consumer, id, dueMillis, token, st.JobID, st.failed()}, fields...)
	cmd, _ := runWrite(ctx, c, scriptMove, k.NewMemo(), Replicas{}, []string{k.Stream, k.Delayed, k.DelayedJobs, k.Trail, k.Stats(st.Minute)}, args)
	n, err := cmd.Int()
	return n == 1, err
}

// scriptDeadLetter moves a job from the stream to the dead-letter stream,
// records it in the trail and the minute's failures, removes its cancel
// request, and releases its unique-key lock.
//
// KEYS[1] stream, KEYS[2] dead-letter stream, KEYS[3] trail hash, KEYS[4]
// the minute's counters, KEYS[5] cancel requests, KEYS[6] (optional) the
// job's unique-key lock; last, the memo hash
// ARGV[1] group, ARGV[2] consumer, ARGV[3] entry ID, ARGV[4] dead-letter cap
// (0: none), ARGV[5] the job's lock token ("" without a lock), ARGV[6] the
// job's stable ID, ARGV[7..] field/value arguments of the dead letter; then
// the memo token and TTL.
// Returns the dead letter's entry ID, or false when the entry is no longer
// pending for this consumer, in which case nothing changed. A re-sent call
// returns what the first returned.
var scriptDeadLetter = redis.NewScript(idempotent(streamLib+statsLib, `
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return false end
local id
local cap = tonumber(ARGV[4])
if cap > 0 then
  id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', cap, '*', unpack(ARGV, 7))
else
  id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 7))
end
redis.call('HSET', KEYS[3], ARGV[6], 'x:' .. id)
count(KEYS[4], 'failed', 1)
redis.call('HDEL', KEYS[5], ARGV[6])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if KEYS[6] then unlock(KEYS[6], ARGV[5]) end
return id
`))

// DeadLetter runs scriptDeadLetter. lock is the job's unique-key lock ("":
// none). It returns "" when the entry is no longer pending for consumer.
func DeadLetter(ctx context.Context, c redis.Scripter, k Keys, group, consumer, id string, dlCap int64, lock, token string, st Settle, fields []any) (string, error) {
	keys := []string{k.Stream, k.Dead, k.Trail, k.Stats(st.Minute), k.Cancel}
	if lock != "" {
		keys = append(keys, lock)
	}
	args := append([]any{group, consumer, id, dlCap, token, st.JobID}, fields...)
	cmd, _ := runWrite(ctx, c, scriptDeadLetter, k.NewMemo(), Replicas{}, keys, args)
	dl, err := cmd.Text()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return dl, err
}

// scriptRequeue moves dead letters back into the stream as fresh jobs (attempt
// counters, failure times, last error and the crashed mark dropped; headers,
// payload, stable ID and error history kept). A dead letter without a jid
// field gets its dl_id as one (the ID of the copy that was dead-lettered).
// The new entry is written and recorded in the trail before the dead letter
// is deleted.
//
// KEYS[1] dead-letter stream, KEYS[2] stream, KEYS[3] trail hash, KEYS[4]
// memo hash
// ARGV: dead-letter entry IDs; then the memo token and TTL.
// Returns an array with the new stream entry ID per argument, or false for a
// dead letter that does not exist. A re-sent call returns what the first
// returned (without the memo it would find the letters gone).
var scriptRequeue = redis.NewScript(idempotent("", `
local out = {}
for i = 1, #ARGV do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #e == 0 then
    out[i] = false
  else
    local f = e[1][2]
    local fields = {}
    local jid, dlid
    for k = 1, #f, 2 do
      local name = f[k]
      if name == 'jid' then jid = f[k + 1] elseif name == 'dl_id' then dlid = f[k + 1] end
      if string.sub(name, 1, 3) ~= 'dl_' and name ~= 'attempt' and name ~= 'ff' and name ~= 'err' and name ~= 'crashed' then
        fields[#fields + 1] = name
        fields[#fields + 1] = f[k + 1]
      end
    end
    if #fields == 0 then fields = {'v', ''} end
    if not jid and dlid and dlid ~= '' then
      jid = dlid
      fields[#fields + 1] = 'jid'
      fields[#fields + 1] = jid
    end
    out[i] = redis.call('XADD', KEYS[2], '*', unpack(fields))
    if jid then redis.call('HSET', KEYS[3], jid, 's:' .. out[i]) end
    redis.call('XDEL', KEYS[1], ARGV[i])
  end
end
return out
`))

// Requeue runs scriptRequeue for ids and returns the new entry IDs ("" for
// a dead letter that does not exist).
func Requeue(ctx context.Context, c redis.Scripter, k Keys, ids []string) ([]string, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	cmd, _ := runWrite(ctx, c, scriptRequeue, k.NewMemo(), Replicas{}, []string{k.Dead, k.Stream, k.Trail}, args)
	res, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(res))
	for i, v := range res {
		out[i], _ = v.(string)
	}
	return out, nil
}

// scriptTouch keeps running jobs' claims fresh.
//
// KEYS[1] stream
// ARGV[1] group, ARGV[2] consumer, ARGV[3..] entry IDs of jobs the consumer
// holds.
// Resets the idle time of the entries the consumer still owns (XCLAIM with
// min-idle 0 and JUSTID, which does not count a delivery) and returns the IDs
// it no longer owns.
var scriptTouch = redis.NewScript(streamLib + `
local lost = {}
for i = 3, #ARGV do
  if owned(KEYS[1], ARGV[1], ARGV[2], ARGV[i]) then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
`)

// Touch runs scriptTouch and returns the IDs consumer no longer owns.
func Touch(ctx context.Context, c redis.Scripter, k Keys, group, consumer string, ids []string) ([]string, error) {
	args := make([]any, 0, 2+len(ids))
	args = append(args, group, consumer)
	for _, id := range ids {
		args = append(args, id)
	}
	return scriptTouch.Run(ctx, c, []string{k.Stream}, args...).StringSlice()
}

// scriptCharge sets the delivery counter of an entry the consumer owns: the
// count of its handler starts. The engine charges a start this way right
// before it runs a job it took over (XAUTOCLAIM ... JUSTID does not count
// one), and takes back the charge of a read job that has to wait.
//
// KEYS[1] stream
// ARGV[1] group, ARGV[2] consumer, ARGV[3] entry ID, ARGV[4] the count
// Returns 1 when set, 0 when the entry is no longer pending for consumer.
var scriptCharge = redis.NewScript(streamLib + `
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', ARGV[4], 'JUSTID')
return 1
`)

// Charge runs scriptCharge.
func Charge(ctx context.Context, c redis.Scripter, k Keys, group, consumer, id string, count int) (bool, error) {
	n, err := scriptCharge.Run(ctx, c, []string{k.Stream}, group, consumer, id, count).Int()
	return n == 1, err
}

// scriptReclaim takes over entries idle for at least a minimum time (their
// consumer died, hung or lost Redis) without counting a delivery
// (XAUTOCLAIM ... JUSTID): a start is counted only when the job runs. The
// claim is remembered under a token, so a call re-sent after a lost reply
// returns the same entries instead of taking more.
//
// KEYS[1] stream, KEYS[2] the consumer's claims memo
// ARGV[1] group, ARGV[2] consumer, ARGV[3] min idle (ms), ARGV[4] cursor,
// ARGV[5] count, ARGV[6] token, ARGV[7] memo TTL (ms)
// Returns {next cursor, {IDs whose data was deleted}, ID, delivery counter,
// fields, ID, ...}.
var scriptReclaim = redis.NewScript(streamLib + `
local ids, nextc, deleted
if redis.call('HGET', KEYS[2], 'token') == ARGV[6] then
  nextc = redis.call('HGET', KEYS[2], 'next')
  ids = cmsgpack.unpack(redis.call('HGET', KEYS[2], 'ids'))
  deleted = cmsgpack.unpack(redis.call('HGET', KEYS[2], 'deleted'))
else
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5], 'JUSTID')
  nextc, ids, deleted = r[1], r[2], r[3] or {}
  redis.call('HSET', KEYS[2], 'token', ARGV[6], 'next', nextc, 'ids', cmsgpack.pack(ids), 'deleted', cmsgpack.pack(deleted))
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
end
local out = {nextc, deleted}
claimed(KEYS[1], ARGV[1], ARGV[2], ids, out, deleted)
return out
`)

// Claimed is an entry taken over by [Reclaim] or [Adopt].
type Claimed struct {
	ID     string
	Count  int // its delivery counter: handler starts charged to this copy
	Fields map[string]any
}

// Reclaim runs scriptReclaim.
func Reclaim(ctx context.Context, c redis.Scripter, k Keys, group, consumer string, minIdleMillis int64, cursor string, count int64, token string, memoMillis int64) (next string, jobs []Claimed, deleted []string, err error) {
	res, err := scriptReclaim.Run(ctx, c, []string{k.Stream, k.Claims(consumer)},
		group, consumer, minIdleMillis, cursor, count, token, memoMillis).Slice()
	if err != nil {
		return cursor, nil, nil, err
	}
	return parseClaimed(res)
}

// scriptAdopt takes back entries that were delivered to the consumer by a
// read whose reply never arrived (the connection broke after Redis sent it,
// and the client re-sent the read): they are pending for the consumer, which
// never saw them. Their handlers never started, so their delivery counters
// go back to 0.
//
// KEYS[1] stream
// ARGV[1] group, ARGV[2] consumer, ARGV[3..] entry IDs
// Returns as scriptReclaim, with cursor "0-0", for the IDs pending for
// consumer.
var scriptAdopt = redis.NewScript(streamLib + `
local ids, deleted = {}, {}
for i = 3, #ARGV do
  if owned(KEYS[1], ARGV[1], ARGV[2], ARGV[i]) then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'RETRYCOUNT', 0, 'JUSTID')
    ids[#ids + 1] = ARGV[i]
  end
end
local out = {'0-0', deleted}
claimed(KEYS[1], ARGV[1], ARGV[2], ids, out, deleted)
return out
`)

// Adopt runs scriptAdopt.
func Adopt(ctx context.Context, c redis.Scripter, k Keys, group, consumer string, ids []string) ([]Claimed, []string, error) {
	args := make([]any, 0, 2+len(ids))
	args = append(args, group, consumer)
	for _, id := range ids {
		args = append(args, id)
	}
	res, err := scriptAdopt.Run(ctx, c, []string{k.Stream}, args...).Slice()
	if err != nil {
		return nil, nil, err
	}
	_, jobs, deleted, err := parseClaimed(res)
	return jobs, deleted, err
}

// parseClaimed decodes {cursor, {deleted}, id, count, fields, ...}.
func parseClaimed(res []any) (next string, jobs []Claimed, deleted []string, err error) {
	if len(res) < 2 || (len(res)-2)%3 != 0 {
		return "0-0", nil, nil, fmt.Errorf("unexpected claim reply with %d elements", len(res))
	}
	next, _ = res[0].(string)
	if ids, ok := res[1].([]any); ok {
		for _, d := range ids {
			if s, ok := d.(string); ok {
				deleted = append(deleted, s)
			}
		}
	}
	for i := 2; i+2 < len(res); i += 3 {
		id, _ := res[i].(string)
		n, _ := res[i+1].(int64)
		jobs = append(jobs, Claimed{ID: id, Count: int(n), Fields: fieldMap(res[i+2])})
	}
	return next, jobs, deleted, nil
}

// fieldMap turns a reply's flat field/value array (or RESP3 map) into a map.
func fieldMap(v any) map[string]any {
	switch kv := v.(type) {
	case []any:
		m := make(map[string]any, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			m[k] = kv[i+1]
		}
		return m
	case map[any]any:
		m := make(map[string]any, len(kv))
		for k, v := range kv {
			s, _ := k.(string)
			m[s] = v
		}
		return m
	}
	return nil
}

// scriptPrune deletes departed consumers from a group: those idle for at
// least a threshold that own no pending entry. Checking and deleting in one
// script means a consumer that owns a job is never deleted (deleting it
// would drop its entries from the pending list: jobs would vanish).
//
// KEYS[1] stream
// ARGV[1] group, ARGV[2] idle threshold (ms), ARGV[3] the calling
// consumer's name, never deleted
// Returns the names of the deleted consumers.
var scriptPrune = redis.NewScript(`
local gone = {}
local idle = tonumber(ARGV[2])
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local name, pending, cidle
  for k = 1, #c, 2 do
    if c[k] == 'name' then name = c[k + 1]
    elseif c[k] == 'pending' then pending = c[k + 1]
    elseif c[k] == 'idle' then cidle = c[k + 1]
    end
  end
  if name ~= ARGV[3] and pending == 0 and cidle >= idle then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], name)
    gone[#gone + 1] = name
  end
end
return gone
`)

// Prune runs scriptPrune.
func Prune(ctx context.Context, c redis.Scripter, k Keys, group string, idleMillis int64, self string) ([]string, error) {
	return scriptPrune.Run(ctx, c, []string{k.Stream}, group, idleMillis, self).StringSlice()
}

// scriptDelayedKey reads the unique key of a delayed job.
//
// KEYS[1] delayed job hash
// ARGV[1] the job's delayed-set ID
// Returns {unique key, lock token} ("" and "" for a job without one), or
// false if the job is not in the delayed set.
var scriptDelayedKey = redis.NewScript(`
local data = redis.call('HGET', KEYS[1], ARGV[1])
if not data then return false end
local f = cmsgpack.unpack(data)
local key, tok = '', ''
for i = 1, #f - 1, 2 do
  if f[i] == 'key' then key = f[i + 1] elseif f[i] == 'kt' then tok = f[i + 1] end
end
return {key, tok}
`)

// DelayedKey runs scriptDelayedKey; found is false when the job is not in
// the delayed set.
func DelayedKey(ctx context.Context, c redis.Scripter, k Keys, id string) (key, token string, found bool, err error) {
	res, err := scriptDelayedKey.Run(ctx, c, []string{k.DelayedJobs}, id).StringSlice()
	if errors.Is(err, redis.Nil) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	if len(res) != 2 {
		return "", "", false, fmt.Errorf("unexpected reply %q", res)
	}
	return res[0], res[1], true, nil
}

// scriptCancel removes a job from the delayed set before it is due and
// releases its unique-key lock.
//
// KEYS[1] delayed sorted set, KEYS[2] delayed job hash, KEYS[3] (optional)
// the job's unique-key lock; last, the memo hash
// ARGV[1] the job's delayed-set ID, ARGV[2] its lock token (with KEYS[3]);
// then the memo token and TTL
// Returns 1 if the job was removed, 0 if it was not there (already moved
// into the stream, or unknown); the lock is only released on 1. A re-sent
// call returns what the first returned.
var scriptCancel = redis.NewScript(idempotent(streamLib, `
local n = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if n == 1 and KEYS[3] then unlock(KEYS[3], ARGV[2]) end
return n
`))

// Cancel runs scriptCancel; lock is the job's unique-key lock ("": none).
func Cancel(ctx context.Context, c redis.Scripter, k Keys, id, lock, token string) (bool, error) {
	keys := []string{k.Delayed, k.DelayedJobs}
	if lock != "" {
		keys = append(keys, lock)
	}
	cmd, _ := runWrite(ctx, c, scriptCancel, k.NewMemo(), Replicas{}, keys, []any{id, token})
	n, err := cmd.Int()
	return n == 1, err
}

// scriptEnqueueUnique enqueues one job under a unique-key lock.
//
// KEYS[1] stream, KEYS[2] lock key, KEYS[3] delayed sorted set, KEYS[4]
// delayed job hash, KEYS[5] memo hash
// ARGV[1] cap (0 or less: none), ARGV[2] lock TTL (ms), ARGV[3] lock token,
// ARGV[4] due time (Unix ms; 0 = enqueue into the stream now), ARGV[5]
// delayed-set ID (when due > 0), ARGV[6..] field/value arguments of the
// job; then the memo token and TTL.
// Returns {1, job ID} when enqueued, {0, existing job ID} when the lock is
// held by another job, or a QUEUEFULL error reply. A re-sent call returns
// what the first returned: its own job, not a duplicate of it (even when
// that job already ran and released the key).
var scriptEnqueueUnique = redis.NewScript(idempotent(streamLib, `
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0, redis.call('HGET', KEYS[2], 'id') or ''}
end
local id
if tonumber(ARGV[4]) > 0 then
  id = ARGV[5]
  redis.call('HSET', KEYS[4], id, cmsgpack.pack({unpack(ARGV, 6)}))
  redis.call('ZADD', KEYS[3], ARGV[4], id)
else
  local full = no_room(KEYS[1], tonumber(ARGV[1]), 1)
  if full then return redis.error_reply(full) end
  id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 6))
end
redis.call('HSET', KEYS[2], 'token', ARGV[3], 'id', id)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {1, id}
`))

// EnqueueUnique runs scriptEnqueueUnique; args are ARGV from ARGV[1] on. It
// reports whether the job was enqueued and its ID (the existing job's when
// the key is taken). A refusal wraps [ErrQueueFull].
//
// A write that rep's replicas did not acknowledge returns its result and
// a [*streamqtype.NotReplicatedError].
func EnqueueUnique(ctx context.Context, c redis.Scripter, k Keys, lock string, m Memo, rep Replicas, args []any) (bool, string, error) {
	cmd, werr := runWrite(ctx, c, scriptEnqueueUnique, m, rep, []string{k.Stream, lock, k.Delayed, k.DelayedJobs}, args)
	res, err := cmd.Slice()
	if err != nil {
		return false, "", Translate(err)
	}
	if len(res) != 2 {
		return false, "", fmt.Errorf("unexpected reply with %d elements", len(res))
	}
	ok, _ := res[0].(int64)
	id, _ := res[1].(string)
	return ok == 1, id, werr
}

// scriptAck acknowledges finished jobs, forgets the trail of those that
// were moved (retried or requeued copies), and releases their unique-key
// locks.
//
// KEYS[1] stream, KEYS[2] trail hash, KEYS[3..] unique-key locks of some of
// the jobs
// ARGV[1] group, ARGV[2] number of entry IDs n, ARGV[3] number of stable
// IDs m; then n entry IDs, m stable IDs of moved jobs, and one lock token
// per lock key, in the same order.
// Returns the number of entries acknowledged.
var scriptAck = redis.NewScript(streamLib + `
local n, m = tonumber(ARGV[2]), tonumber(ARGV[3])
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 4, 3 + n))
if m > 0 then redis.call('HDEL', KEYS[2], unpack(ARGV, 4 + n, 3 + n + m)) end
for i = 3, #KEYS do unlock(KEYS[i], ARGV[n + m + i + 1]) end
return acked
`)

// Ack acknowledges ids in one XACK, or, when some of the jobs hold
// unique-key locks (locks[i] and tokens[i]) or were moved (their stable IDs
// jids, whose trail is forgotten), in one script that also releases the
// locks and forgets the trail. Jobs that were never moved cost nothing
// more than the XACK.
func Ack(ctx context.Context, c redis.UniversalClient, k Keys, group string, ids, jids, locks, tokens []string) error {
	if len(locks) == 0 && len(jids) == 0 {
		return c.XAck(ctx, k.Stream, group, ids...).Err()
	}
	keys := make([]string, 0, 2+len(locks))
	keys = append(keys, k.Stream, k.Trail)
	keys = append(keys, locks...)
	args := make([]any, 0, 3+len(ids)+len(jids)+len(tokens))
	args = append(args, group, len(ids), len(jids))
	for _, id := range ids {
		args = append(args, id)
	}
	for _, id := range jids {
		args = append(args, id)
	}
	for _, t := range tokens {
		args = append(args, t)
	}
	return scriptAck.Run(ctx, c, keys, args...).Err()
}
