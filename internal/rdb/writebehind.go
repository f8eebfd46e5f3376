package rdb

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptWrite applies one change to the cache and appends it to the stream.
//
// KEYS[1] the queue's stream
// KEYS[2] the cache key, <prefix>:{<queue>}:cache:<key>
// KEYS[3] the version counter, <prefix>:{<queue>}:wb:version
// KEYS[4] the memo hash (see idempotent)
// ARGV[1] stream cap (0 or less: none), the cap rule of Enqueue (no_room in
// streamLib): at most cap jobs that the group has not acknowledged
// ARGV[2] "set", "hset" or "del"
// ARGV[3] cache TTL in ms for "set" and "hset" (0: no expiry)
// ARGV[4] n, the number of stream entry arguments that follow
// ARGV[5..4+n] field/value arguments of the stream entry (wire format v1);
// the "headers" field must be a non-empty JSON
// object, and "payload" is the value stored by "set"
// ARGV[5+n..] for "hset": the hash's field/value pairs (at least one)
// then the memo token and TTL
//
// Returns the change's version as a decimal string. Errors with "QUEUEFULL
// ..." when the queue is at its cap, before writing anything but the
// trimming of acknowledged history, and with
// "VERSIONCOUNTER ..." when the counter cannot be incremented (not an
// integer, or at 2^63-1) or is not positive after it. The writes are ordered
// so that a command failing half way (which Redis does not roll back) can
// leave at most an unused version number: INCR, then XADD, then the cache
// writes, which
// cannot fail: SET; DEL; or DEL, HSET and PEXPIRE of a key that DEL just
// removed, so it cannot have the wrong type (and once a script has written,
// Redis no longer refuses its writes for maxmemory). HSET gets at most 500
// pairs per call, since Lua's unpack is limited to a few thousand values.
//
// The version goes into the headers as "wb-version" and the server's clock
// in microseconds as "wb-issued": they are appended last to the JSON object,
// so they win over a hook that set the same headers. The version is never a
// Lua number: INCR's reply is one (a double, exact only up to 2^53, and
// formatted as 1e+14 from 10^14 up), so the script reads the counter back
// with GET, whose reply is the exact decimal string, and returns that.
// A re-sent call returns the first call's version and changes nothing: a
// re-sent Set landing after another writer's Set would otherwise make the
// cache and the sink see A, B, A.
var scriptWrite = redis.NewScript(idempotent(streamLib, `
local full = no_room(KEYS[1], tonumber(ARGV[1]), 1)
if full then return redis.error_reply(full) end
local incr = redis.pcall('INCR', KEYS[3])
if type(incr) == 'table' then
  return redis.error_reply('VERSIONCOUNTER ' .. incr.err)
end
local version = redis.call('GET', KEYS[3])
if incr < 1 then
  return redis.error_reply('VERSIONCOUNTER the counter is ' .. version .. ', not positive')
end
local now = redis.call('TIME')
local issued = now[1] .. string.format('%06d', tonumber(now[2]))
local last = 4 + tonumber(ARGV[4])
local fields = {}
local value = ''
for i = 5, last - 1, 2 do
  local name, val = ARGV[i], ARGV[i + 1]
  if name == 'headers' then
    val = string.sub(val, 1, -2) .. ',"wb-version":"' .. version .. '","wb-issued":"' .. issued .. '"}'
  elseif name == 'payload' then
    value = val
  end
  fields[#fields + 1] = name
  fields[#fields + 1] = val
end
redis.call('XADD', KEYS[1], '*', unpack(fields))
local op, ttl = ARGV[2], tonumber(ARGV[3])
if op == 'del' then
  redis.call('DEL', KEYS[2])
elseif op == 'hset' then
  redis.call('DEL', KEYS[2])
  local hargs = {}
  for i = last + 1, #ARGV - 1, 2 do
    hargs[#hargs + 1] = ARGV[i]
    hargs[#hargs + 1] = ARGV[i + 1]
    if #hargs >= 1000 then
      redis.call('HSET', KEYS[2], unpack(hargs))
      hargs = {}
    end
  end
  if #hargs > 0 then
    redis.call('HSET', KEYS[2], unpack(hargs))
  end
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
elseif ttl > 0 then
  redis.call('SET', KEYS[2], value, 'PX', ARGV[3])
else
  redis.call('SET', KEYS[2], value)
end
return version
`))

// scriptEnsureVersion raises the version counter to a floor.
//
// KEYS[1] the version counter, <prefix>:{<queue>}:wb:version
// ARGV[1] the floor: a decimal integer from 0 to 2^63-1 without leading zeros
//
// Returns the counter's value before, as a decimal string ("0" when it was
// missing: INCRBY 0 creates it, and fails on a counter that is not an
// integer). The values are compared as decimal strings, never as Lua
// numbers, which are exact only up to 2^53.
var scriptEnsureVersion = redis.NewScript(`
redis.call('INCRBY', KEYS[1], 0)
local cur, floor = redis.call('GET', KEYS[1]), ARGV[1]
local lower
if string.sub(cur, 1, 1) == '-' then
  lower = true
elseif #cur ~= #floor then
  lower = #cur < #floor
else
  lower = false
  for i = 1, #cur do
    local a, b = string.byte(cur, i), string.byte(floor, i)
    if a ~= b then
      lower = a < b
      break
    end
  end
end
if lower then
  redis.call('SET', KEYS[1], floor)
end
return cur
`)

// WriteParams are one call of scriptWrite: one change of the cache.
type WriteParams struct {
	CacheKey   string        // the cache key
	VersionKey string        // the version counter
	Op         string        // "set", "hset" or "del"
	TTL        time.Duration // the cache entry's TTL for "set" and "hset" (0: none)
	// Fields are the stream entry's wire fields: the "headers" field must
	// be a non-empty JSON object, and "payload" is the value "set" stores.
	Fields []any
	Hash   []any // for "hset": the hash's field/value pairs (at least one)
	// Replicas is what the write waits for (zero: none).
	Replicas Replicas
	Memo     Memo // the call's memo (zero: a fresh one), the same for every send of it
}

// writeArgs returns the KEYS and ARGV of scriptWrite for p, up to the memo.
func (q *Queue) writeArgs(p *WriteParams) ([]string, []any) {
	args := make([]any, 0, 4+len(p.Fields)+len(p.Hash)+2)
	args = append(args, q.maxLen, p.Op, p.TTL.Milliseconds(), len(p.Fields))
	args = append(args, p.Fields...)
	args = append(args, p.Hash...)
	return []string{q.keys.Stream, p.CacheKey, p.VersionKey}, args
}

// Write runs scriptWrite under the queue's cap and returns the version, or
// an error translated: a QUEUEFULL reply wraps [ErrQueueFull]. A write
// that p.Replicas did not acknowledge returns its version and a
// [*streamqtype.NotReplicatedError].
func (q *Queue) Write(ctx context.Context, p *WriteParams) (string, error) {
	keys, args := q.writeArgs(p)
	cmd, werr := q.runWrite(ctx, scriptWrite, q.memoOr(p.Memo), p.Replicas, keys, args)
	v, err := cmd.Text()
	if err != nil {
		return "", Translate(err)
	}
	return v, werr
}

// WriteInTx queues scriptWrite in a MULTI pipeline, as EVAL (a NOSCRIPT
// reply could not be retried in MULTI). p.Replicas is not waited for.
func (q *Queue) WriteInTx(ctx context.Context, pipe redis.Pipeliner, p *WriteParams) *redis.Cmd {
	keys, args := q.writeArgs(p)
	m := q.memoOr(p.Memo)
	return scriptWrite.Eval(ctx, pipe, m.keys(keys...), m.args(args...)...)
}

// IsVersionCounter reports scriptWrite's refusal of a version counter it
// cannot increment, and returns the reason.
func IsVersionCounter(err error) (string, bool) {
	const prefix = "VERSIONCOUNTER "
	if !redis.HasErrorPrefix(err, prefix) {
		return "", false
	}
	s := err.Error()
	return s[len(prefix):], true
}

// EnsureVersionParams are one call of scriptEnsureVersion.
type EnsureVersionParams struct {
	Key   string // the version counter
	Floor int64  // the lowest value it may have after the call
}

// EnsureVersion runs scriptEnsureVersion and returns the counter before. A
// call sent again finds the counter at the floor or above and changes
// nothing (it returns that value as the one before).
func (q *Queue) EnsureVersion(ctx context.Context, p EnsureVersionParams) (int64, error) {
	s, err := scriptEnsureVersion.Run(ctx, q.client, []string{p.Key}, strconv.FormatInt(p.Floor, 10)).Text()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(s, 10, 64)
}
