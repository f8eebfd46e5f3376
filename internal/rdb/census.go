package rdb

// The overview's markers: what lets inspect.Queue.Overview split a queue's
// delayed jobs into scheduled and retrying ones, and its dead letters into
// cancelled jobs and others, with O(1) commands (SCARD, ZCARD) instead of
// reading the jobs. Beside each delayed set lives the set of the
// delayed-set IDs (or priority members) of the jobs that wait for a retry,
// "<delayed>:retrying" ([Keys.Retrying], [PriorityKeys.Retrying]); beside
// the dead-letter stream, the sorted set of the IDs of the cancelled dead
// letters scored by their time (Unix ms), "<dead>:cancelled"
// ([Keys.Cancelled]). The scripts that move jobs into and out of those
// structures keep them in step, in the same script; their keys are derived
// from the structures' own (same hash tag, so the same slot). A marker
// left behind by a removal that does not know them (a dead letter deleted
// by hand) only makes a count too high, never negative: the overview
// bounds each split by the structure's size.

// markLib holds the Lua helpers that keep the markers (timeLib starts with
// it, so every script that moves a delayed job or writes a dead letter has
// them).
const markLib = `
-- mark_retry records job id of delayed set delayed as waiting for a retry
-- when its field/value list f (from index from to index to, or the end)
-- has an attempt above 0 or an err field.
local function mark_retry(delayed, id, f, from, to)
  for k = from, (to or #f) - 1, 2 do
    if (f[k] == 'attempt' and (tonumber(f[k + 1]) or 0) > 0) or f[k] == 'err' then
      redis.call('SADD', delayed .. ':retrying', id)
      return
    end
  end
end

-- unmark_retry forgets job id of delayed set delayed.
local function unmark_retry(delayed, id)
  redis.call('SREM', delayed .. ':retrying', id)
end

-- mark_cancelled records dead letter id of stream dead, with field/value
-- arguments ..., when its dl_reason is "cancelled".
local function mark_cancelled(dead, id, ...)
  local f = {...}
  for k = 1, #f - 1, 2 do
    if f[k] == 'dl_reason' then
      if f[k + 1] == 'cancelled' then
        redis.call('ZADD', dead .. ':cancelled', string.match(id, '^(%d+)'), id)
      end
      return
    end
  end
end

-- forget_trimmed drops the markers of the cancelled dead letters that a
-- trim of stream dead removed: those before its first entry. Bounded: each
-- marker is removed once, and markers of one millisecond are few.
local function forget_trimmed(dead)
  local marks = dead .. ':cancelled'
  if redis.call('EXISTS', marks) == 0 then return end
  local first = redis.call('XRANGE', dead, '-', '+', 'COUNT', 1)
  if #first == 0 then
    redis.call('DEL', marks)
    return
  end
  local ms, seq = string.match(first[1][1], '^(%d+)-(%d+)$')
  redis.call('ZREMRANGEBYSCORE', marks, '-inf', '(' .. ms)
  for _, m in ipairs(redis.call('ZRANGE', marks, ms, ms, 'BYSCORE')) do
    local s = tonumber(string.match(m, '-(%d+)$'))
    if s and s < tonumber(seq) then redis.call('ZREM', marks, m) end
  end
end
`
