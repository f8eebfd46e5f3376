package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/wire"
)

// The delayed set: jobs stored to run later (scheduled, or retried), moved
// into the stream when due, or cancelled before.

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
