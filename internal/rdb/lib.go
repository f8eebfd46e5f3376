package rdb

// streamLib holds Lua helpers prepended to the stream scripts that need them.
const streamLib = `
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

-- pending returns the delivery counter of entry id if it is pending for
-- consumer in group, else nil.
local function pending(stream, group, consumer, id)
  local p = redis.call('XPENDING', stream, group, id, id, 1, consumer)
  if #p == 0 then return nil end
  return p[1][4]
end

-- owned reports whether entry id is pending for consumer in group.
local function owned(stream, group, consumer, id)
  return pending(stream, group, consumer, id) ~= nil
end

-- claimed appends id, its delivery counter and its fields to out, for each
-- id pending for consumer; ids whose data is gone go to deleted.
local function claimed(stream, group, consumer, ids, out, deleted)
  for _, id in ipairs(ids) do
    local n = pending(stream, group, consumer, id)
    if n then
      local e = redis.call('XRANGE', stream, id, id)
      if #e == 0 then
        deleted[#deleted + 1] = id
      else
        out[#out + 1] = id
        out[#out + 1] = n
        out[#out + 1] = e[1][2]
      end
    end
  end
end
`
