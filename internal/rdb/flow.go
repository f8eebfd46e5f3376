package rdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Flow control: concurrency caps per queue (global) and per flow key, with
// jobs over a cap waiting aside in Redis until a slot frees (see
// docs/guarantees.md, "Flow control").
//
// A slot is held by a stream entry from its admission until it is settled:
// the read script admits an entry (takes a slot) or parks it in its key's
// wait list; the settle scripts give the slot back and release the next
// waiting job into the stream with the slot taken for it; the sweep gives
// back the slots of entries that are gone (deleted, or settled by a
// consumer that did not know of the limits). A crashed worker's entry keeps
// its slot while it is pending and is run by the consumer that takes it
// over after MinIdle: its slot is never lost and never counted twice.
//
// Keys, all under the queue's hash tag (the scripts derive them from the
// stream's key, since the wait lists they visit are only known inside):
//
//	flow:limits  HASH  "global" -> cap of the queue, "cap" -> default cap per
//	                   key, "cap:<key>" -> cap of one key, "rate" -> default
//	                   rate per key (jobs/s), "rate:<key>" -> rate of one key,
//	                   "kind:<kind>" -> cap of one kind, "kkey:<kind>" -> cap
//	                   per key of the jobs of one kind
//	flow:run     HASH  entry ID -> tag of the job: its flow key ("" for a
//	                   job without one), or for a job with a kind NUL kind
//	                   NUL key: the slots taken (HLEN: the queue's running jobs)
//	flow:cnt     HASH  flow key -> slots it holds
//	flow:kcnt    HASH  kind -> slots its jobs hold; NUL kind NUL key -> slots
//	                   the key's jobs of the kind hold
//	flow:ring    LIST  wait lists (lanes) with waiting jobs, in round-robin order
//	flow:w:<lane> LIST the lane's waiting jobs (MessagePack of their fields),
//	                   oldest first. A lane is a flow key, or for the jobs
//	                   of a kind with caps, NUL kind NUL key (its tag).
//	flow:cred    HASH  lane -> jobs it released in its turn at the head
//	                   of the ring (a queue with weights, "w:<key>" in
//	                   flow:limits)
//	flow:sweep   STRING the cursor of the sweep over flow:run
//	flow:adm     STRING the last stream entry admitted or set aside in
//	                   stream order (see scriptFlowRead)
//	flow:tb:<key> HASH the token bucket of a rate-limited key: "t" tokens,
//	                   "at" when they were counted (Unix ms, Redis's clock)
//
// A waiting job is recorded in the trail as "w:<lane>".

// RateLimitedPrefix starts the delayed-set ID of a job that its flow key's
// rate limit delayed: "d-r" and the entry ID it had.
const RateLimitedPrefix = "d-r"

// TrailWaiting prefixes the trail location of a job waiting aside: "w:"
// and its flow key.
const TrailWaiting = "w:"

// Names of the limits hash's fields.
const (
	FlowGlobal     = "global"
	FlowPerKey     = "cap"
	FlowKeyPrefix  = "cap:"
	FlowRate       = "rate"
	FlowRatePrefix = "rate:"
	FlowKindPrefix = "kind:"
	FlowKindKey    = "kkey:"
	FlowWeight     = "w:"
)

// SplitLane returns the kind and the flow key of a wait list's lane (or a
// slot's tag): a flow key, or NUL kind NUL key.
func SplitLane(lane string) (kind, key string) {
	if rest, ok := strings.CutPrefix(lane, "\x00"); ok {
		if kind, key, ok := strings.Cut(rest, "\x00"); ok {
			return kind, key
		}
	}
	return "", lane
}

// Lane returns the lane of the jobs of kind and key when the kind has caps.
func Lane(kind, key string) string {
	if kind == "" {
		return key
	}
	return "\x00" + kind + "\x00" + key
}

// FlowKeys are the keys of a queue's flow control.
type FlowKeys struct {
	Limits, Run, Count, KindCount, Ring, Sweep string
	base                                       string
}

// Wait returns the key of the wait list of flow key k.
func (k FlowKeys) Wait(key string) string { return k.base + "flow:w:" + key }

// Flow returns the keys of the queue's flow control.
func (k Keys) Flow() FlowKeys {
	return FlowKeys{
		Limits:    k.Part("flow:limits"),
		Run:       k.Part("flow:run"),
		Count:     k.Part("flow:cnt"),
		KindCount: k.Part("flow:kcnt"),
		Ring:      k.Part("flow:ring"),
		Sweep:     k.Part("flow:sweep"),
		base:      k.base,
	}
}

// flowLib holds the Lua helpers of flow control. It needs KEYS[1] to be the
// queue's stream, from whose name it derives the other keys.
const flowLib = `
local flow_base = string.sub(KEYS[1], 1, #KEYS[1] - 6) -- KEYS[1] ends with "stream"
local flow_run, flow_cnt, flow_ring = flow_base .. 'flow:run', flow_base .. 'flow:cnt', flow_base .. 'flow:ring'
local flow_kcnt = flow_base .. 'flow:kcnt'
local flow_trail = flow_base .. 'trail'
-- flow_scan bounds the keys of the ring one dispatch visits.
local flow_scan = 32
local function flow_wait(k) return flow_base .. 'flow:w:' .. k end
-- flow_lim holds the limits; flow_has the prefixes ("cap:", "rate:",
-- "kind:", "kkey:", "w:") of the fields it has, so that a queue without
-- limits of single keys builds no field name per job.
local flow_lim, flow_has
local function flow_limits()
  if not flow_lim then
    flow_lim, flow_has = {}, {}
    local l = redis.call('HGETALL', flow_base .. 'flow:limits')
    for i = 1, #l, 2 do
      flow_lim[l[i]] = tonumber(l[i + 1])
      local c = string.find(l[i], ':', 1, true)
      if c then flow_has[string.sub(l[i], 1, c)] = true end
    end
  end
  return flow_lim
end
-- flow_h caches the fields of flow:run and flow:cnt that a call reads or
-- writes: reads go through it (flow_hget, flow_hmget: one HMGET for a
-- batch), writes stay in it until flow_flush writes them with one HSET and
-- one HDEL per hash, so that a batch of jobs costs a few commands instead
-- of a few per job. Every script that takes or gives slots calls
-- flow_flush before it returns (a value false is a field to delete).
-- flow_h.moved counts the slots taken (+) and given back (-) in this call,
-- flow_h.flushed those of them written.
local flow_h = {run = {key = flow_run, v = {}, dirty = {}}, cnt = {key = flow_cnt, v = {}, dirty = {}}, moved = 0, flushed = 0}
local function flow_hget(h, f)
  local v = h.v[f]
  if v == nil then
    v = redis.call('HGET', h.key, f)
    h.v[f] = v
  end
  return v
end
-- flow_hmget caches fields fs of h with one HMGET of those not cached yet.
local function flow_hmget(h, fs)
  local need = {}
  for _, f in ipairs(fs) do
    if h.v[f] == nil then need[#need + 1] = f end
  end
  if #need == 0 then return end
  local r = redis.call('HMGET', h.key, unpack(need))
  for i, f in ipairs(need) do h.v[f] = r[i] end
end
local function flow_hset(h, f, v)
  h.v[f] = v
  h.dirty[f] = true
end
-- flow_cnt_add adds d to the slots of key k (a count of 0 is deleted).
local function flow_cnt_add(k, d)
  local n = tonumber(flow_hget(flow_h.cnt, k) or 0) + d
  if n <= 0 then n = false end
  flow_hset(flow_h.cnt, k, n)
end
local function flow_flush()
  for _, h in ipairs({flow_h.run, flow_h.cnt}) do
    local set, del = {}, {}
    for f in pairs(h.dirty) do
      local v = h.v[f]
      if v then
        set[#set + 1] = f
        set[#set + 1] = v
      else
        del[#del + 1] = f
      end
    end
    if #set > 0 then redis.call('HSET', h.key, unpack(set)) end
    if #del > 0 then redis.call('HDEL', h.key, unpack(del)) end
    h.dirty = {}
  end
  flow_h.flushed = flow_h.moved
end
-- flow_before is the number of slots taken before this call (HLEN of
-- flow:run), read once per call.
local flow_before
-- flow_global_room returns how many more jobs may run in the queue (1 without a cap).
local function flow_global_room()
  local g = flow_limits()['global']
  if not g then return 1 end
  if not flow_before then flow_before = redis.call('HLEN', flow_run) - flow_h.flushed end
  return g - flow_before - flow_h.moved
end
-- flow_ring_empty is true while the ring is known to be empty in this call
-- (then no wait list holds a job: a lane is in the ring while its list is
-- not empty), nil before the ring was looked at, false after.
local flow_ring_empty
-- flow_waiting reports whether wait list lane holds jobs. It costs nothing
-- while the ring is known to be empty.
local function flow_waiting(lane)
  if flow_ring_empty == nil then flow_ring_empty = redis.call('LLEN', flow_ring) == 0 end
  if flow_ring_empty then return false end
  return redis.call('EXISTS', flow_wait(lane)) == 1
end
-- flow_key_cap returns the cap of key k, or nil when it has none.
local function flow_key_cap(k)
  if k == '' then return nil end
  local l = flow_limits()
  return (flow_has['cap:'] and l['cap:' .. k]) or l['cap']
end
-- flow_key_room returns how many more jobs of key k may run (1 without a cap).
local function flow_key_room(k)
  local c = flow_key_cap(k)
  if not c then return 1 end
  return c - tonumber(flow_hget(flow_h.cnt, k) or 0)
end
-- flow_tag returns the tag of kind c and key k: k for a job without a
-- kind, else NUL kind NUL key (a flow key holds no NUL).
local function flow_tag(c, k)
  if c == '' then return k end
  return '\0' .. c .. '\0' .. k
end
-- flow_split returns the kind and the key of a tag.
local function flow_split(t)
  if string.byte(t, 1) ~= 0 then return '', t end
  local p = string.find(t, '\0', 2, true)
  return string.sub(t, 2, p - 1), string.sub(t, p + 1)
end
-- flow_kinds reports whether the queue has caps per kind.
local function flow_kinds()
  flow_limits()
  return flow_has['kind:'] or flow_has['kkey:'] or false
end
-- flow_lane returns the wait list name of a job of kind c and key k: its
-- key's, or its own per kind and key when its kind has caps (so a kind at
-- its cap holds up no other kind).
local function flow_lane(c, k)
  if c == '' or not flow_kinds() then return k end
  local l = flow_limits()
  if l['kind:' .. c] or l['kkey:' .. c] then return flow_tag(c, k) end
  return k
end
-- flow_kind_room reports whether kind c ("kind:<c>": its cap in all) and
-- key k of kind c ("kkey:<c>": the cap per key of the kind) have room.
local function flow_kind_room(c, k)
  if c == '' or not flow_kinds() then return true end
  local l = flow_limits()
  local g, pk = l['kind:' .. c], l['kkey:' .. c]
  if g and g - tonumber(redis.call('HGET', flow_kcnt, c) or 0) <= 0 then return false end
  if pk and k ~= '' and pk - tonumber(redis.call('HGET', flow_kcnt, flow_tag(c, k)) or 0) <= 0 then return false end
  return true
end
-- flow_room reports whether a job of kind c and key k may start.
local function flow_room(c, k)
  return flow_global_room() > 0 and flow_key_room(k) > 0 and flow_kind_room(c, k)
end
-- flow_take takes a slot for entry id of kind c and key k. A job with a
-- kind counts in flow:kcnt (per kind, and per kind and key) whether or not
-- its kind has caps, so that caps set later are exact at once.
local function flow_take(id, c, k)
  flow_hset(flow_h.run, id, flow_tag(c, k))
  flow_h.moved = flow_h.moved + 1
  flow_cnt_add(k, 1)
  if c ~= '' then
    redis.call('HINCRBY', flow_kcnt, c, 1)
    if k ~= '' then redis.call('HINCRBY', flow_kcnt, flow_tag(c, k), 1) end
  end
end
local function flow_decr(h, f)
  if redis.call('HINCRBY', h, f, -1) <= 0 then redis.call('HDEL', h, f) end
end
-- flow_take_keyed takes a slot for entry id of kind c and key k if key k
-- is under its cap; returns whether it took one. The caller checked every
-- other limit.
local function flow_take_keyed(id, c, k)
  if flow_key_room(k) <= 0 then return false end
  flow_take(id, c, k)
  return true
end
-- flow_give gives back the slot of entry id; returns its key and kind, or
-- nil when it held none.
local function flow_give(id)
  local t = flow_hget(flow_h.run, id)
  if not t then return nil end
  flow_hset(flow_h.run, id, false)
  flow_h.moved = flow_h.moved - 1
  local c, k = flow_split(t)
  flow_cnt_add(k, -1)
  if c ~= '' then
    flow_decr(flow_kcnt, c)
    if k ~= '' then flow_decr(flow_kcnt, t) end
  end
  return k, c
end
local function flow_field(f, name)
  for i = 1, #f, 2 do
    if f[i] == name then return f[i + 1] end
  end
  return nil
end
-- flow_field3 returns the values of fields a, b and c of f (nil when absent).
local function flow_field3(f, a, b, c)
  local va, vb, vc
  for i = 1, #f, 2 do
    local n = f[i]
    if n == a then va = f[i + 1] elseif n == b then vb = f[i + 1] elseif n == c then vc = f[i + 1] end
  end
  return va, vb, vc
end
-- flow_jid returns the stable ID of the job of entry id (fields f), adding
-- it to f when f has none (a first copy's stable ID is its entry ID).
local function flow_jid(id, f)
  local jid = flow_field(f, 'jid')
  if not jid then
    jid = id
    f[#f + 1] = 'jid'
    f[#f + 1] = id
  end
  return jid
end
-- flow_push appends packed job p to wait list lane, and records job jid
-- there in the trail.
local function flow_push(lane, jid, p)
  if redis.call('RPUSH', flow_wait(lane), p) == 1 then
    redis.call('RPUSH', flow_ring, lane)
    flow_ring_empty = false
  end
  redis.call('HSET', flow_trail, jid, 'w:' .. lane)
end
-- flow_park appends the job of entry id with fields f to wait list lane
-- (with its stable ID) and records it in the trail. The caller
-- acknowledges and deletes the entry.
local function flow_park(id, lane, f)
  local jid = flow_jid(id, f)
  flow_push(lane, jid, cmsgpack.pack(f))
end
-- flow_rate_wait takes a token of key k's rate limit ("rate:<k>", else
-- "rate": jobs per second, burst max(1, rate)) and returns 0, or returns
-- how many ms until a token is due. The bucket, flow:tb:<k>, is a hash of
-- tokens and the time they were counted, by Redis's clock.
local flow_now
-- flow_rate returns the rate limit of key k (jobs/s), or nil when it has none.
local function flow_rate(k)
  if k == '' then return nil end
  local l = flow_limits()
  local r = (flow_has['rate:'] and l['rate:' .. k]) or l['rate']
  if not r or r <= 0 then return nil end
  return r
end
local function flow_rate_wait(k)
  local r = flow_rate(k)
  if not r then return 0 end
  if not flow_now then
    local t = redis.call('TIME')
    flow_now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local burst = math.max(1, r)
  local key = flow_base .. 'flow:tb:' .. k
  local b = redis.call('HMGET', key, 't', 'at')
  local tokens, at = tonumber(b[1]) or burst, tonumber(b[2]) or flow_now
  tokens = math.min(burst, tokens + math.max(flow_now - at, 0) * r / 1000)
  local wait = 0
  if tokens >= 1 then tokens = tokens - 1 else wait = math.ceil((1 - tokens) * 1000 / r) end
  redis.call('HSET', key, 't', tostring(tokens), 'at', flow_now)
  redis.call('PEXPIRE', key, math.ceil(burst * 1000 / r) + 1000)
  return wait
end
-- flow_delay moves the job of entry id (fields f) into the delayed set, due
-- after wait ms (uncharged: a rate-limited job). The caller acknowledges
-- and deletes the entry.
local function flow_delay(id, f, wait)
  local jid = flow_jid(id, f)
  local did = 'd-r' .. id
  redis.call('HSET', flow_base .. 'delayed:jobs', did, cmsgpack.pack(f))
  redis.call('ZADD', flow_base .. 'delayed', flow_now + wait, did)
  mark_retry(flow_base .. 'delayed', did, f, 1)
  redis.call('HSET', flow_trail, jid, 'd:' .. did)
end
-- flow_try takes a slot for entry id of kind c and key k if every limit
-- allows and no job waits ahead of it in its lane, and returns true; else
-- it returns false and the lane to park it in, or, when its key's rate
-- limit holds it, nil and the ms until its token is due.
local function flow_try(id, c, k)
  local lane = flow_lane(c, k)
  if flow_global_room() > 0 and flow_kind_room(c, k) and not flow_waiting(lane) then
    if not flow_rate(k) then
      if flow_take_keyed(id, c, k) then return true end
    elseif flow_key_room(k) > 0 then
      local wait = flow_rate_wait(k)
      if wait > 0 then return false, nil, wait end
      flow_take(id, c, k)
      return true
    end
  end
  return false, lane
end
-- flow_aside parks the job of entry id (fields f) in lane, or when lane is
-- nil delays it by wait ms (see flow_try). The caller acknowledges and
-- deletes the entry.
local function flow_aside(id, f, lane, wait)
  if lane then flow_park(id, lane, f) else flow_delay(id, f, wait) end
end
-- flow_admit takes a slot for entry id (fields f) and returns true, or
-- parks it (or, when its key is rate-limited, delays it until its token is
-- due) and returns false. An entry that holds a slot keeps it: one
-- released from a wait list (marked with the field fs = "1"), or one taken
-- over from a crashed worker (fresh false: it may have taken its slot when
-- it was first read). An entry with
-- more fields than a job may have is admitted without a slot: the engine
-- dead-letters it as malformed.
local function flow_admit(id, f, fresh)
  if #f > 2000 then return true end
  local k, slot, c = flow_field3(f, 'fk', 'fs', 'kind')
  k, c = k or '', c or ''
  if slot == '1' or (not fresh and flow_hget(flow_h.run, id)) then return true end
  local ok, lane, wait = flow_try(id, c, k)
  if not ok then flow_aside(id, f, lane, wait) end
  return ok
end
-- flow_release moves the oldest waiting job of wait list lane into the
-- stream with a slot taken for it; returns false when lane has none. A job
-- that waited in its key's list while its kind gained caps moves to its
-- kind's list instead (and counts as released: the caller's budget bounds
-- the moves too).
local function flow_release(stream, lane)
  local w = flow_wait(lane)
  local p = redis.call('LPOP', w)
  if not p then
    redis.call('LREM', flow_ring, 0, lane)
    return false
  end
  local f = cmsgpack.unpack(p)
  local c, k = flow_split(lane)
  if c == '' then c = flow_field(f, 'kind') or '' end
  local to = flow_lane(c, k)
  if to ~= lane then
    flow_push(to, flow_field(f, 'jid'), p)
  else
    f[#f + 1] = 'fs'
    f[#f + 1] = '1'
    local id = redis.call('XADD', stream, '*', unpack(f))
    flow_take(id, c, k)
    redis.call('HSET', flow_trail, flow_field(f, 'jid'), 's:' .. id)
  end
  if redis.call('LLEN', w) == 0 then redis.call('LREM', flow_ring, 0, lane) end
  return true
end
-- flow_weighted reports whether the queue has weights per key.
local function flow_weighted()
  flow_limits()
  return flow_has['w:'] or false
end
-- flow_turn releases up to budget jobs of lane, the head of the ring, in
-- a queue with weights: a lane keeps the head until it released as many
-- jobs as its key's weight ("w:<key>", else 1) in this turn (counted in
-- flow:cred), or has no room or no job; then the ring rotates. Returns the
-- jobs released.
local function flow_turn(stream, lane, budget)
  local cred = flow_base .. 'flow:cred'
  local c, k = flow_split(lane)
  local w = flow_limits()['w:' .. k] or 1
  local used = tonumber(redis.call('HGET', cred, lane) or 0)
  local n = 0
  while n < budget and used + n < w and flow_room(c, k) and flow_release(stream, lane) do n = n + 1 end
  if redis.call('LINDEX', flow_ring, 0) ~= lane then
    redis.call('HDEL', cred, lane) -- its list emptied: it left the ring
  elseif used + n >= w or n < budget then
    redis.call('HDEL', cred, lane)
    redis.call('LMOVE', flow_ring, flow_ring, 'LEFT', 'RIGHT')
  else
    redis.call('HSET', cred, lane, used + n)
  end
  return n
end
-- flow_dispatch releases up to budget waiting jobs into free slots. After
-- a slot of key hint (and kind hkind) freed in a queue without a global
-- cap, it first releases from the lists of hint (and of hkind and hint);
-- without caps per kind no other list can have gained room. Otherwise it
-- visits up to flow_scan lists of the ring round robin (the ring rotates by
-- one per list visited), releasing from each as many as its room allows.
local function flow_dispatch(stream, hint, budget, hkind)
  local n = 0
  if hint and not flow_limits()['global'] then
    local lanes = {hint}
    if hkind and hkind ~= '' and flow_kinds() then lanes[2] = flow_tag(hkind, hint) end
    for _, lane in ipairs(lanes) do
      if flow_waiting(lane) then
        local c, k = flow_split(lane)
        while n < budget and flow_room(c, k) and flow_release(stream, lane) do n = n + 1 end
      end
    end
    if not flow_kinds() then return n end
  end
  if flow_ring_empty then return n end
  local weighted = flow_weighted()
  local ring = redis.call('LLEN', flow_ring)
  flow_ring_empty = ring == 0
  for _ = 1, math.min(ring, flow_scan) do
    if n >= budget or flow_global_room() <= 0 then break end
    if weighted then
      local lane = redis.call('LINDEX', flow_ring, 0)
      if not lane then break end
      n = n + flow_turn(stream, lane, budget - n)
    else
      local lane = redis.call('LMOVE', flow_ring, flow_ring, 'LEFT', 'RIGHT')
      if not lane then break end
      local c, k = flow_split(lane)
      while n < budget and flow_room(c, k) and flow_release(stream, lane) do n = n + 1 end
    end
  end
  return n
end
-- flow_freed returns how many jobs a slot of kind c can make room for: one
-- of its key and, with caps per kind, one of its kind.
local function flow_freed(c)
  if c ~= '' and flow_kinds() then return 2 end
  return 1
end
-- flow_last_delivered returns the last delivered ID of group, or nil.
local function flow_last_delivered(stream, group)
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local s = {}
    for k = 1, #g, 2 do s[g[k]] = g[k + 1] end
    if s['name'] == group then return s['last-delivered-id'] end
  end
  return nil
end
-- flow_owned returns the set of ids (entry IDs) pending for consumer in
-- group: one XPENDING over the range of ids for the consumer's entries,
-- instead of one per entry. Its reply is bounded; ids after the last entry
-- of a full reply are looked up one by one.
local function flow_owned(stream, group, consumer, ids)
  local set = {}
  if #ids == 0 then return set end
  local lo, hi = ids[1], ids[1]
  for _, id in ipairs(ids) do
    if id_lt(id, lo) then lo = id end
    if id_lt(hi, id) then hi = id end
  end
  local count = 2 * #ids + 256
  local p = redis.call('XPENDING', stream, group, lo, hi, count, consumer)
  for _, e in ipairs(p) do set[e[1]] = true end
  if #p == count then
    local last = p[#p][1]
    for _, id in ipairs(ids) do
      if id_lt(last, id) and owned(stream, group, consumer, id) then set[id] = true end
    end
  end
  return set
end
-- flow_settled gives back the slot of a settled entry and releases the
-- next waiting job into it.
local function flow_settled(stream, id)
  local k, c = flow_give(id)
  if k then flow_dispatch(stream, k, flow_freed(c), c) end
end
`

// withFlow wraps the body of a settle script (whose KEYS[1] is the stream
// and ARGV[3] the settled entry) so that it gives back the entry's slot
// when it settled it (a reply other than 0 or false).
func withFlow(body string) string {
	return "local function settle()\n" + body + "\nend\nlocal r = settle()\n" +
		"if r and r ~= 0 then flow_settled(KEYS[1], ARGV[3]) end\nflow_flush()\nreturn r\n"
}

// scriptFlowRead admits the entries a consumer just read with a plain
// XREADGROUP (outside Lua: a read inside a script costs twice as much, its
// reply being built as Lua tables), given by their IDs, flow keys and
// kinds: each takes a slot, or is parked in its lane's wait list
// (acknowledged and deleted from the stream, uncharged: its attempt field
// is unchanged), or is delayed by its key's rate limit. Only an entry set
// aside is read (XRANGE). An entry that holds a slot already keeps it: a
// slot is never taken twice. When it set entries aside and admitted fewer
// than asked, and no other read came after this one, it reads on in Lua,
// so that a key's backlog is set aside in few calls (see flowReadBudget).
//
// Admission follows stream order across consumers, as per-key order needs
// (with a cap of 1, a key's jobs start in enqueue order): flow:adm holds
// the last entry admitted or set aside. When reads of other consumers
// delivered entries before this read's that are not admitted yet, the
// script admits those first (read with XRANGE, at most the read budget per
// call; when more are left it returns {"later"} and the caller calls
// again); their consumers' calls then find them admitted (they hold a slot)
// or set aside (they do not start).
//
// It admits nothing while the queue is paused, in the same script, so
// that no job it admits starts after a pause ended (a flow read holds no
// start lease): the caller puts the entries back (see scriptAdopt).
//
// KEYS[1] stream, KEYS[2] pause flag
// ARGV[1] group, ARGV[2] consumer, ARGV[3] the most entries to admit,
// ARGV[4] the most entries to read (those given included), ARGV[5] and
// ARGV[6] the first and last entries read, ARGV[7..] per entry read to
// admit: its ID, flow key and kind ("" for none).
// Returns {"paused"} while the queue is paused; {"later"} when it admitted
// entries of other reads and has more of them to admit first; else {{id,
// ...}, id, fields, id, fields, ...}: the IDs of the given entries that
// must not start (set aside, or gone from the stream: the reaper settles
// those), then the entries it read itself and admitted.
var scriptFlowRead = newProbed(streamLib + flowLib + `
if redis.call('EXISTS', KEYS[2]) == 1 then return {'paused'} end
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local want, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
local first, last = ARGV[5], ARGV[6]
local adm = flow_base .. 'flow:adm'
local mark = redis.call('GET', adm)
local aside = {}
local function set_aside()
  flow_flush()
  if #aside > 0 then
    redis.call('XACK', stream, group, unpack(aside))
    redis.call('XDEL', stream, unpack(aside))
    aside = {}
  end
end
-- Entries of other reads before this one, not admitted yet: after the
-- mark, or on the first call, from the oldest pending entry.
local from
if mark then
  if id_lt(mark, first) then from = '(' .. mark end
else
  local p = redis.call('XPENDING', stream, group)
  if p[1] > 0 and id_lt(p[2], first) then from = p[2] end
end
if from then
  local r = redis.call('XRANGE', stream, from, '(' .. first, 'COUNT', budget)
  for _, e in ipairs(r) do
    if not flow_admit(e[1], e[2], false) then aside[#aside + 1] = e[1] end
  end
  if #r == budget then
    redis.call('SET', adm, r[#r][1])
    set_aside()
    return {'later'}
  end
end
local ids, keys = {}, {}
for i = 7, #ARGV, 3 do
  ids[#ids + 1] = ARGV[i]
  keys[#keys + 1] = ARGV[i + 1]
end
flow_hmget(flow_h.run, ids)
flow_hmget(flow_h.cnt, keys)
local skip = {}
local out, admitted, seen = {skip}, 0, 0
local before = mark and not id_lt(mark, first)
for i = 7, #ARGV, 3 do
  local id, k, c = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  seen = seen + 1
  if before then before = not id_lt(mark, id) end -- ids are in stream order
  local ok, lane, wait = true, nil, nil
  if flow_h.run.v[id] then
    ok = true
  elseif before and not (owned(stream, group, consumer, id) and #redis.call('XRANGE', stream, id, id) > 0) then
    -- Another read's call set it aside (it is gone). One still here and
    -- ours was never admitted (read before the first admission in order).
    ok = false
  else
    ok, lane, wait = flow_try(id, c, k)
  end
  if ok then
    admitted = admitted + 1
  else
    skip[#skip + 1] = id
    if lane or wait then
      local e = redis.call('XRANGE', stream, id, id)
      if #e > 0 then
        flow_aside(id, e[1][2], lane, wait)
        aside[#aside + 1] = id
      end
    end
  end
end
if not mark or id_lt(mark, last) then mark = last end
-- Reading on is in order only if no other read came after this one.
local on = #aside > 0 and admitted < want and seen < budget and flow_last_delivered(stream, group) == mark
while on and #aside > 0 and admitted < want and seen < budget do
  set_aside()
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', math.min(want - admitted, budget - seen), 'STREAMS', stream, '>')
  if not r or #r[1][2] == 0 then break end
  for _, e in ipairs(r[1][2]) do
    seen = seen + 1
    mark = e[1]
    if flow_admit(e[1], e[2], true) then
      out[#out + 1] = e[1]
      out[#out + 1] = e[2]
      admitted = admitted + 1
    else
      aside[#aside + 1] = e[1]
    end
  end
end
redis.call('SET', adm, mark)
set_aside()
return out
`)

// scriptFlowAdmit admits entries a consumer took over or took back (see
// scriptFlowRead); entries it does not own are left alone.
//
// KEYS[1] stream
// ARGV[1] group, ARGV[2] consumer, ARGV[3..] entry IDs.
// Returns the IDs of the entries it parked.
var scriptFlowAdmit = newProbed(streamLib + flowLib + `
local parked = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if owned(KEYS[1], ARGV[1], ARGV[2], id) then
    local e = redis.call('XRANGE', KEYS[1], id, id)
    if #e > 0 and not flow_admit(id, e[1][2], false) then parked[#parked + 1] = id end
  end
end
flow_flush()
if #parked > 0 then
  redis.call('XACK', KEYS[1], ARGV[1], unpack(parked))
  redis.call('XDEL', KEYS[1], unpack(parked))
end
return parked
`)

// scriptFlowSweep gives back the slots of entries that are no longer
// pending and no longer wait to be read (settled by a consumer that ran
// without flow control, deleted by an operator, lost with their stream),
// visiting a bounded part of the slots per call, then releases waiting
// jobs into free slots (after a cap was raised, or slots were given back).
//
// KEYS[1] stream
// ARGV[1] group, ARGV[2] the most slots to visit
// Returns {slots given back, jobs released, 1 when the sweep finished a
// pass over the slots else 0}.
var scriptFlowSweep = newProbed(streamLib + flowLib + `
local stream, group = KEYS[1], ARGV[1]
local sweep = flow_base .. 'flow:sweep'
local r = redis.call('HSCAN', flow_run, redis.call('GET', sweep) or '0', 'COUNT', ARGV[2])
redis.call('SET', sweep, r[1])
local last = nil
if redis.call('EXISTS', stream) == 1 then last = flow_last_delivered(stream, group) end
local freed = 0
for i = 1, #r[2], 2 do
  local id = r[2][i]
  local keep = false
  if last then
    if #redis.call('XPENDING', stream, group, id, id, 1) > 0 then
      keep = true
    elseif id_lt(last, id) then
      keep = #redis.call('XRANGE', stream, id, id) > 0
    end
  end
  if not keep and flow_give(id) then freed = freed + 1 end
end
local released = flow_dispatch(stream, nil, flow_scan)
flow_flush()
local done = 0
if r[1] == '0' then done = 1 end
return {freed, released, done}
`)

// scriptFlowAck is scriptAck for a queue under flow control: it also gives
// back the slots of the entries the consumer still owned and releases
// waiting jobs into them.
//
// KEYS and ARGV as scriptAck's, then ARGV[last] the consumer.
// Returns the number of entries acknowledged.
var scriptFlowAck = newProbed(streamLib + flowLib + `
local consumer = table.remove(ARGV)
local n = tonumber(ARGV[2])
local freed = {}
local mine = flow_owned(KEYS[1], ARGV[1], consumer, {unpack(ARGV, 6, 5 + n)})
local ids, keys = {}, {}
for i = 6, 5 + n do
  if mine[ARGV[i]] then ids[#ids + 1] = ARGV[i] end
end
flow_hmget(flow_h.run, ids)
for _, id in ipairs(ids) do
  local t = flow_h.run.v[id]
  if t then
    local _, k = flow_split(t)
    keys[#keys + 1] = k
  end
end
flow_hmget(flow_h.cnt, keys)
for _, id in ipairs(ids) do
  local k, c = flow_give(id)
  if k then freed[#freed + 1] = {k, c} end
end
local function ack()
` + ackBody + `
end
local acked = ack()
for _, kc in ipairs(freed) do flow_dispatch(KEYS[1], kc[1], flow_freed(kc[2]), kc[2]) end
flow_flush()
return acked
`)

// scriptFlowMove is scriptMove that gives back the moved entry's slot.
var scriptFlowMove = newProbed(idempotent(streamLib+statsLib+flowLib, withFlow(moveBody)))

// scriptFlowDeadLetter is scriptDeadLetter that gives back the entry's slot.
var scriptFlowDeadLetter = newProbed(idempotent(streamLib+deadLib+flowLib, withFlow(deadLetterBody)))

// scriptFlowDelete deletes a job waiting aside (an operator's delete).
//
// KEYS[1] stream
// ARGV[1] the job's flow key, ARGV[2] its stable ID, ARGV[3] its packed
// fields as the wait list holds them.
// Returns "ok", or ReplyGone when the job is no longer in the list (it was
// released meanwhile).
var scriptFlowDelete = newProbed(flowLib + `
local w = flow_wait(ARGV[1])
if redis.call('LREM', w, 1, ARGV[3]) == 0 then return '` + ReplyGone + `' end
redis.call('HDEL', flow_trail, ARGV[2])
if redis.call('LLEN', w) == 0 then redis.call('LREM', flow_ring, 0, ARGV[1]) end
return 'ok'
`)

// FlowDeleteParams are one call of scriptFlowDelete.
type FlowDeleteParams struct {
	Key, JobID, Packed string
}

// FlowDelete runs scriptFlowDelete.
func (q *Queue) FlowDelete(ctx context.Context, p FlowDeleteParams) (string, error) {
	return q.sc(scriptFlowDelete).Run(ctx, q.client, []string{q.keys.Stream}, p.Key, p.JobID, p.Packed).Text()
}

// scriptFlowKick releases waiting jobs into free slots (after limits were
// raised).
//
// KEYS[1] stream
// ARGV[1] the most jobs to release
// Returns the number released.
var scriptFlowKick = newProbed(flowLib + `
local n = flow_dispatch(KEYS[1], nil, tonumber(ARGV[1]))
flow_flush()
return n
`)

// FlowEntry is an entry a flow read admitted.
type FlowEntry struct {
	ID     string
	Fields map[string]any
}

// FlowRead is one entry a consumer read, as scriptFlowRead admits it.
type FlowRead struct {
	ID, Key, Kind string
}

// laterReply is scriptFlowRead's reply when entries of other reads are
// to be admitted first.
const laterReply = "later"

// maxFlowCatchUp bounds the calls of scriptFlowRead for one read.
const maxFlowCatchUp = 20

// FlowAdmitReadParams are one call of scriptFlowRead.
type FlowAdmitReadParams struct {
	Consumer    string
	First, Last string     // the first and last entries read
	Read        []FlowRead // the entries read to admit, in stream order
	N           int        // the most entries to admit
	Budget      int        // the most entries to read (admitted or set aside)
}

// FlowAdmitRead runs scriptFlowRead. It returns the IDs of the entries of
// p.Read that must not start (set aside, or gone), and the entries it read
// itself and admitted; or [ErrPaused] when the queue is paused (nothing
// was admitted: the caller puts p.Read back).
func (q *Queue) FlowAdmitRead(ctx context.Context, p FlowAdmitReadParams) (skip []string, more []FlowEntry, err error) {
	args := make([]any, 0, 6+3*len(p.Read))
	args = append(args, q.group, p.Consumer, p.N, max(p.Budget, p.N, len(p.Read)), p.First, p.Last)
	for _, r := range p.Read {
		args = append(args, r.ID, r.Key, r.Kind)
	}
	var res []any
	for range maxFlowCatchUp {
		if res, err = q.sc(scriptFlowRead).Run(ctx, q.client, []string{q.keys.Stream, q.keys.Paused}, args...).Slice(); err != nil {
			return nil, nil, err
		}
		if len(res) != 1 || res[0] != laterReply {
			break
		}
	}
	if len(res) == 1 && res[0] == pausedReply {
		return nil, nil, ErrPaused
	}
	if len(res) == 1 && res[0] == laterReply {
		return nil, nil, fmt.Errorf("the entries read before these are not all admitted after %d calls", maxFlowCatchUp)
	}
	if len(res) == 0 || len(res)%2 != 1 {
		return nil, nil, fmt.Errorf("unexpected flow read reply of %d elements", len(res))
	}
	ids, _ := res[0].([]any)
	for _, id := range ids {
		s, _ := id.(string)
		skip = append(skip, s)
	}
	for i := 1; i < len(res); i += 2 {
		id, _ := res[i].(string)
		more = append(more, FlowEntry{ID: id, Fields: fieldMap(res[i+1])})
	}
	return skip, more, nil
}

// FlowReadParams are one flow read (see Queue.FlowRead).
type FlowReadParams struct {
	Consumer string
	N        int // the most entries to admit
	Budget   int // the most entries to read (admitted or parked)
}

// FlowRead reads up to p.N new entries for p.Consumer (XREADGROUP, without
// BLOCK) and admits them (FlowAdmitRead), as a consumer under flow control
// does. It returns the admitted entries; or the entries read and
// [ErrPaused] when the queue is paused (they are pending for p.Consumer,
// with no slot).
func (q *Queue) FlowRead(ctx context.Context, p FlowReadParams) ([]FlowEntry, error) {
	streams, err := q.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.group, Consumer: p.Consumer,
		Streams: []string{q.keys.Stream, ">"}, Count: int64(p.N), Block: -1}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var read []FlowEntry
	var admit []FlowRead
	for _, s := range streams {
		for _, m := range s.Messages {
			read = append(read, FlowEntry{ID: m.ID, Fields: m.Values})
			if r, ok := FlowReadOf(m.ID, m.Values); ok {
				admit = append(admit, r)
			}
		}
	}
	if len(read) == 0 {
		return nil, nil
	}
	skip, more, err := q.FlowAdmitRead(ctx, FlowAdmitReadParams{Consumer: p.Consumer, First: read[0].ID, Last: read[len(read)-1].ID, Read: admit, N: p.N, Budget: p.Budget})
	if err != nil {
		return read, err
	}
	out := read[:0]
	for _, e := range read {
		if !slices.Contains(skip, e.ID) {
			out = append(out, e)
		}
	}
	return append(out, more...), nil
}

// FlowReadOf returns what scriptFlowRead needs of the entry id with
// fields f, just read, and whether it is to be admitted at all: an entry
// that holds a slot already (released from a wait list: field fs) or has
// more fields than a job may have (the engine dead-letters it) is not.
func FlowReadOf(id string, f map[string]any) (FlowRead, bool) {
	if f["fs"] == "1" || len(f) > maxFlowFields {
		return FlowRead{}, false
	}
	k, _ := f["fk"].(string)
	c, _ := f["kind"].(string)
	return FlowRead{ID: id, Key: k, Kind: c}, true
}

// maxFlowFields is the most fields of an entry that flow control admits
// (see flow_admit: a job has far fewer).
const maxFlowFields = 1000

// FlowAdmit runs scriptFlowAdmit for entries consumer holds, and returns
// those it parked.
func (q *Queue) FlowAdmit(ctx context.Context, consumer string, ids []string) ([]string, error) {
	args := make([]any, 0, 2+len(ids))
	args = append(args, q.group, consumer)
	for _, id := range ids {
		args = append(args, id)
	}
	return q.sc(scriptFlowAdmit).Run(ctx, q.client, []string{q.keys.Stream}, args...).StringSlice()
}

// FlowSweep runs scriptFlowSweep over up to count slots. It returns the
// slots given back, the jobs released, and whether the sweep finished a
// pass.
func (q *Queue) FlowSweep(ctx context.Context, count int) (freed, released int64, done bool, err error) {
	res, err := q.sc(scriptFlowSweep).Run(ctx, q.client, []string{q.keys.Stream}, q.group, count).Int64Slice()
	if err != nil {
		return 0, 0, false, err
	}
	if len(res) != 3 {
		return 0, 0, false, fmt.Errorf("unexpected flow sweep reply of %d elements", len(res))
	}
	return res[0], res[1], res[2] == 1, nil
}

// FlowKick runs scriptFlowKick and returns the number of jobs released.
func (q *Queue) FlowKick(ctx context.Context, n int) (int64, error) {
	return q.sc(scriptFlowKick).Run(ctx, q.client, []string{q.keys.Stream}, n).Int64()
}

// FlowLimits are a queue's flow-control limits as stored (0: none).
type FlowLimits struct {
	Global int
	PerKey int
	Keys   map[string]int // caps of single keys, over PerKey
	// Rate is the rate limit of each key (jobs per second; 0: none), Rates
	// those of single keys, over Rate.
	Rate  float64
	Rates map[string]float64
	// Kinds caps the running jobs of single kinds; KindPerKey caps the
	// running jobs of each flow key among the jobs of single kinds.
	Kinds      map[string]int
	KindPerKey map[string]int
	// Weights are the weights of single keys in the round robin (others: 1).
	Weights map[string]int
}

// FlowActive reports whether the queue has flow-control limits.
func (q *Queue) FlowActive(ctx context.Context) (bool, error) {
	n, err := q.client.Exists(ctx, q.keys.Flow().Limits).Result()
	return n > 0, err
}

// GetFlowLimits reads the queue's limits.
func (q *Queue) GetFlowLimits(ctx context.Context) (FlowLimits, error) {
	m, err := q.client.HGetAll(ctx, q.keys.Flow().Limits).Result()
	if err != nil {
		return FlowLimits{}, err
	}
	return parseFlowLimits(m)
}

func parseFlowLimits(m map[string]string) (FlowLimits, error) {
	var l FlowLimits
	for f, v := range m {
		if f == FlowRate || strings.HasPrefix(f, FlowRatePrefix) {
			r, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return l, fmt.Errorf("flow limit %q is %q, not a number", f, v)
			}
			if f == FlowRate {
				l.Rate = r
			} else {
				if l.Rates == nil {
					l.Rates = make(map[string]float64)
				}
				l.Rates[strings.TrimPrefix(f, FlowRatePrefix)] = r
			}
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return l, fmt.Errorf("flow limit %q is %q, not a number", f, v)
		}
		switch {
		case strings.HasPrefix(f, FlowKindPrefix):
			l.Kinds = setIn(l.Kinds, strings.TrimPrefix(f, FlowKindPrefix), n)
		case strings.HasPrefix(f, FlowWeight):
			l.Weights = setIn(l.Weights, strings.TrimPrefix(f, FlowWeight), n)
		case strings.HasPrefix(f, FlowKindKey):
			l.KindPerKey = setIn(l.KindPerKey, strings.TrimPrefix(f, FlowKindKey), n)
		case f == FlowGlobal:
			l.Global = n
		case f == FlowPerKey:
			l.PerKey = n
		case strings.HasPrefix(f, FlowKeyPrefix):
			l.Keys = setIn(l.Keys, strings.TrimPrefix(f, FlowKeyPrefix), n)
		}
	}
	return l, nil
}

// setIn sets m[k] = v, making m when it is nil, and returns m.
func setIn[V any](m map[string]V, k string, v V) map[string]V {
	if m == nil {
		m = make(map[string]V)
	}
	m[k] = v
	return m
}

// SetFlowLimits replaces the queue's limits (all of them zero: none) in one
// transaction, then releases waiting jobs into the room a raised limit made.
func (q *Queue) SetFlowLimits(ctx context.Context, l FlowLimits) error {
	key := q.keys.Flow().Limits
	var fields []any
	if l.Global > 0 {
		fields = append(fields, FlowGlobal, l.Global)
	}
	if l.PerKey > 0 {
		fields = append(fields, FlowPerKey, l.PerKey)
	}
	for k, n := range l.Keys {
		fields = append(fields, FlowKeyPrefix+k, n)
	}
	if l.Rate > 0 {
		fields = append(fields, FlowRate, strconv.FormatFloat(l.Rate, 'g', -1, 64))
	}
	for k, r := range l.Rates {
		fields = append(fields, FlowRatePrefix+k, strconv.FormatFloat(r, 'g', -1, 64))
	}
	for c, n := range l.Kinds {
		fields = append(fields, FlowKindPrefix+c, n)
	}
	for c, n := range l.KindPerKey {
		fields = append(fields, FlowKindKey+c, n)
	}
	for k, n := range l.Weights {
		fields = append(fields, FlowWeight+k, n)
	}
	_, err := q.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		if len(fields) > 0 {
			p.HSet(ctx, key, fields...)
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, err = q.FlowKick(ctx, 1000)
	return err
}

// FlowState is what a queue's flow control holds: the slots taken in all
// and per key, and the jobs waiting per key.
type FlowState struct {
	Limits  FlowLimits
	Running int64
	PerKey  map[string]int64 // slots held per key
	PerKind map[string]int64 // slots held per kind (jobs with a kind)
	// Waiting counts waiting jobs per key (of the lanes in the ring, at
	// most MaxFlowKeys); Lanes lists those lanes.
	Waiting map[string]int64
	Lanes   []FlowLane
}

// FlowLane is a wait list: the jobs of a flow key, or those of one kind
// (with caps of its own) and a key.
type FlowLane struct {
	Kind, Key string
	Waiting   int64
}

// MaxFlowKeys bounds the keys FlowStatus reports.
const MaxFlowKeys = 1000

// FlowStatus reads the queue's flow state (bounded: at most MaxFlowKeys
// keys of the ring).
func (q *Queue) FlowStatus(ctx context.Context) (FlowState, error) {
	fk := q.keys.Flow()
	var st FlowState
	var err error
	if st.Limits, err = q.GetFlowLimits(ctx); err != nil {
		return st, err
	}
	if st.Running, err = q.client.HLen(ctx, fk.Run).Result(); err != nil {
		return st, err
	}
	cnt, err := q.client.HGetAll(ctx, fk.Count).Result()
	if err != nil {
		return st, err
	}
	st.PerKey = make(map[string]int64, len(cnt))
	for k, v := range cnt {
		st.PerKey[k], _ = strconv.ParseInt(v, 10, 64)
	}
	ring, err := q.client.LRange(ctx, fk.Ring, 0, MaxFlowKeys-1).Result()
	if err != nil {
		return st, err
	}
	if err := q.kindCounts(ctx, &st); err != nil {
		return st, err
	}
	st.Waiting = make(map[string]int64, len(ring))
	pipe := q.client.Pipeline()
	lens := make([]*redis.IntCmd, len(ring))
	for i, k := range ring {
		lens[i] = pipe.LLen(ctx, fk.Wait(k))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return st, err
	}
	for i, lane := range ring {
		kind, key := SplitLane(lane)
		st.Waiting[key] += lens[i].Val()
		st.Lanes = append(st.Lanes, FlowLane{Kind: kind, Key: key, Waiting: lens[i].Val()})
	}
	return st, nil
}

// kindCounts reads the slots held per kind into st.PerKind (at most
// MaxFlowKeys kinds and kind-key pairs are looked at).
func (q *Queue) kindCounts(ctx context.Context, st *FlowState) error {
	st.PerKind = map[string]int64{}
	var cursor uint64
	for seen := 0; seen < MaxFlowKeys; {
		fs, next, err := q.client.HScan(ctx, q.keys.Flow().KindCount, cursor, "", 100).Result()
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(fs); i += 2 {
			if !strings.HasPrefix(fs[i], "\x00") {
				st.PerKind[fs[i]], _ = strconv.ParseInt(fs[i+1], 10, 64)
			}
		}
		seen += len(fs) / 2
		if cursor = next; cursor == 0 {
			break
		}
	}
	return nil
}
