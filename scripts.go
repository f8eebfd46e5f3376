package streamq

import "github.com/redis/go-redis/v9"

// All Lua scripts of the root package live here. Every script touches only
// keys of one queue (one hash tag), declared in KEYS, so they run on Redis
// Cluster. Each script is atomic: a crash between two of its commands is
// impossible, which is what makes every move of a job lose nothing and
// duplicate nothing.

// luaLib holds helpers prepended to the scripts that need them.
const luaLib = `
local function id_lt(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if #ams ~= #bms then return #ams < #bms end
  if ams ~= bms then return ams < bms end
  if #aseq ~= #bseq then return #aseq < #bseq end
  return aseq < bseq
end

-- group_states returns the state of every consumer group of stream: its
-- name, last delivered ID, pending count, oldest pending ID (nil when none)
-- and lag (entries not yet delivered; false when Redis cannot tell).
local function group_states(stream)
  local out = {}
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local s = {lag = false}
    for k = 1, #g, 2 do
      local f = g[k]
      if f == 'name' then s.name = g[k + 1]
      elseif f == 'last-delivered-id' then s.last = g[k + 1]
      elseif f == 'lag' then s.lag = g[k + 1]
      end
    end
    local p = redis.call('XPENDING', stream, s.name)
    s.pending = p[1]
    if p[1] > 0 then s.oldest = p[2] end
    out[#out + 1] = s
  end
  return out
end

-- trim_point returns the oldest entry some group has not acknowledged
-- (pending, or the first not yet delivered): everything older is
-- acknowledged history.
local function trim_point(states)
  local minid = nil
  for _, s in ipairs(states) do
    local cand = s.oldest or s.last
    if minid == nil or id_lt(cand, minid) then minid = cand end
  end
  return minid
end

-- safe_trim deletes entries older than the oldest entry that some group has
-- not acknowledged. It never trims a stream without groups. Returns the
-- number of entries deleted.
local function safe_trim(stream, approx)
  if redis.call('EXISTS', stream) == 0 then return 0 end
  local states = group_states(stream)
  if #states == 0 then return 0 end
  local minid = trim_point(states)
  if approx then
    return redis.call('XTRIM', stream, 'MINID', '~', minid)
  end
  return redis.call('XTRIM', stream, 'MINID', minid)
end

-- unacked returns the most entries one group has not acknowledged (pending
-- plus not yet delivered), or nil when Redis cannot tell.
local function unacked(states)
  local most = 0
  for _, s in ipairs(states) do
    if not s.lag then return nil end
    local u = s.pending + tonumber(s.lag)
    if u > most then most = u end
  end
  return most
end

-- acked reports whether every group has acknowledged entry id.
local function acked(stream, states, id)
  for _, s in ipairs(states) do
    if id_lt(s.last, id) then return false end
    if s.oldest and not id_lt(id, s.oldest) and
       #redis.call('XPENDING', stream, s.name, id, id, 1) > 0 then
      return false
    end
  end
  return true
end

-- drop_acked deletes up to want acknowledged entries from the head of the
-- stream, looking at no more than limit entries. It frees acknowledged
-- history that MINID trimming cannot reach because an older entry is still
-- pending (a long job). Returns the number deleted.
local function drop_acked(stream, states, want, limit)
  local dropped = 0
  for _, e in ipairs(redis.call('XRANGE', stream, '-', '+', 'COUNT', limit)) do
    if dropped >= want then break end
    if acked(stream, states, e[1]) then
      redis.call('XDEL', stream, e[1])
      dropped = dropped + 1
    end
  end
  return dropped
end

-- no_room returns nil when n more jobs fit under cap, else the QUEUEFULL
-- error text. The cap counts the jobs some group has not acknowledged;
-- acknowledged history is trimmed to make room (XTRIM MINID below the oldest
-- unacknowledged entry, and XDEL of acknowledged entries behind an older
-- pending one), never an unacknowledged entry.
local function no_room(stream, cap, n)
  if cap <= 0 then return nil end
  local len = redis.call('XLEN', stream)
  if len + n <= cap then return nil end
  local states = group_states(stream)
  if #states == 0 then
    return 'QUEUEFULL stream length ' .. len .. ' without consumer groups, cap ' .. cap .. ', batch of ' .. n
  end
  local minid = trim_point(states)
  redis.call('XTRIM', stream, 'MINID', '~', minid)
  len = redis.call('XLEN', stream)
  if len + n > cap then
    redis.call('XTRIM', stream, 'MINID', minid)
    len = redis.call('XLEN', stream)
  end
  if len + n <= cap then return nil end
  local u = unacked(states)
  if u == nil then u = len end
  if u + n > cap then
    return 'QUEUEFULL ' .. u .. ' unacknowledged jobs, cap ' .. cap .. ', batch of ' .. n
  end
  local excess = len + n - cap
  drop_acked(stream, states, excess, 2 * excess + 100)
  return nil
end

-- unlock deletes a unique-key lock if it still holds token: a job whose lock
-- expired and was taken by a newer job must not release the newer lock.
local function unlock(lock, token)
  if redis.call('HGET', lock, 'token') == token then redis.call('DEL', lock) end
end

-- owned reports whether entry id is pending for consumer in group.
local function owned(stream, group, consumer, id)
  return #redis.call('XPENDING', stream, group, id, id, 1, consumer) > 0
end
`

// scriptEnqueue adds jobs to the stream unless the cap would be exceeded.
//
// KEYS[1] stream
// ARGV[1] cap (0 or less: none); ARGV[2] number of jobs; then for each job:
// its field/value count n followed by n field/value arguments.
// Returns the array of new entry IDs, or an error reply starting with
// "QUEUEFULL" when nothing was added because the cap was reached.
var scriptEnqueue = redis.NewScript(luaLib + `
local stream = KEYS[1]
local njobs = tonumber(ARGV[2])
local full = no_room(stream, tonumber(ARGV[1]), njobs)
if full then return redis.error_reply(full) end
local ids = {}
local i = 3
for j = 1, njobs do
  local n = tonumber(ARGV[i])
  ids[j] = redis.call('XADD', stream, '*', unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return ids
`)

// scriptTrim trims acknowledged history (exactly).
//
// KEYS[1] stream
// Returns the number of entries deleted.
var scriptTrim = redis.NewScript(luaLib + `
return safe_trim(KEYS[1], false)
`)

// scriptSchedule stores jobs in the delayed set.
//
// KEYS[1] delayed sorted set, KEYS[2] delayed job hash
// ARGV[1] due time (Unix ms); ARGV[2] number of jobs; then for each job: its
// token, its field/value count n, and n field/value arguments.
// Returns the number of jobs stored.
var scriptSchedule = redis.NewScript(`
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
`)

// scriptPromote moves due jobs from the delayed set into the stream.
//
// KEYS[1] stream, KEYS[2] delayed sorted set, KEYS[3] delayed job hash
// ARGV[1] now (Unix ms); ARGV[2] maximum number of jobs to move
// Returns the number of jobs moved. Many schedulers may run it concurrently:
// a job is moved exactly once.
var scriptPromote = redis.NewScript(`
local due = redis.call('ZRANGE', KEYS[2], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
for _, tok in ipairs(due) do
  local data = redis.call('HGET', KEYS[3], tok)
  if data then
    redis.call('XADD', KEYS[1], '*', unpack(cmsgpack.unpack(data)))
    redis.call('HDEL', KEYS[3], tok)
  end
  redis.call('ZREM', KEYS[2], tok)
end
return #due
`)

// scriptRetry moves a failed job from the stream to the delayed set.
//
// KEYS[1] stream, KEYS[2] delayed sorted set, KEYS[3] delayed job hash
// ARGV[1] group, ARGV[2] consumer, ARGV[3] entry ID, ARGV[4] due time (Unix ms),
// ARGV[5] token, ARGV[6..] field/value arguments of the retried job.
// Returns 1 when moved; 0 when the entry is no longer pending for this
// consumer (another consumer took it over), in which case nothing changed.
var scriptRetry = redis.NewScript(luaLib + `
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[5], cmsgpack.pack({unpack(ARGV, 6)}))
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[5])
return 1
`)

// scriptDeadLetter moves a job from the stream to the dead-letter stream and
// releases its unique-key lock.
//
// KEYS[1] stream, KEYS[2] dead-letter stream, KEYS[3] (optional) the job's
// unique-key lock
// ARGV[1] group, ARGV[2] consumer, ARGV[3] entry ID, ARGV[4] dead-letter cap
// (0: none), ARGV[5] the job's lock token ("" without a lock), ARGV[6..]
// field/value arguments of the dead letter.
// Returns the dead letter's entry ID, or false when the entry is no longer
// pending for this consumer, in which case nothing changed.
var scriptDeadLetter = redis.NewScript(luaLib + `
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return false end
local id
local cap = tonumber(ARGV[4])
if cap > 0 then
  id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', cap, '*', unpack(ARGV, 6))
else
  id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 6))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if KEYS[3] then unlock(KEYS[3], ARGV[5]) end
return id
`)

// scriptRequeue moves dead letters back into the stream as fresh jobs (attempt
// counters, failure times, last error and the crashed mark dropped; headers
// and payload kept).
//
// KEYS[1] dead-letter stream, KEYS[2] stream
// ARGV: dead-letter entry IDs.
// Returns an array with the new stream entry ID per argument, or false for a
// dead letter that does not exist.
var scriptRequeue = redis.NewScript(`
local out = {}
for i = 1, #ARGV do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #e == 0 then
    out[i] = false
  else
    local f = e[1][2]
    local fields = {}
    for k = 1, #f, 2 do
      local name = f[k]
      if string.sub(name, 1, 3) ~= 'dl_' and name ~= 'attempt' and name ~= 'ff' and name ~= 'err' and name ~= 'crashed' then
        fields[#fields + 1] = name
        fields[#fields + 1] = f[k + 1]
      end
    end
    if #fields == 0 then fields = {'v', ''} end
    out[i] = redis.call('XADD', KEYS[2], '*', unpack(fields))
    redis.call('XDEL', KEYS[1], ARGV[i])
  end
end
return out
`)

// scriptTouch keeps running jobs' claims fresh.
//
// KEYS[1] stream
// ARGV[1] group, ARGV[2] consumer, ARGV[3..] entry IDs of running jobs.
// Resets the idle time of the entries the consumer still owns (XCLAIM with
// min-idle 0 and JUSTID, which does not count a delivery) and returns the IDs
// it no longer owns.
var scriptTouch = redis.NewScript(luaLib + `
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

// scriptDeliveries reads the delivery counters of pending entries.
//
// KEYS[1] stream
// ARGV[1] group, ARGV[2..] entry IDs
// Returns one delivery count per entry ID (0 for an entry that is not pending).
var scriptDeliveries = redis.NewScript(`
local out = {}
for i = 2, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p > 0 then out[i - 1] = p[1][4] else out[i - 1] = 0 end
end
return out
`)

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

// scriptCancel removes a job from the delayed set before it is due and
// releases its unique-key lock.
//
// KEYS[1] delayed sorted set, KEYS[2] delayed job hash, KEYS[3] (optional)
// the job's unique-key lock
// ARGV[1] the job's delayed-set ID, ARGV[2] its lock token (with KEYS[3])
// Returns 1 if the job was removed, 0 if it was not there (already moved
// into the stream, or unknown); the lock is only released on 1.
var scriptCancel = redis.NewScript(luaLib + `
local n = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if n == 1 and KEYS[3] then unlock(KEYS[3], ARGV[2]) end
return n
`)

// scriptEnqueueUnique enqueues one job under a unique-key lock.
//
// KEYS[1] stream, KEYS[2] lock key, KEYS[3] delayed sorted set, KEYS[4]
// delayed job hash
// ARGV[1] cap (0 or less: none), ARGV[2] lock TTL (ms), ARGV[3] lock token,
// ARGV[4] due time (Unix ms; 0 = enqueue into the stream now), ARGV[5]
// delayed-set ID (when due > 0), ARGV[6..] field/value arguments of the job.
// Returns {1, job ID} when enqueued, {0, existing job ID} when the lock is
// held by another job, or a QUEUEFULL error reply.
var scriptEnqueueUnique = redis.NewScript(luaLib + `
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
`)

// scriptAck acknowledges finished jobs and releases their unique-key locks.
//
// KEYS[1] stream, KEYS[2..] unique-key locks of some of the jobs
// ARGV[1] group, ARGV[2] number of entry IDs n, ARGV[3..2+n] entry IDs,
// then one lock token per lock key, in the same order.
// Returns the number of entries acknowledged.
var scriptAck = redis.NewScript(luaLib + `
local n = tonumber(ARGV[2])
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 3, 2 + n))
for i = 2, #KEYS do unlock(KEYS[i], ARGV[1 + n + i]) end
return acked
`)
