package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/wire"
)

// The delayed set: jobs stored to run later (scheduled, or retried), moved
// into the stream when due, or cancelled before.

// scriptSchedule stores jobs in the delayed set.
//
// KEYS[1] delayed sorted set, KEYS[2] delayed job hash, KEYS[3] memo hash
// ARGV[1] due time (see due_at: "+<ms>" after the server's time, or Unix
// ms); ARGV[2] number of jobs; then for each job: its
// token, its field/value count n, and n field/value arguments; then the
// memo token and TTL.
// Returns the number of jobs stored. A re-sent call stores nothing again
// (not even a job that was moved into the stream since).
var scriptSchedule = newProbed(idempotent(timeLib, `
local due = due_at(ARGV[1])
local i = 3
local njobs = tonumber(ARGV[2])
for j = 1, njobs do
  local tok = ARGV[i]
  local n = tonumber(ARGV[i + 1])
  redis.call('HSET', KEYS[2], tok, cmsgpack.pack({unpack(ARGV, i + 2, i + 1 + n)}))
  redis.call('ZADD', KEYS[1], due, tok)
  mark_retry(KEYS[1], tok, ARGV, i + 2, i + 1 + n)
  i = i + n + 2
end
return njobs
`))

// ScheduleParams are one call of scriptSchedule: the jobs, added with Add,
// all due after In by the server's clock, or else at Due.
type ScheduleParams struct {
	// Due is when the jobs are due, unless In is set.
	Due time.Time
	// In is how long after the server's time the jobs are due (0: at Due).
	In time.Duration
	// Replicas is what the write waits for (zero: none).
	Replicas Replicas
	Memo     Memo // the call's memo (zero: a fresh one), the same for every send of it

	n    int
	args []any // room for the due time and n, then per job: its ID, field count and fields
}

// Add adds a job with delayed-set ID id (its stable ID, see [NewDelayedID])
// and wire fields.
func (p *ScheduleParams) Add(id string, fields []any) {
	if p.args == nil {
		p.args = make([]any, 2, 2+3*len(fields))
	}
	p.n++
	p.args = append(append(p.args, id, len(fields)), fields...)
}

// Schedule runs scriptSchedule. A write that p.Replicas did not acknowledge
// returns a [*streamqtype.NotReplicatedError].
func (q *Queue) Schedule(ctx context.Context, p *ScheduleParams) error {
	if p.n == 0 {
		return nil
	}
	args := p.args
	args[0], args[1] = DueArg(p.Due, p.In), p.n
	cmd, werr := q.runWrite(ctx, q.sc(scriptSchedule), q.memoOr(p.Memo), p.Replicas, []string{q.keys.Delayed, q.keys.DelayedJobs}, args)
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
// ARGV[1] "" (the server's time, TIME) or, in tests, the time to promote
// at (Unix ms); ARGV[2] maximum number of jobs to move; ARGV[3]
// queue name; ARGV[4] dead-letter cap (0: none); ARGV[5] dead-letter reason
// Returns {number of due jobs handled (moved, dead-lettered or without
// data), {delayed-set IDs of the jobs dead-lettered}}. Many schedulers may
// run it concurrently: a job is moved exactly once. Each job is written to
// its new place before it is removed from the delayed set.
var scriptPromote = newProbed(timeLib + deadLib + `
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
local now = ARGV[1]
if now == '' then now = tostring(now_ms()) end
local dead = {}
local due = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
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
        'dl_attempts', '0', 'dl_first_failed', now, 'dl_failed', now, 'data', data}
      xadd_capped(KEYS[4], tonumber(ARGV[4]), unpack(dl))
      dead[#dead + 1] = tok
    end
    redis.call('HDEL', KEYS[3], tok)
  end
  redis.call('ZREM', KEYS[2], tok)
  unmark_retry(KEYS[2], tok)
end
return {#due, dead}
`)

// PromoteParams are one call of scriptPromote.
type PromoteParams struct {
	Limit  int    // the most due jobs to move
	Reason string // the dead-letter reason of a job whose data is corrupt
	// At is the time to promote at, for tests that move a call in time
	// (zero: the server's time, as every caller but a test passes).
	At time.Time
}

// Promote runs scriptPromote: it moves up to p.Limit jobs due now (by the
// server's clock) into the stream and returns how many due jobs it handled,
// and the delayed-set IDs of those it dead-lettered (with p.Reason) because
// their data was corrupt. A call sent again moves only what is still due:
// each job is moved once.
func (q *Queue) Promote(ctx context.Context, p PromoteParams) (int, []string, error) {
	k := &q.keys
	now := ""
	if !p.At.IsZero() {
		now = strconv.FormatInt(p.At.UnixMilli(), 10)
	}
	var res []any
	err := q.redo(ctx, func() (err error) {
		res, err = q.sc(scriptPromote).Run(ctx, q.client, []string{k.Stream, k.Delayed, k.DelayedJobs, k.Dead, k.Trail}, now, p.Limit, q.name, q.dlCap, p.Reason).Slice()
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
func (q *Queue) DelayedKey(ctx context.Context, id string) (key, token string, found bool, err error) {
	res, err := scriptDelayedKey.Run(ctx, q.client, []string{q.keys.DelayedJobs}, id).StringSlice()
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

// scriptCancel removes a job from the delayed set before it is due,
// forgets its trail and releases its unique-key lock.
//
// KEYS[1] delayed sorted set, KEYS[2] delayed job hash, KEYS[3] trail hash,
// KEYS[4] (optional) the job's unique-key lock; last, the memo hash
// ARGV[1] the job's delayed-set ID, ARGV[2] its lock token (with KEYS[4]),
// ARGV[3] its stable ID; then the memo token and TTL
// Returns 1 if the job was removed, 0 if it was not there (already moved
// into the stream, or unknown); the lock is only released on 1. A re-sent
// call returns what the first returned.
var scriptCancel = newProbed(idempotent(streamLib, `
local n = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
unmark_retry(KEYS[1], ARGV[1])
if n == 1 then
  if redis.call('HGET', KEYS[3], ARGV[3]) == 'd:' .. ARGV[1] then redis.call('HDEL', KEYS[3], ARGV[3]) end
  if KEYS[4] then unlock(KEYS[4], ARGV[2]) end
end
return n
`))

// CancelParams are one call of scriptCancel.
type CancelParams struct {
	ID    string // the job's delayed-set ID
	JobID string // its stable ID ("": ID)
	Key   string // its unique key ("": none)
	Token string // the lock token of its unique key
	Memo  Memo   // the call's memo (zero: a fresh one), the same for every send of it
}

// Cancel runs scriptCancel and reports whether the job was removed.
func (q *Queue) Cancel(ctx context.Context, p CancelParams) (bool, error) {
	keys := []string{q.keys.Delayed, q.keys.DelayedJobs, q.keys.Trail}
	if p.Key != "" {
		keys = append(keys, q.keys.Unique(p.Key))
	}
	jid := p.JobID
	if jid == "" {
		jid = p.ID
	}
	cmd, _ := q.runWrite(ctx, q.sc(scriptCancel), q.memoOr(p.Memo), Replicas{}, keys, []any{p.ID, p.Token, jid})
	n, err := cmd.Int()
	return n == 1, err
}

// DelayedMember returns the delayed-set ID of the job with stable ID id:
// where the trail says it waits, else id itself (a delayed job's generated
// ID is its delayed-set ID).
func (q *Queue) DelayedMember(ctx context.Context, id string) (string, error) {
	loc, err := q.client.HGet(ctx, q.keys.Trail, id).Result()
	if errors.Is(err, redis.Nil) {
		return id, nil
	}
	if err != nil {
		return "", err
	}
	if m, ok := strings.CutPrefix(loc, TrailDelayed); ok {
		return m, nil
	}
	return id, nil
}
