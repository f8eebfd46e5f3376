package rdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The priority set of a queue: every move of a job (push -> ready set,
// stream -> ready set, ready set -> lease set, lease set -> ready set, lease
// set -> delayed set -> ready set, lease set -> dead-letter stream) is one
// of these scripts.
//
// Members of the ready and delayed sets are "<seq>:<score>:<id>": seq is the
// job's sequence number, zero-padded to 20 digits so that members of equal
// score (equal priority) sort in push order for every int64 sequence number;
// score is the job's score as an exact decimal integer, so a job can be put
// back with its original score (priority) and member (place); id is the job
// ID, the key of its fields in the job hash.
//
// Members of the lease set are "<member>|<token>", scored by the lease
// deadline; the token, "<worker name>:<run>.<pop>:<n>", is unique to one pop,
// so that a worker whose lease expired can never finish, extend or retry the
// lease another worker holds now. Times are the server's (TIME), so clock
// skew between workers cannot expire a lease early.
//
// Attempts: a lease counts as a handler start of its job, and a lease that
// expires (its worker died, hung or lost Redis while the handler ran) adds
// one to the job's delivery counter, which the next pop reports. A lease
// whose job has to wait before it starts (it must run alone) is marked in
// the waiting hash: if it expires, nothing is counted, because no handler
// started.

// PrioritySet makes the Redis calls of a queue's priority set: the
// [Queue.Priority] view of the queue.
type PrioritySet struct {
	q *Queue
	k PriorityKeys
}

// Keys returns the keys of the priority set.
func (s *PrioritySet) Keys() PriorityKeys { return s.k }

// priorityLib holds helpers prepended to the priority scripts.
const priorityLib = timeLib + `

-- next_seq takes the next sequence number. It is read back with GET so that
-- its exact decimal digits are used (Lua numbers are doubles, exact only up
-- to 2^53) and zero-padded to 20 digits. Returns the padded and plain digits.
local function next_seq(seqkey)
  redis.call('INCR', seqkey)
  local s = redis.call('GET', seqkey)
  return string.rep('0', 20 - #s) .. s, s
end

local function member_id(m)
  return string.match(m, '^%d+:%-?%d+:(.+)$')
end

-- member_score returns the member's score as the string it was pushed with.
local function member_score(m)
  return string.match(m, '^%d+:(%-?%d+):')
end

local function lease_member(lm)
  return string.match(lm, '^(.*)|[^|]*$')
end

-- notify appends a wake-up entry for idle workers (see scriptPop).
local function notify(key)
  redis.call('XADD', key, 'MAXLEN', '~', 100, '*', 'w', '1')
end

-- last_notify returns the ID of the newest wake-up entry, or 0-0.
local function last_notify(key)
  local e = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
  if #e == 0 then return '0-0' end
  return e[1][1]
end

-- unwait forgets that leases wait uncharged.
local function unwait(waiting, lms)
  if #lms > 0 and redis.call('HLEN', waiting) > 0 then redis.call('HDEL', waiting, unpack(lms)) end
end

-- finish removes n finished jobs whose lease members are args[from ..
-- from+n-1] and whose job IDs follow them. A job whose lease is still held
-- is removed with its data. A job whose lease expired meanwhile and that
-- waits in the ready set again, or in the delayed set (another run failed),
-- is removed too: it is done. A job that another worker holds now is left to
-- that worker. Returns {finished, left to others}.
local function finish(leases, ready, delayed, jobs, deliveries, waiting, args, from, n)
  if n == 0 then return {0, 0} end
  local lms = {unpack(args, from, from + n - 1)}
  local scores = redis.call('ZMSCORE', leases, unpack(lms))
  local held, ids, left = {}, {}, 0
  for i = 1, n do
    if scores[i] then
      held[#held + 1] = lms[i]
      ids[#ids + 1] = args[from + n + i - 1]
    else
      local m = lease_member(lms[i])
      if m and (redis.call('ZREM', ready, m) == 1 or redis.call('ZREM', delayed, m) == 1) then
        unmark_retry(delayed, m)
        ids[#ids + 1] = args[from + n + i - 1]
      else
        left = left + 1
      end
    end
  end
  if #held > 0 then redis.call('ZREM', leases, unpack(held)) end
  unwait(waiting, lms)
  if #ids > 0 then
    redis.call('HDEL', jobs, unpack(ids))
    redis.call('HDEL', deliveries, unpack(ids))
  end
  return {#ids, left}
end

-- lease adds members taken from a ready set (the caller removes them from
-- it) to the lease set and appends lease member, delivery count and data of
-- each to out. A member whose job data is missing is not leased and counted
-- in out[2]. Returns the lease members.
local function lease(members, leases, jobs, deliveries, deadline, prefix, out)
  local lms = {}
  if #members == 0 then return lms end
  local ids = {}
  for i, m in ipairs(members) do ids[i] = member_id(m) or '' end
  local data = redis.call('HMGET', jobs, unpack(ids))
  local counts = {}
  if redis.call('HLEN', deliveries) > 0 then counts = redis.call('HMGET', deliveries, unpack(ids)) end
  local z, gone = {}, {}
  for i, m in ipairs(members) do
    if data[i] then
      local lm = m .. '|' .. prefix .. i
      z[#z + 1] = deadline
      z[#z + 1] = lm
      lms[#lms + 1] = lm
      out[#out + 1] = lm
      out[#out + 1] = tonumber(counts[i]) or 0
      out[#out + 1] = data[i]
    else
      gone[#gone + 1] = ids[i]
      out[2] = out[2] + 1
    end
  end
  if #z > 0 then redis.call('ZADD', leases, unpack(z)) end
  if #gone > 0 then redis.call('HDEL', deliveries, unpack(gone)) end
  return lms
end

-- replay returns the reply of the pop that memo remembers if it was made
-- with token prefix (the call was re-sent after its reply was lost), else
-- nil. Leases that are no longer held are left out.
local function replay(memo, prefix, leases, jobs, deliveries)
  if redis.call('HGET', memo, 'p') ~= prefix then return nil end
  local out = {'', 0, cmsgpack.unpack(redis.call('HGET', memo, 'c'))}
  for _, lm in ipairs(cmsgpack.unpack(redis.call('HGET', memo, 'l'))) do
    local id = member_id(lease_member(lm) or '')
    if id and redis.call('ZSCORE', leases, lm) then
      out[#out + 1] = lm
      out[#out + 1] = tonumber(redis.call('HGET', deliveries, id)) or 0
      out[#out + 1] = redis.call('HGET', jobs, id) or ''
    end
  end
  return out
end

-- remember stores what a pop leased, for replay.
local function remember(memo, prefix, lms, credits, ttl)
  if #lms == 0 then return end
  redis.call('HSET', memo, 'p', prefix, 'l', cmsgpack.pack(lms), 'c', cmsgpack.pack(credits))
  redis.call('PEXPIRE', memo, ttl)
end
`

// scriptPush adds jobs to the ready set.
//
// KEYS[1] ready set, KEYS[2] job hash, KEYS[3] sequence counter, KEYS[4]
// notify stream, KEYS[5] memo hash (see idempotent)
// ARGV: for each job its score and its data (packed wire fields); then the
// memo token and TTL.
// Returns the array of the new job IDs (their sequence numbers). A re-sent
// call returns the first call's IDs and pushes nothing.
var scriptPush = redis.NewScript(idempotent(priorityLib, `
local ids, h, z = {}, {}, {}
for i = 1, #ARGV, 2 do
  local score = ARGV[i]
  local padded, s = next_seq(KEYS[3])
  h[#h + 1] = s
  h[#h + 1] = ARGV[i + 1]
  z[#z + 1] = score
  z[#z + 1] = padded .. ':' .. score .. ':' .. s
  ids[#ids + 1] = s
end
redis.call('HSET', KEYS[2], unpack(h))
redis.call('ZADD', KEYS[1], unpack(z))
notify(KEYS[4])
return ids
`))

// PushParams are one call of scriptPush: its jobs, added with Add.
type PushParams struct {
	Memo Memo // the call's memo (zero: a fresh one), the same for every send of it

	args []any // score, data pairs
}

// Add adds a job with score (the exact decimal integer of its place) and
// data (its packed wire fields).
func (p *PushParams) Add(score string, data []byte) { p.args = append(p.args, score, data) }

// Push runs scriptPush and returns the new job IDs.
func (s *PrioritySet) Push(ctx context.Context, p *PushParams) ([]string, error) {
	k := &s.k
	cmd, _ := s.q.runWrite(ctx, scriptPush, s.q.memoOr(p.Memo), Replicas{}, []string{k.Ready, k.Jobs, k.Seq, k.Notify}, p.args)
	return cmd.StringSlice()
}

// scriptForward moves a stream entry into the ready set and acknowledges it.
//
// KEYS[1] stream, KEYS[2] ready set, KEYS[3] job hash, KEYS[4] sequence
// counter, KEYS[5] notify stream, KEYS[6] trail hash
// ARGV[1] group, ARGV[2] stream entry ID (becomes the job ID), ARGV[3] score,
// ARGV[4] the job's data (packed wire fields), ARGV[5] the job's stable ID
// when it is not the entry ID (a moved copy, a chosen ID; "": none), whose
// trail then points at the priority job.
// Returns 1 when forwarded, 0 when the entry is not pending in the group: it
// was forwarded and acknowledged before (by an earlier attempt whose reply
// was lost, or by another consumer that took it over), so forwarding it again
// would double it. That makes the script idempotent.
var scriptForward = redis.NewScript(priorityLib + `
if #redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1) == 0 then return 0 end
local padded = next_seq(KEYS[4])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], padded .. ':' .. ARGV[3] .. ':' .. ARGV[2])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[6], ARGV[5], 'p:' .. ARGV[2]) end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
notify(KEYS[5])
return 1
`)

// ForwardParams are one call of scriptForward.
type ForwardParams struct {
	ID    string // the stream entry, which becomes the job ID
	JobID string // the job's stable ID when it is not ID ("": it is)
	Score string // the job's score (the exact decimal integer of its place)
	Data  []byte // the job's packed wire fields
}

// Forward runs scriptForward with the queue's group. A call sent again
// finds the entry acknowledged and forwards nothing more.
func (s *PrioritySet) Forward(ctx context.Context, p ForwardParams) error {
	k := &s.k
	return scriptForward.Run(ctx, s.q.client, []string{s.q.keys.Stream, k.Ready, k.Jobs, k.Seq, k.Notify, k.Trail}, s.q.group, p.ID, p.Score, p.Data, p.JobID).Err()
}

// allowOOM starts the scripts a worker needs to drain a queue while Redis is
// at maxmemory: without it Redis 7 refuses a script's first write then (a
// pop's is the ZADD into the lease set), so workers could not run the
// backlog that filled Redis. The scripts that carry it add little memory
// and let the memory of the jobs they lease be freed when they finish: a
// pop moves members from the ready set to the lease set (and remembers the
// pop), a keep-alive changes scores only, and a reap moves members back.
const allowOOM = "#!lua flags=allow-oom\n"

// scriptPop leases up to n jobs, first in queue order (score, then member).
// It runs at maxmemory (see allowOOM).
//
// KEYS[1] ready set, KEYS[2] lease set, KEYS[3] job hash, KEYS[4] delivery
// counters, KEYS[5] notify stream, KEYS[6] the run's pop memo, KEYS[7] the
// queue's pause flag
// ARGV[1] lease (ms), ARGV[2] n, ARGV[3] token prefix (unique per call)
// Returns {"paused", 0, {}} when the queue is paused (nothing leased: no
// job starts after Pause returned, not even one a lost reply leased before:
// its lease expires and the reaper returns it to the ready set). Else
// {notify ID, missing, {}, lease member, delivery count, data, ...}:
// for each leased job its lease member, its delivery counter (starts of this
// copy that ended in crashes) and its data (packed wire fields). missing
// counts members whose job data was gone (they are dropped). When the ready
// set was empty, the notify ID is the newest wake-up entry, from which the
// worker waits for the next one: a push after this script appends a newer
// entry, so it is never missed. Otherwise it is "". A call re-sent with the
// same prefix after a lost reply returns the jobs the first call leased.
var scriptPop = redis.NewScript(allowOOM + priorityLib + `
if redis.call('EXISTS', KEYS[7]) == 1 then return {'paused', 0, {}} end
local again = replay(KEYS[6], ARGV[3], KEYS[2], KEYS[3], KEYS[4])
if again then return again end
local deadline = now_ms() + tonumber(ARGV[1])
local members = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local out = {'', 0, {}}
if #members == 0 then
  out[1] = last_notify(KEYS[5])
  return out
end
local lms = lease(members, KEYS[2], KEYS[3], KEYS[4], deadline, ARGV[3], out)
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #members - 1)
remember(KEYS[6], ARGV[3], lms, {}, ARGV[1])
return out
`)

// scriptPopWeighted leases up to n jobs, choosing between priority bands by
// smooth weighted round robin, in queue order within a band. It runs at
// maxmemory (see allowOOM).
//
// KEYS as scriptPop.
// ARGV[1] lease (ms), ARGV[2] n, ARGV[3] token prefix, ARGV[4] number of
// bands b; then for each band, most urgent first: min score, max score,
// weight, credit.
// Returns as scriptPop, with the bands' new credits in the third element.
// Only bands holding jobs take part in a choice: each gains its weight, the
// one with the most credit (the more urgent on ties) is chosen and pays the
// sum of the weights of the bands taking part; a band without jobs has its
// credit reset to 0. With every band holding jobs, every run of
// sum(weights) choices follows the weights exactly, interleaved.
var scriptPopWeighted = redis.NewScript(allowOOM + priorityLib + `
if redis.call('EXISTS', KEYS[7]) == 1 then return {'paused', 0, {}} end
local again = replay(KEYS[6], ARGV[3], KEYS[2], KEYS[3], KEYS[4])
if again then return again end
local deadline = now_ms() + tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local nb = tonumber(ARGV[4])
local lo, hi, w, credit, count, take = {}, {}, {}, {}, {}, {}
local total = 0
for b = 1, nb do
  local k = 5 + (b - 1) * 4
  lo[b], hi[b], w[b], credit[b] = ARGV[k], ARGV[k + 1], tonumber(ARGV[k + 2]), tonumber(ARGV[k + 3])
  count[b] = redis.call('ZCOUNT', KEYS[1], lo[b], hi[b])
  take[b] = 0
  total = total + count[b]
end
local out = {'', 0, credit}
if total == 0 then
  for b = 1, nb do credit[b] = 0 end
  out[1] = last_notify(KEYS[5])
  return out
end
for i = 1, n do
  local sum, best = 0, nil
  for b = 1, nb do
    if count[b] > 0 then
      sum = sum + w[b]
      credit[b] = credit[b] + w[b]
      if best == nil or credit[b] > credit[best] then best = b end
    else
      credit[b] = 0
    end
  end
  if best == nil then break end
  credit[best] = credit[best] - sum
  count[best] = count[best] - 1
  take[best] = take[best] + 1
end
local members = {}
for b = 1, nb do
  if take[b] > 0 then
    local ms = redis.call('ZRANGE', KEYS[1], lo[b], hi[b], 'BYSCORE', 'LIMIT', 0, take[b])
    for _, m in ipairs(ms) do members[#members + 1] = m end
  end
end
local lms = lease(members, KEYS[2], KEYS[3], KEYS[4], deadline, ARGV[3], out)
if #members > 0 then redis.call('ZREM', KEYS[1], unpack(members)) end
remember(KEYS[6], ARGV[3], lms, credit, ARGV[1])
return out
`)

// Popped is one job a pop leased.
type Popped struct {
	Lease string // lease member
	Count int    // delivery counter: starts of this copy that ended in crashes
	Data  string // packed wire fields
}

// PopResult is what a pop returned.
type PopResult struct {
	Notify  string // newest wake-up entry, when the ready set was empty
	Missing int64  // ready members found without their data (dropped)
	Credits []int64
	Jobs    []Popped
}

// PopBand is one band of priorities of a weighted pop.
type PopBand struct {
	Min, Max string // its scores, inclusive
	Weight   int
	Credit   int64 // its credit from the last pop
}

// PopParams are one call of scriptPop, or scriptPopWeighted with Bands.
type PopParams struct {
	Run   string        // the worker's run: its pop memo
	Lease time.Duration // how long the leases last without a keep-alive
	N     int           // the most jobs to lease
	// Prefix starts the lease tokens of the call, unique to it: a call
	// sent again with the same prefix returns the jobs the first leased.
	Prefix string
	// Bands, most urgent first, make the pop weighted.
	Bands []PopBand
}

// Pop runs scriptPop, or scriptPopWeighted when p.Bands is not empty. It
// returns [ErrPaused] when the queue is paused.
func (s *PrioritySet) Pop(ctx context.Context, p PopParams) (PopResult, error) {
	k := &s.k
	keys := []string{k.Ready, k.Leases, k.Jobs, k.Deliveries, k.Notify, k.Pops(p.Run), s.q.keys.Paused}
	args := make([]any, 0, 4+4*len(p.Bands))
	args = append(args, p.Lease.Milliseconds(), p.N, p.Prefix)
	var (
		res []any
		err error
	)
	if len(p.Bands) == 0 {
		res, err = scriptPop.Run(ctx, s.q.client, keys, args...).Slice()
	} else {
		args = append(args, len(p.Bands))
		for _, b := range p.Bands {
			args = append(args, b.Min, b.Max, b.Weight, b.Credit)
		}
		res, err = scriptPopWeighted.Run(ctx, s.q.client, keys, args...).Slice()
	}
	if err != nil {
		return PopResult{}, err
	}
	var out PopResult
	if len(res) > 0 && res[0] == pausedReply {
		return out, ErrPaused
	}
	if len(res) < 3 || (len(res)-3)%3 != 0 {
		return out, fmt.Errorf("unexpected pop reply with %d elements", len(res))
	}
	out.Notify, _ = res[0].(string)
	out.Missing, _ = res[1].(int64)
	if credits, ok := res[2].([]any); ok {
		for _, c := range credits {
			n, _ := c.(int64)
			out.Credits = append(out.Credits, n)
		}
	}
	for i := 3; i+2 < len(res); i += 3 {
		lm, _ := res[i].(string)
		d, _ := res[i+1].(int64)
		data, _ := res[i+2].(string)
		out.Jobs = append(out.Jobs, Popped{Lease: lm, Count: int(d), Data: data})
	}
	return out, nil
}

// scriptFinish removes finished jobs (see finish in priorityLib), forgets
// the trail of those with a stable ID of their own (moved or chosen) and
// leaves the done markers of chosen IDs.
//
// KEYS[1] lease set, KEYS[2] ready set, KEYS[3] delayed set, KEYS[4] job
// hash, KEYS[5] delivery counters, KEYS[6] waiting leases, KEYS[7] trail
// hash, KEYS[8..] done markers
// ARGV[1] number of jobs n, ARGV[2] number of stable IDs m, ARGV[3] the
// done markers' TTL (ms); then the lease members of the n finished jobs,
// their n job IDs and the m stable IDs.
// Returns {finished, left to others}.
var scriptFinish = newProbed(priorityLib + `
local n, m = tonumber(ARGV[1]), tonumber(ARGV[2])
local res = finish(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV, 4, n)
if m > 0 then redis.call('HDEL', KEYS[7], unpack(ARGV, 4 + 2 * n, 3 + 2 * n + m)) end
for i = 8, #KEYS do redis.call('SET', KEYS[i], '1', 'PX', ARGV[3]) end
return res
`)

// FinishParams are one call of scriptFinish.
type FinishParams struct {
	Leases []string // the lease members of the finished jobs
	IDs    []string // their job IDs, in the same order
	// JobIDs are the stable IDs of the jobs that have one of their own
	// (moved copies, chosen IDs): their trail is forgotten, and chosen IDs
	// leave a done marker for the queue's done retention.
	JobIDs []string
}

// Finish runs scriptFinish and returns how many jobs were finished and how
// many left to other workers. A call sent again finds the jobs gone and
// finishes nothing more.
func (s *PrioritySet) Finish(ctx context.Context, p FinishParams) (finished, left int64, err error) {
	k := &s.k
	args := make([]any, 0, 3+2*len(p.Leases)+len(p.JobIDs))
	args = append(args, len(p.Leases), len(p.JobIDs), s.q.doneTTL)
	for _, lm := range p.Leases {
		args = append(args, lm)
	}
	for _, id := range p.IDs {
		args = append(args, id)
	}
	for _, id := range p.JobIDs {
		args = append(args, id)
	}
	keys := s.q.doneKeys([]string{k.Leases, k.Ready, k.Delayed, k.Jobs, k.Deliveries, k.Waiting, k.Trail}, p.JobIDs)
	res, err := s.q.sc(scriptFinish).Run(ctx, s.q.client, keys, args...).Int64Slice()
	if err != nil {
		return 0, 0, err
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("unexpected finish reply %v", res)
	}
	return res[0], res[1], nil
}

// scriptKeepAlive extends the leases of running jobs. It runs at maxmemory
// (see allowOOM).
//
// KEYS[1] lease set
// ARGV[1] lease (ms), ARGV[2..] lease members of running jobs.
// Returns the lease members that no longer exist (the lease expired and the
// job was returned to the ready set): those jobs may run elsewhere now.
var scriptKeepAlive = redis.NewScript(allowOOM + priorityLib + `
local deadline = now_ms() + tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
`)

// KeepAliveParams are one call of scriptKeepAlive.
type KeepAliveParams struct {
	Lease  time.Duration // the new lease, from the server's time
	Leases []string      // the lease members of the running jobs
}

// KeepAlive runs scriptKeepAlive and returns the leases that are gone. A
// call sent again extends the leases again.
func (s *PrioritySet) KeepAlive(ctx context.Context, p KeepAliveParams) ([]string, error) {
	args := make([]any, 0, 1+len(p.Leases))
	args = append(args, p.Lease.Milliseconds())
	for _, lm := range p.Leases {
		args = append(args, lm)
	}
	return scriptKeepAlive.Run(ctx, s.q.client, []string{s.k.Leases}, args...).StringSlice()
}

// scriptReap returns expired leases and due retries to the ready set with
// their original score and member, so a job keeps its priority and its place
// among jobs of equal priority.
//
// KEYS[1] lease set, KEYS[2] delayed set, KEYS[3] ready set, KEYS[4] notify
// stream, KEYS[5] delivery counters, KEYS[6] waiting leases
// ARGV[1] maximum number of jobs to move from each set
// An expired lease counts as a crashed start of its job (its worker died
// while the handler ran), unless it waited uncharged, so the job's delivery
// counter is incremented.
// Returns {IDs of the jobs whose lease expired, number of due retries
// moved}. Any number of workers may run it concurrently: a job is moved
// exactly once. It runs at maxmemory (see allowOOM).
var scriptReap = newProbed(allowOOM + priorityLib + `
local now = now_ms()
local limit = tonumber(ARGV[1])
local expired = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
local waits = redis.call('HLEN', KEYS[6]) > 0
local ids = {}
for _, lm in ipairs(expired) do
  local m = lease_member(lm)
  local score = m and member_score(m)
  if score then
    redis.call('ZADD', KEYS[3], score, m)
    local id = member_id(m)
    if not (waits and redis.call('HDEL', KEYS[6], lm) == 1) then
      redis.call('HINCRBY', KEYS[5], id, 1)
    end
    ids[#ids + 1] = id
  end
  redis.call('ZREM', KEYS[1], lm)
end
local due = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
for _, m in ipairs(due) do
  local score = member_score(m)
  if score then redis.call('ZADD', KEYS[3], score, m) end
  redis.call('ZREM', KEYS[2], m)
  unmark_retry(KEYS[2], m)
end
if #expired + #due > 0 then notify(KEYS[4]) end
return {ids, #due}
`)

// Reap runs scriptReap for up to limit jobs of each set: it returns the IDs
// of the jobs whose lease expired and the number of due retries moved. A
// call sent again moves only what is still expired or due.
func (s *PrioritySet) Reap(ctx context.Context, limit int) ([]string, int64, error) {
	k := &s.k
	res, err := s.q.sc(scriptReap).Run(ctx, s.q.client, []string{k.Leases, k.Delayed, k.Ready, k.Notify, k.Deliveries, k.Waiting}, limit).Slice()
	if err != nil {
		return nil, 0, err
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("unexpected reap reply with %d elements", len(res))
	}
	var ids []string
	raw, _ := res[0].([]any)
	for _, v := range raw {
		s, _ := v.(string)
		ids = append(ids, s)
	}
	due, _ := res[1].(int64)
	return ids, due, nil
}

// scriptMarkWaiting charges or takes back the start of a leased job: a
// waiting lease (the job must wait before it starts) expires without
// counting a crash.
//
// KEYS[1] lease set, KEYS[2] waiting leases
// ARGV[1] lease member, ARGV[2] "1" to mark it waiting, "0" to charge it
// Returns 1 when the lease is held, else 0 (nothing changed).
var scriptMarkWaiting = redis.NewScript(`
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
if ARGV[2] == '1' then redis.call('HSET', KEYS[2], ARGV[1], 1) else redis.call('HDEL', KEYS[2], ARGV[1]) end
return 1
`)

// MarkWaitingParams are one call of scriptMarkWaiting.
type MarkWaitingParams struct {
	Lease   string // the lease member
	Waiting bool   // mark it waiting (true) or charged (false)
}

// MarkWaiting runs scriptMarkWaiting and reports whether the lease is
// held. A call sent again sets the same mark.
func (s *PrioritySet) MarkWaiting(ctx context.Context, p MarkWaitingParams) (bool, error) {
	flag := "0"
	if p.Waiting {
		flag = "1"
	}
	n, err := scriptMarkWaiting.Run(ctx, s.q.client, []string{s.k.Leases, s.k.Waiting}, p.Lease, flag).Int()
	return n == 1, err
}

// scriptRetry moves a failed job from its lease to the delayed set (or, with
// no delay, straight back to the ready set), with its new fields.
//
// KEYS[1] lease set, KEYS[2] ready set, KEYS[3] delayed set, KEYS[4] job
// hash, KEYS[5] delivery counters, KEYS[6] notify stream, KEYS[7] waiting
// leases, KEYS[8] the minute's throughput counters, KEYS[9] memo hash
// ARGV[1] lease member, ARGV[2] delay (ms), ARGV[3] the job's new data
// (packed wire fields whose attempt field carries the count of this copy,
// so the delivery counter restarts), ARGV[4] "1" to count a failure; then
// the memo token and TTL.
// Returns 1 when moved; 0 when the lease is no longer held and the job does
// not wait in the ready set either (another worker holds it, or it was
// settled), in which case nothing changed. A re-sent call returns what the
// first returned and changes nothing: without the memo, it would find the
// job in the ready set and write its old data over a newer retry's. The job
// is written to its new place and its new data stored before anything is
// deleted, so a write that fails (a foreign key of the wrong type) leaves
// the job as it was.
var scriptRetry = newProbed(idempotent(priorityLib+statsLib, `
local lm = ARGV[1]
local m = lease_member(lm)
local id = m and member_id(m)
if not id then return 0 end
local from
if redis.call('ZSCORE', KEYS[1], lm) then from = 'lease'
elseif redis.call('ZSCORE', KEYS[2], m) then from = 'ready'
else return 0 end
local delay = tonumber(ARGV[2])
if delay > 0 then
  redis.call('ZADD', KEYS[3], now_ms() + delay, m)
  local ok, f = pcall(cmsgpack.unpack, ARGV[3])
  if ok and type(f) == 'table' then mark_retry(KEYS[3], m, f, 1) end
else
  redis.call('ZADD', KEYS[2], member_score(m), m)
end
redis.call('HSET', KEYS[4], id, ARGV[3])
redis.call('HDEL', KEYS[5], id)
if delay > 0 then
  redis.call('ZREM', KEYS[2], m)
else
  notify(KEYS[6])
end
if from == 'lease' then redis.call('ZREM', KEYS[1], lm) end
unwait(KEYS[7], {lm})
if ARGV[4] == '1' then count(KEYS[8], 'failed', 1) end
return 1
`))

// RetryParams are one call of scriptRetry.
type RetryParams struct {
	Lease  string        // the lease member
	Delay  time.Duration // the job is due after it, by the server's time (0 or less: ready now)
	Data   []byte        // the job's new packed wire fields
	Settle Settle
	Memo   Memo // the call's memo (zero: a fresh one), the same for every send of it
}

// Retry runs scriptRetry and reports whether the job moved.
func (s *PrioritySet) Retry(ctx context.Context, p RetryParams) (bool, error) {
	k := &s.k
	ms := int64((max(p.Delay, 0) + time.Millisecond - 1) / time.Millisecond)
	keys := []string{k.Leases, k.Ready, k.Delayed, k.Jobs, k.Deliveries, k.Notify, k.Waiting, k.Stats(s.q.minute())}
	cmd, _ := s.q.runWrite(ctx, s.q.sc(scriptRetry), s.q.memoOr(p.Memo), Replicas{}, keys, []any{p.Lease, ms, p.Data, p.Settle.failed()})
	n, err := cmd.Int()
	return n == 1, err
}

// scriptPriorityDeadLetter moves a leased job to the queue's dead-letter
// stream.
//
// KEYS[1] lease set, KEYS[2] ready set, KEYS[3] job hash, KEYS[4] delivery
// counters, KEYS[5] dead-letter stream, KEYS[6] waiting leases, KEYS[7]
// trail hash, KEYS[8] the minute's throughput counters, KEYS[9] cancel
// requests, KEYS[10] memo hash
// ARGV[1] lease member, ARGV[2] dead-letter cap (0: none), ARGV[3] the
// job's stable ID, ARGV[4..] field/value arguments of the dead letter; then
// the memo token and TTL. The trail records the dead letter, the failure is
// counted and the job's cancel request removed.
// Returns the dead letter's entry ID, or false when the lease is no longer
// held and the job does not wait in the ready set either, in which case
// nothing changed. A re-sent call returns what the first returned.
var scriptPriorityDeadLetter = newProbed(idempotent(priorityLib+deadLib, `
local lm = ARGV[1]
local m = lease_member(lm)
local id = m and member_id(m)
if not id then return false end
local held = redis.call('ZSCORE', KEYS[1], lm)
if not held and not redis.call('ZSCORE', KEYS[2], m) then return false end
local dl = dead_letter(KEYS[5], tonumber(ARGV[2]), KEYS[7], KEYS[8], KEYS[9], ARGV[3], unpack(ARGV, 4))
if held then redis.call('ZREM', KEYS[1], lm) else redis.call('ZREM', KEYS[2], m) end
unwait(KEYS[6], {lm})
redis.call('HDEL', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
return dl
`))

// PriorityDeadLetterParams are one call of scriptPriorityDeadLetter.
type PriorityDeadLetterParams struct {
	Lease  string // the lease member
	Settle Settle // Failed is implied
	Fields []any  // the dead letter's fields
	Memo   Memo   // the call's memo (zero: a fresh one), the same for every send of it
}

// DeadLetter runs scriptPriorityDeadLetter under the queue's dead-letter
// cap; it returns "" when the lease is no longer held.
func (s *PrioritySet) DeadLetter(ctx context.Context, p PriorityDeadLetterParams) (string, error) {
	k := &s.k
	args := append([]any{p.Lease, s.q.dlCap, p.Settle.JobID}, p.Fields...)
	keys := []string{k.Leases, k.Ready, k.Jobs, k.Deliveries, k.Dead, k.Waiting, k.Trail, k.Stats(s.q.minute()), k.Cancel}
	cmd, _ := s.q.runWrite(ctx, s.q.sc(scriptPriorityDeadLetter), s.q.memoOr(p.Memo), Replicas{}, keys, args)
	id, err := cmd.Text()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return id, err
}
