package rdb

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The scripts of the inspector's control verbs (package inspect). Each one
// checks the job's state and acts in the same step, so that it is safe while
// consumers run: a waiting job is either deleted or delivered, never both.
// Each keeps the trail hash (stable job ID -> current location) in step and
// does bounded work: one job, or at most MaxControlBatch dead letters.

// MaxControlBatch is the most dead letters one purge call handles.
const MaxControlBatch = 100

// Replies of the control scripts besides "ok".
const (
	ReplyGone    = "gone"    // the job is not (or no longer) where it was looked for
	ReplyRunning = "running" // the job is delivered to a consumer (leased)
	ReplyDone    = "done"    // the entry is acknowledged history
	ReplyWaiting = "waiting" // the job waits in the stream or ready set
)

// inspectLib holds helpers of the control scripts.
const inspectLib = `
-- last_delivered returns the last delivered ID of group on stream, or nil
-- when the group does not exist.
local function last_delivered(stream, group)
  if redis.call('EXISTS', stream) == 0 then return nil end
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local name, last
    for k = 1, #g, 2 do
      if g[k] == 'name' then name = g[k + 1] elseif g[k] == 'last-delivered-id' then last = g[k + 1] end
    end
    if name == group then return last end
  end
  return nil
end

-- entry_state returns 'gone', 'running', 'done' or 'waiting' for entry id
-- of stream in group, and its fields.
local function entry_state(stream, group, id)
  local e = redis.call('XRANGE', stream, id, id)
  if #e == 0 then return 'gone' end
  local last = last_delivered(stream, group)
  if last and not id_lt(last, id) then
    if #redis.call('XPENDING', stream, group, id, id, 1) > 0 then return 'running', e[1][2] end
    return 'done', e[1][2]
  end
  return 'waiting', e[1][2]
end

local function field(f, name)
  for k = 1, #f - 1, 2 do
    if f[k] == name then return f[k + 1] end
  end
  return nil
end

-- untrail forgets the location of job jid if it is still loc.
local function untrail(trail, jid, loc)
  if jid ~= '' and redis.call('HGET', trail, jid) == loc then redis.call('HDEL', trail, jid) end
end
`

// scriptDeleteWaiting deletes a waiting job from the stream: one not yet
// delivered to the group. A delivered one (running, or acknowledged) is
// left alone and its state returned, so a job is either deleted or run.
//
// KEYS[1] stream, KEYS[2] trail hash, KEYS[3] (optional) the job's
// unique-key lock
// ARGV[1] group, ARGV[2] entry ID, ARGV[3] stable job ID
// Returns "ok", or "gone", "running" or "done" when nothing changed.
var scriptDeleteWaiting = redis.NewScript(streamLib + inspectLib + `
local state, f = entry_state(KEYS[1], ARGV[1], ARGV[2])
if state ~= 'waiting' then return state end
redis.call('XDEL', KEYS[1], ARGV[2])
if KEYS[3] then unlock(KEYS[3], field(f, 'kt') or '') end
untrail(KEYS[2], ARGV[3], 's:' .. ARGV[2])
return 'ok'
`)

// DeleteParams name a job for a delete: its place, its stable ID, and its
// unique key, if it has one.
type DeleteParams struct {
	ID    string // the entry ID or delayed-set ID
	JobID string // the job's stable ID
	Key   string // its unique key ("": none)
	Token string // the lock token of its unique key (for a delayed job)
}

// DeleteWaiting runs scriptDeleteWaiting. A call sent again finds the
// entry gone and answers "gone".
func (q *Queue) DeleteWaiting(ctx context.Context, p DeleteParams) (string, error) {
	keys := []string{q.keys.Stream, q.keys.Trail}
	if p.Key != "" {
		keys = append(keys, q.keys.Unique(p.Key))
	}
	return scriptDeleteWaiting.Run(ctx, q.client, keys, q.group, p.ID, p.JobID).Text()
}

// scriptDeleteDelayed deletes a job from the delayed set (scheduled or
// waiting for a retry) and releases its unique-key lock.
//
// KEYS[1] delayed sorted set, KEYS[2] delayed job hash, KEYS[3] trail hash,
// KEYS[4] (optional) the job's unique-key lock
// ARGV[1] delayed-set ID, ARGV[2] stable job ID, ARGV[3] lock token
// Returns "ok", or "gone" when the job is not in the delayed set.
var scriptDeleteDelayed = newProbed(streamLib + inspectLib + `
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 'gone' end
redis.call('HDEL', KEYS[2], ARGV[1])
unmark_retry(KEYS[1], ARGV[1])
if KEYS[4] then unlock(KEYS[4], ARGV[3]) end
untrail(KEYS[3], ARGV[2], 'd:' .. ARGV[1])
return 'ok'
`)

// DeleteDelayed runs scriptDeleteDelayed. A call sent again finds the job
// gone and answers "gone".
func (q *Queue) DeleteDelayed(ctx context.Context, p DeleteParams) (string, error) {
	keys := []string{q.keys.Delayed, q.keys.DelayedJobs, q.keys.Trail}
	if p.Key != "" {
		keys = append(keys, q.keys.Unique(p.Key))
	}
	return q.sc(scriptDeleteDelayed).Run(ctx, q.client, keys, p.ID, p.JobID, p.Token).Text()
}

// scriptPurgeDead deletes dead letters (and cancelled jobs) for good.
//
// KEYS[1] dead-letter stream, KEYS[2] trail hash
// ARGV: up to MaxControlBatch dead-letter entry IDs
// Returns the number deleted.
var scriptPurgeDead = newProbed(streamLib + inspectLib + `
local n = 0
for i = 1, math.min(#ARGV, ` + fmt.Sprint(MaxControlBatch) + `) do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #e > 0 then
    local jid = field(e[1][2], 'jid') or field(e[1][2], 'dl_id') or ''
    n = n + redis.call('XDEL', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[1] .. ':cancelled', ARGV[i]) -- see markLib
    untrail(KEYS[2], jid, 'x:' .. ARGV[i])
  end
end
return n
`)

// PurgeDead runs scriptPurgeDead for up to MaxControlBatch ids. A call sent
// again finds the letters gone and deletes nothing more.
func (q *Queue) PurgeDead(ctx context.Context, ids []string) (int, error) {
	if len(ids) > MaxControlBatch {
		return 0, fmt.Errorf("purge of %d dead letters: at most %d per call", len(ids), MaxControlBatch)
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return q.sc(scriptPurgeDead).Run(ctx, q.client, []string{q.keys.Dead, q.keys.Trail}, args...).Int()
}

// scriptRunNow moves a delayed job (scheduled or waiting for a retry) into
// the stream at once, marked with its stable ID, and points the trail at
// the new entry. The entry is written before the job leaves the delayed set.
//
// KEYS[1] stream, KEYS[2] delayed sorted set, KEYS[3] delayed job hash,
// KEYS[4] trail hash
// ARGV[1] delayed-set ID, ARGV[2] stable job ID
// Returns the new entry ID, or "gone" when the job is not in the delayed set.
var scriptRunNow = newProbed(streamLib + inspectLib + `
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 'gone' end
local data = redis.call('HGET', KEYS[3], ARGV[1])
if not data then return 'gone' end
local f = cmsgpack.unpack(data)
if not field(f, 'jid') then
  f[#f + 1] = 'jid'
  f[#f + 1] = ARGV[2]
end
local id = redis.call('XADD', KEYS[1], '*', unpack(f))
redis.call('HSET', KEYS[4], ARGV[2], 's:' .. id)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
unmark_retry(KEYS[2], ARGV[1])
return id
`)

// RunNowParams name a delayed job for RunNow.
type RunNowParams struct {
	ID    string // its delayed-set ID
	JobID string // its stable ID
}

// RunNow runs scriptRunNow and returns the new entry ID, or "" when the job
// is not in the delayed set (a call sent again finds it gone).
func (q *Queue) RunNow(ctx context.Context, p RunNowParams) (string, error) {
	k := &q.keys
	s, err := q.sc(scriptRunNow).Run(ctx, q.client, []string{k.Stream, k.Delayed, k.DelayedJobs, k.Trail}, p.ID, p.JobID).Text()
	if s == ReplyGone {
		return "", err
	}
	return s, err
}

// scriptRequestCancel records a cancel request for a running stream job:
// one pending in the group. The consumer that holds it acts on the request.
//
// KEYS[1] stream, KEYS[2] cancel hash
// ARGV[1] group, ARGV[2] entry ID, ARGV[3] stable job ID, ARGV[4] now
// (Unix ms)
// Returns "ok", or the job's state ("gone", "waiting", "done") when it is
// not running.
var scriptRequestCancel = redis.NewScript(streamLib + inspectLib + `
local state = entry_state(KEYS[1], ARGV[1], ARGV[2])
if state ~= 'running' then return state end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
return 'ok'
`)

// RequestCancelParams name a running stream job to cancel.
type RequestCancelParams struct {
	ID    string // its entry ID
	JobID string // its stable ID
}

// RequestCancel runs scriptRequestCancel, stamping the request with the
// queue's clock. A call sent again records the request again.
func (q *Queue) RequestCancel(ctx context.Context, p RequestCancelParams) (string, error) {
	return scriptRequestCancel.Run(ctx, q.client, []string{q.keys.Stream, q.keys.Cancel}, q.group, p.ID, p.JobID, q.clock.Now().UnixMilli()).Text()
}

// scriptPriorityControl deletes, runs now or cancels a job of a priority
// set, found by its member in the ready or delayed set.
//
// KEYS[1] ready set, KEYS[2] delayed set, KEYS[3] job hash, KEYS[4]
// delivery counters, KEYS[5] notify stream, KEYS[6] trail hash, KEYS[7]
// cancel hash
// ARGV[1] action ("delete", "run", "cancel"), ARGV[2] the job's member
// ("" when it is not in the ready or delayed set), ARGV[3] job ID, ARGV[4]
// stable job ID, ARGV[5] now (Unix ms)
// Returns "ok", or the job's state when the action does not apply:
// "waiting" (in the ready set), "delayed" (in the delayed set), "running"
// (its data exists, in neither set: leased), "gone".
var scriptPriorityControl = newProbed(priorityLib + inspectLib + `
local action, m, id = ARGV[1], ARGV[2], ARGV[3]
local where = 'gone'
if m ~= '' and redis.call('ZSCORE', KEYS[1], m) then where = 'waiting'
elseif m ~= '' and redis.call('ZSCORE', KEYS[2], m) then where = 'delayed'
elseif redis.call('HEXISTS', KEYS[3], id) == 1 then where = 'running' end
if action == 'delete' and (where == 'waiting' or where == 'delayed') then
  if where == 'waiting' then redis.call('ZREM', KEYS[1], m) else redis.call('ZREM', KEYS[2], m) unmark_retry(KEYS[2], m) end
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  untrail(KEYS[6], ARGV[4], 'p:' .. id)
  return 'ok'
end
if action == 'run' and where == 'delayed' then
  redis.call('ZADD', KEYS[1], member_score(m), m)
  redis.call('ZREM', KEYS[2], m)
  unmark_retry(KEYS[2], m)
  notify(KEYS[5])
  return 'ok'
end
if action == 'cancel' and where == 'running' then
  redis.call('HSET', KEYS[7], ARGV[4], ARGV[5])
  return 'ok'
end
return where
`)

// PriorityControlParams are one call of scriptPriorityControl.
type PriorityControlParams struct {
	Action string // "delete", "run" or "cancel"
	Member string // the job's member ("" when it is not in the ready or delayed set)
	ID     string // the job ID
	JobID  string // the job's stable ID
}

// Control runs scriptPriorityControl, stamping a cancel request with the
// queue's clock. A call sent again finds the job deleted or moved (and
// answers its state), or records the cancel request again.
func (s *PrioritySet) Control(ctx context.Context, p PriorityControlParams) (string, error) {
	k := &s.k
	return s.q.sc(scriptPriorityControl).Run(ctx, s.q.client, []string{k.Ready, k.Delayed, k.Jobs, k.Deliveries, k.Notify, k.Trail, k.Cancel},
		p.Action, p.Member, p.ID, p.JobID, s.q.clock.Now().UnixMilli()).Text()
}

// Parts of the periodic scheduler's keys that the inspector reads.
const (
	// PartSchedules is a hash schedule name -> {"spec": ..., "next": Unix
	// ms}, written by the schedulers of the queue.
	PartSchedules = "periodic-schedules"
	// PartLastTick + name is a schedule's last enqueued tick (Unix ms),
	// written by scriptTick.
	PartLastTick = "periodic-last:"
)

// scriptLevelHeads returns the first member of each distinct score of a
// sorted set, lowest score first: for a priority set's ready set, the next
// (and oldest) job of each priority. Each step is one ZRANGE BYSCORE with
// LIMIT 1, O(log n), and at most ARGV[1] steps are taken.
//
// KEYS[1] sorted set
// ARGV[1] the most levels to return
// Returns {member, score, member, score, ...}.
var scriptLevelHeads = redis.NewScript(`
local out, from = {}, '-inf'
for _ = 1, tonumber(ARGV[1]) do
  local z = redis.call('ZRANGE', KEYS[1], from, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  if #z == 0 then break end
  out[#out + 1] = z[1]
  out[#out + 1] = z[2]
  from = '(' .. z[2]
end
return out
`)

// LevelHeads runs scriptLevelHeads on the ready set and returns the first
// max members of distinct scores, and their scores.
func (s *PrioritySet) LevelHeads(ctx context.Context, max int) ([]string, []float64, error) {
	res, err := scriptLevelHeads.Run(ctx, s.q.client, []string{s.k.Ready}, max).StringSlice()
	if err != nil {
		return nil, nil, err
	}
	members := make([]string, 0, len(res)/2)
	scores := make([]float64, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		s, err := strconv.ParseFloat(res[i+1], 64)
		if err != nil {
			return nil, nil, fmt.Errorf("unexpected score %q", res[i+1])
		}
		members = append(members, res[i])
		scores = append(scores, s)
	}
	return members, scores, nil
}
