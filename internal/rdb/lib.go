package rdb

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// timeLib holds the Lua helpers of due times, which are Redis's clock (TIME),
// never a process's: a worker whose clock is off moves no job early. It
// starts with markLib (the overview's markers).
const timeLib = markLib + `
-- now_ms returns the server's time in Unix milliseconds.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- due_at returns the due time (Unix ms) that spec names: "+<ms>" is that
-- long after the server's time, "<ms>" an absolute time, "0" none.
local function due_at(spec)
  if string.sub(spec, 1, 1) == '+' then return now_ms() + tonumber(string.sub(spec, 2)) end
  return tonumber(spec)
end
`

// streamLib holds Lua helpers prepended to the stream scripts that need them.
const streamLib = timeLib + `
local function id_lt(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if #ams ~= #bms then return #ams < #bms end
  if ams ~= bms then return ams < bms end
  if #aseq ~= #bseq then return #aseq < #bseq end
  return aseq < bseq
end

-- Bounds of the work of one call (no script may block Redis for long):
-- trim_nodes is the most entries one XTRIM MINID ~ frees (whole stream
-- nodes, each freed at once, so it is cheap); trim_budget the most entries
-- one call deletes one by one; scan_budget the most entries it reads to find
-- them, and scan_bytes the most bytes of them (read in pages sized so that
-- one page stays near that bound).
local trim_nodes = 10000
local trim_budget = 1000
-- An enqueue over the cap deletes at most max(enqueue_trim_per_job * n,
-- enqueue_trim_min) entries of history behind a pending entry (see no_room).
local enqueue_trim_per_job, enqueue_trim_min = 4, 64
local scan_budget = 2000
local scan_bytes = 4 * 1024 * 1024

-- group_states returns the state of every consumer group of stream: its
-- name, last delivered ID, pending count, oldest pending ID (nil when none),
-- lag (entries not yet delivered; false when Redis cannot tell) and
-- entries read (false when Redis cannot tell).
local function group_states(stream)
  local out = {}
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local s = {lag = false, read = false}
    for k = 1, #g, 2 do
      local f = g[k]
      if f == 'name' then s.name = g[k + 1]
      elseif f == 'last-delivered-id' then s.last = g[k + 1]
      elseif f == 'lag' then s.lag = g[k + 1]
      elseif f == 'entries-read' then s.read = g[k + 1]
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

-- trim_acked deletes acknowledged history: entries older than the oldest
-- entry that some group has not acknowledged. It never trims a stream
-- without groups. One call frees whole stream nodes (at most trim_nodes
-- entries) or, when no whole node is left to free, the entries of the first
-- node below the trim point (at most one node: stream-node-max-entries,
-- default 100). Returns the number of entries deleted; call it until it
-- returns 0 to trim all of the history.
local function trim_acked(stream)
  if redis.call('EXISTS', stream) == 0 then return 0 end
  local states = group_states(stream)
  if #states == 0 then return 0 end
  local minid = trim_point(states)
  local n = redis.call('XTRIM', stream, 'MINID', '~', minid, 'LIMIT', trim_nodes)
  if n > 0 then return n end
  return redis.call('XTRIM', stream, 'MINID', minid)
end

-- undelivered returns the number of entries group state s has not read yet,
-- or nil when Redis cannot tell. Redis 7.0 reports the lag as nil after an
-- XDEL at or past the group's last delivered ID (the retry and dead-letter
-- scripts delete the entry they settle, which often is the last delivered
-- one); the group's entries-read counter then still tells: entries ever
-- added minus entries read (exact, unless entries not yet read were deleted:
-- then more, never fewer). added is the stream's entries-added counter, or
-- nil when not read yet.
local function undelivered(stream, s, added)
  if s.lag then return tonumber(s.lag), added end
  if not s.read then return nil, added end
  if not added then
    local info = redis.call('XINFO', 'STREAM', stream)
    for k = 1, #info, 2 do
      if info[k] == 'entries-added' then added = tonumber(info[k + 1]) end
    end
    if not added then return nil, added end
  end
  return math.max(added - tonumber(s.read), 0), added
end

-- unacked returns the most entries one group has not acknowledged (pending
-- plus not yet delivered), or nil when Redis cannot tell.
local function unacked(stream, states)
  local most, added = 0, nil
  for _, s in ipairs(states) do
    local u
    u, added = undelivered(stream, s, added)
    if u == nil then return nil end
    u = u + s.pending
    if u > most then most = u end
  end
  return most
end

-- entry_bytes returns the size of a stream entry's fields and values.
local function entry_bytes(e)
  local n = #e[1]
  for _, v in ipairs(e[2]) do n = n + #v end
  return n
end

-- pending_in returns the set of IDs from first to last (inclusive) that are
-- pending in some group.
local function pending_in(stream, states, first, last, count)
  local set = {}
  for _, s in ipairs(states) do
    if s.oldest and not id_lt(last, s.oldest) then
      for _, p in ipairs(redis.call('XPENDING', stream, s.name, first, last, count)) do
        set[p[1]] = true
      end
    end
  end
  return set
end

-- drop_acked deletes up to want entries that every group has acknowledged,
-- oldest first from from ('-' for the start of the stream, or '(' and an
-- ID), reading no more than scan_budget entries and scan_bytes bytes. It
-- frees acknowledged history that MINID trimming cannot reach because an
-- older entry is still pending (a long job). Returns the number deleted and
-- where the next call goes on ('' when it reached the entries some group
-- has not read yet, or the end of the stream).
local function drop_acked(stream, states, want, from)
  local delivered = nil -- the oldest last delivered ID: later entries are unread by some group
  for _, s in ipairs(states) do
    if delivered == nil or id_lt(s.last, delivered) then delivered = s.last end
  end
  local del, seen, bytes, biggest = {}, 0, 0, 1
  local start, count, nextc = from, 1, nil
  while nextc == nil and #del < want and seen < scan_budget and bytes < scan_bytes do
    local page = redis.call('XRANGE', stream, start, '+', 'COUNT', count)
    if #page == 0 then nextc = '' break end
    local pend = pending_in(stream, states, page[1][1], page[#page][1], #page)
    for _, e in ipairs(page) do
      if id_lt(delivered, e[1]) then nextc = '' break end
      if #del == want then break end
      if not pend[e[1]] then del[#del + 1] = e[1] end
      local b = entry_bytes(e)
      bytes = bytes + b
      if b > biggest then biggest = b end
      seen = seen + 1
      start = '(' .. e[1]
    end
    count = math.max(1, math.min(100, scan_budget - seen, math.floor((scan_bytes - bytes) / biggest)))
  end
  local n = 0
  if #del > 0 then n = redis.call('XDEL', stream, unpack(del)) end
  return n, nextc or start
end

-- no_room returns nil when n more jobs fit under cap, else the QUEUEFULL
-- error text. The cap counts the jobs some group has not acknowledged
-- (pending or not yet delivered); acknowledged history is trimmed to keep
-- the stream near the cap (XTRIM MINID below the oldest unacknowledged
-- entry, and XDEL of acknowledged entries behind an older pending one),
-- never an unacknowledged entry. The work is bounded: history beyond what
-- one call may delete stays for later calls (the stream may then hold more
-- than cap entries, all but cap of them acknowledged).
local function no_room(stream, cap, n)
  if cap <= 0 then return nil end
  local len = redis.call('XLEN', stream)
  if len + n <= cap then return nil end
  local states = group_states(stream)
  if #states == 0 then
    return 'QUEUEFULL stream length ' .. len .. ' without consumer groups, cap ' .. cap .. ', batch of ' .. n
  end
  redis.call('XTRIM', stream, 'MINID', '~', trim_point(states), 'LIMIT', trim_nodes)
  len = redis.call('XLEN', stream)
  if len + n <= cap then return nil end
  local want = math.min(len + n - cap, trim_budget)
  local u = unacked(stream, states)
  if u == nil then
    -- Redis cannot tell how many are unacknowledged: count every entry
    -- left after deleting what history this call may.
    len = len - drop_acked(stream, states, want, '-')
    if len + n > cap then
      return 'QUEUEFULL stream length ' .. len .. ' (Redis cannot tell how many are unacknowledged), cap ' .. cap .. ', batch of ' .. n
    end
    return nil
  end
  if u + n > cap then
    return 'QUEUEFULL ' .. u .. ' unacknowledged jobs, cap ' .. cap .. ', batch of ' .. n
  end
  -- The jobs fit: delete a few times what this call adds, not a whole
  -- budget, so that an enqueue on a stream far over its cap (history
  -- behind a long job) costs about what the jobs cost, and the history
  -- shrinks by every call. Queue.Trim and MINID trimming free the rest.
  drop_acked(stream, states, math.min(want, math.max(enqueue_trim_per_job * n, enqueue_trim_min)), '-')
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

// slotProbe starts the Cluster variant of every script that touches keys
// it does not declare: the markers of census.go (<delayed>:retrying,
// <dead>:cancelled) and the flow control's keys (the lanes' lists,
// counters and buckets, named inside the scripts). Redis checks the keys a script declares before it runs it, but
// a key a script derives is checked only when the script touches it: while
// the queue's slot migrates between Cluster masters, a derived key already
// moved (or not yet there) fails that command with the script half done,
// its earlier writes kept (a retry's new copy written, the old entry still
// pending: the job would run twice). So such a script first touches two
// keys of its slot that never exist: Redis refuses that (ASK on the
// source, TRYAGAIN for several missing keys on the target) exactly while
// the slot migrates, and the script then answers TRYAGAIN before writing
// anything, as Redis does for the declared keys; callers wait it out
// (Transient). In a stable slot the probe is one EXISTS of two missing
// keys; outside a Cluster it is not run at all (see probedScript).
const slotProbe = `
if type(redis.pcall('EXISTS', KEYS[1] .. ':~probe:1', KEYS[1] .. ':~probe:2')) == 'table' then
  return redis.error_reply('TRYAGAIN the slot of the queue is migrating between Cluster masters; try again once it has moved')
end
`

// probedScript is a script that touches keys it does not declare, made
// twice: with slotProbe for a queue on a Redis Cluster, and without it
// elsewhere, where no slot migrates and the probe would be work for
// nothing (a queue picks with [Queue.sc]).
type probedScript struct{ plain, cluster *redis.Script }

// newProbed makes the two variants of script src.
func newProbed(src string) probedScript {
	return probedScript{plain: redis.NewScript(src), cluster: redis.NewScript(withProbe(src))}
}

// withProbe returns script src with slotProbe at its start (after its
// shebang line, if any).
func withProbe(src string) string {
	if strings.HasPrefix(src, "#!") {
		i := strings.IndexByte(src, '\n') + 1
		return src[:i] + slotProbe + src[i:]
	}
	return slotProbe + src
}
