package rdb

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/wire"
)

// Batches of jobs with chosen IDs: EnqueueBatch with Job.ID, and the
// outbox relay, whose rows' jobs carry IDs made from the rows' identities
// (see OutboxIDPrefix), so that a row relayed twice stores one job.

// OutboxIDPrefix starts the job ID that the outbox relay gives the job of
// a row without an ID of its caller's: OutboxIDPrefix + the row's ID. No
// producer may choose an ID with this prefix (see JobIDProblem), so the
// IDs of rows never meet the IDs of other jobs.
const OutboxIDPrefix = "outbox:"

// jobIDLib holds the Lua helper that decides whether a chosen job ID is
// taken (scriptEnqueueOne, scriptEnqueueIDs).
const jobIDLib = `
-- id_taken reports whether chosen job ID jid is taken in a queue: its done
-- marker done exists (the job finished within the done retention), or the
-- trail places it where a job still lives (a location left behind by an
-- operator's manual change does not keep an ID taken). loc is jid's trail
-- location when the caller has read it (false: none), nil when not.
local function id_taken(stream, delayed, dead, trail, done, jid, loc)
  if redis.call('EXISTS', done) == 1 then return true end
  if loc == nil then loc = redis.call('HGET', trail, jid) end
  if not loc then return false end
  local kind, at = string.sub(loc, 1, 1), string.sub(loc, 3)
  if kind == 'd' then return redis.call('ZSCORE', delayed, at) ~= false end
  if kind == 's' then return #redis.call('XRANGE', stream, at, at) > 0 end
  if kind == 'x' then return #redis.call('XRANGE', dead, at, at) > 0 end
  return true
end
`

// scriptEnqueueIDs enqueues jobs with chosen IDs, each unless its ID is
// taken (see id_taken; a second job of the call with the ID of an earlier
// one is taken too), and records each new job in the trail, as
// scriptEnqueueOne does for one job. Due jobs go into the stream under the
// queue's cap (nothing is written when the new ones do not fit), the
// others into the delayed set. The reply is remembered under the call's
// memo token (see idempotent), so a re-sent call answers what the first
// answered and writes nothing. A new job due now costs an EXISTS and an
// XADD; the trail is read with one HMGET and written with one HSET per
// call.
//
// KEYS[1] stream, KEYS[2] delayed sorted set, KEYS[3] delayed job hash,
// KEYS[4] trail hash, KEYS[5] dead-letter stream, KEYS[5+j] the done marker
// of job j's ID, then the memo hash
// ARGV[1] cap (0 or less: none), ARGV[2] number of jobs n; then per job:
// its ID, its due time (see due_at; "0": now), its delayed-set ID ("" when
// due now), its field/value count c and c field/value arguments; then the
// memo token and TTL.
// Returns {added, flags}: how many jobs the call stored, and a string of n
// characters, "1" for a job stored and "0" for one whose ID was taken. Or
// an error reply starting with "QUEUEFULL" when the new due jobs do not fit
// under the cap.
var scriptEnqueueIDs = redis.NewScript(idempotent(streamLib+jobIDLib, `
local stream, delayed, jobs, trail, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local n = tonumber(ARGV[2])
local pos, jids, taken, seen, due_now = {}, {}, {}, {}, 0
local i = 3
for j = 1, n do
  pos[j], jids[j] = i, ARGV[i]
  i = i + 4 + tonumber(ARGV[i + 3])
end
local locs = redis.call('HMGET', trail, unpack(jids))
for j = 1, n do
  local jid = jids[j]
  taken[j] = seen[jid] or id_taken(stream, delayed, dead, trail, KEYS[5 + j], jid, locs[j])
  seen[jid] = true
  if not taken[j] and ARGV[pos[j] + 1] == '0' then due_now = due_now + 1 end
end
if due_now > 0 then
  local full = no_room(stream, tonumber(ARGV[1]), due_now)
  if full then return redis.error_reply(full) end
end
local flags, added, places = {}, 0, {}
for j = 1, n do
  if taken[j] then
    flags[j] = '0'
  else
    local p = pos[j]
    local last = p + 3 + tonumber(ARGV[p + 3])
    local at
    if ARGV[p + 1] == '0' then
      at = 's:' .. redis.call('XADD', stream, '*', unpack(ARGV, p + 4, last))
    else
      redis.call('HSET', jobs, ARGV[p + 2], cmsgpack.pack({unpack(ARGV, p + 4, last)}))
      redis.call('ZADD', delayed, due_at(ARGV[p + 1]), ARGV[p + 2])
      at = 'd:' .. ARGV[p + 2]
    end
    places[#places + 1], places[#places + 2] = ARGV[p], at
    flags[j] = '1'
    added = added + 1
  end
end
if added > 0 then redis.call('HSET', trail, unpack(places)) end
return {added, table.concat(flags)}
`))

// EnqueueIDsParams are one call of scriptEnqueueIDs: at most MaxBatchChunk
// jobs with chosen IDs, added with Add.
type EnqueueIDsParams struct {
	// Replicas is what the write waits for (zero: none).
	Replicas Replicas
	Memo     Memo // the call's memo (zero: a fresh one), the same for every send of it

	// Added is how many jobs the call stored; Taken[i] reports that job
	// i's ID was taken, so nothing was written for it. Set by EnqueueIDs.
	Added int
	Taken []bool

	ids  []string
	args []any
}

// enqueueIDsHead is the number of ARGV of scriptEnqueueIDs before the
// jobs' arguments: the cap and n.
const enqueueIDsHead = 2

// Add adds job j with chosen ID id (checked by the caller), due as due
// says (see DueArg; "0": now). It sets j.JobID to id.
func (p *EnqueueIDsParams) Add(q *Queue, id string, j *wire.Job, due string) {
	if p.args == nil {
		p.args = make([]any, enqueueIDsHead, enqueueIDsHead+16*8)
	}
	j.JobID = id
	p.ids = append(p.ids, id)
	var member string
	if due != "0" {
		member = q.NewDelayedID()
	}
	fields := j.Args()
	p.args = append(append(p.args, id, due, member, len(fields)), fields...)
}

// Len returns the number of jobs added.
func (p *EnqueueIDsParams) Len() int { return len(p.ids) }

// EnqueueIDs runs scriptEnqueueIDs for the jobs of p and sets p.Added and
// p.Taken. A refusal wraps [ErrQueueFull]; a write that p.Replicas did not
// acknowledge sets them and returns a [*streamqtype.NotReplicatedError].
func (q *Queue) EnqueueIDs(ctx context.Context, p *EnqueueIDsParams) error {
	if len(p.ids) == 0 {
		return nil
	}
	args := p.args
	args[0], args[1] = q.maxLen, len(p.ids)
	keys := make([]string, 0, 6+len(p.ids))
	keys = append(keys, q.keys.Stream, q.keys.Delayed, q.keys.DelayedJobs, q.keys.Trail, q.keys.Dead)
	for _, id := range p.ids {
		keys = append(keys, q.keys.Done(id))
	}
	cmd, werr := q.runWrite(ctx, scriptEnqueueIDs, q.memoOr(p.Memo), p.Replicas, keys, args)
	res, err := cmd.Slice()
	if err != nil {
		return Translate(err)
	}
	flags, _ := resAt(res, 1).(string)
	if len(res) != 2 || len(flags) != len(p.ids) || strings.Trim(flags, "01") != "" {
		return fmt.Errorf("unexpected enqueue reply %v for %d jobs", res, len(p.ids))
	}
	added, _ := res[0].(int64)
	p.Added = int(added)
	p.Taken = make([]bool, len(p.ids))
	for i := range flags {
		p.Taken[i] = flags[i] == '0'
	}
	return werr
}

// resAt returns res[i], or nil when res is shorter.
func resAt(res []any, i int) any {
	if i < len(res) {
		return res[i]
	}
	return nil
}
