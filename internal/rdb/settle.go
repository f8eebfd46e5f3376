package rdb

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Settling an attempt of a stream job: acknowledge it, write it again as a
// new copy (retry, postpone, hand back), dead-letter it; and requeue dead
// letters.

// scriptMove settles an attempt by writing the job again as a new copy:
// into the delayed set when it is due later (a retry, a postponement), or
// straight back into the stream (a hand-back, a retry without delay). The
// new copy is written before the old entry is acknowledged and deleted; the
// trail records where the job lives now, and a failed attempt is counted in
// the minute's throughput counters.
//
// KEYS[1] stream, KEYS[2] delayed sorted set, KEYS[3] delayed job hash,
// KEYS[4] trail hash, KEYS[5] the minute's counters; KEYS[6] memo hash
// ARGV[1] group, ARGV[2] consumer, ARGV[3] entry ID, ARGV[4] due time (see
// due_at: "+<ms>" after the server's time; "0": into the stream now), ARGV[5] delayed-set ID, ARGV[6] the job's
// stable ID, ARGV[7] "1" to count a failure, ARGV[8..] field/value
// arguments of the new copy; then the memo token and TTL.
// Returns 1 when moved; 0 when the entry is no longer pending for this
// consumer (another consumer took it over), in which case nothing changed.
// A re-sent call returns what the first returned (the pending check alone
// keeps it from moving anything again, but would say 0).
var scriptMove = newProbed(idempotent(streamLib+statsLib, moveBody))

const moveBody = `
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
local at
local due = due_at(ARGV[4])
if due > 0 then
  redis.call('HSET', KEYS[3], ARGV[5], cmsgpack.pack({unpack(ARGV, 8)}))
  redis.call('ZADD', KEYS[2], due, ARGV[5])
  mark_retry(KEYS[2], ARGV[5], ARGV, 8)
  at = 'd:' .. ARGV[5]
else
  at = 's:' .. redis.call('XADD', KEYS[1], '*', unpack(ARGV, 8))
end
redis.call('HSET', KEYS[4], ARGV[6], at)
if ARGV[7] == '1' then count(KEYS[5], 'failed', 1) end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return 1
`

// Settle is what a settlement records besides moving the job: its stable
// ID (for the trail), and whether the attempt counts as a failure in the
// throughput counters of the minute it happens in (by the queue's clock).
type Settle struct {
	JobID  string
	Failed bool
}

func (s Settle) failed() string {
	if s.Failed {
		return "1"
	}
	return "0"
}

// MoveParams are one call of scriptMove.
type MoveParams struct {
	Consumer string        // the consumer that holds the entry
	ID       string        // the entry
	Delay    time.Duration // the new copy is due after it, by the server's clock (0 or less: into the stream now)
	Settle   Settle
	Fields   []any // the new copy's wire fields
	Memo     Memo  // the call's memo (zero: a fresh one), the same for every send of it
	Flow     bool  // the queue is under flow control: give back the entry's slot
}

// Move runs scriptMove and reports whether the job moved. A delayed copy
// gets a new delayed-set ID.
func (q *Queue) Move(ctx context.Context, p MoveParams) (bool, error) {
	due, id := "0", ""
	if p.Delay > 0 {
		due, id = DueArg(time.Time{}, p.Delay), q.NewDelayedID()
	}
	k := &q.keys
	args := append([]any{q.group, p.Consumer, p.ID, due, id, p.Settle.JobID, p.Settle.failed()}, p.Fields...)
	cmd, _ := q.runWrite(ctx, q.sc(pick(p.Flow, scriptFlowMove, scriptMove)), q.memoOr(p.Memo), Replicas{}, []string{k.Stream, k.Delayed, k.DelayedJobs, k.Trail, k.Stats(q.minute())}, args)
	n, err := cmd.Int()
	return n == 1, err
}

// scriptDeadLetter moves a job from the stream to the dead-letter stream,
// records it in the trail and the minute's failures, removes its cancel
// request, and releases its unique-key lock.
//
// KEYS[1] stream, KEYS[2] dead-letter stream, KEYS[3] trail hash, KEYS[4]
// the minute's counters, KEYS[5] cancel requests, KEYS[6] (optional) the
// job's unique-key lock; last, the memo hash
// ARGV[1] group, ARGV[2] consumer, ARGV[3] entry ID, ARGV[4] dead-letter cap
// (0: none), ARGV[5] the job's lock token ("" without a lock), ARGV[6] the
// job's stable ID, ARGV[7..] field/value arguments of the dead letter; then
// the memo token and TTL.
// Returns the dead letter's entry ID, or false when the entry is no longer
// pending for this consumer, in which case nothing changed. A re-sent call
// returns what the first returned.
var scriptDeadLetter = newProbed(idempotent(streamLib+deadLib, deadLetterBody))

const deadLetterBody = `
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return false end
local id = dead_letter(KEYS[2], tonumber(ARGV[4]), KEYS[3], KEYS[4], KEYS[5], ARGV[6], unpack(ARGV, 7))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
if KEYS[6] then unlock(KEYS[6], ARGV[5]) end
return id
`

// DeadLetterParams are one call of scriptDeadLetter.
type DeadLetterParams struct {
	Consumer string // the consumer that holds the entry
	ID       string // the entry
	Key      string // the job's unique key ("": none)
	Token    string // the lock token of its unique key
	Settle   Settle // Failed is implied
	Fields   []any  // the dead letter's fields
	Memo     Memo   // the call's memo (zero: a fresh one), the same for every send of it
	Flow     bool   // the queue is under flow control: give back the entry's slot
}

// DeadLetter runs scriptDeadLetter under the queue's dead-letter cap. It
// returns the dead letter's ID, or "" when the entry is no longer pending
// for p.Consumer.
func (q *Queue) DeadLetter(ctx context.Context, p DeadLetterParams) (string, error) {
	k := &q.keys
	keys := []string{k.Stream, k.Dead, k.Trail, k.Stats(q.minute()), k.Cancel}
	if p.Key != "" {
		keys = append(keys, k.Unique(p.Key))
	}
	args := append([]any{q.group, p.Consumer, p.ID, q.dlCap, p.Token, p.Settle.JobID}, p.Fields...)
	cmd, _ := q.runWrite(ctx, q.sc(pick(p.Flow, scriptFlowDeadLetter, scriptDeadLetter)), q.memoOr(p.Memo), Replicas{}, keys, args)
	dl, err := cmd.Text()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return dl, err
}

// scriptRequeue moves dead letters back into the stream as fresh jobs (attempt
// counters, failure times, last error, the crashed mark, a flow slot mark
// and the count of hand-backs for an unknown kind dropped; headers,
// payload, stable ID and error history kept). A dead letter without a jid
// field gets its dl_id as one (the ID of the copy that was dead-lettered).
// The new entry is written and recorded in the trail before the dead letter
// is deleted.
//
// KEYS[1] dead-letter stream, KEYS[2] stream, KEYS[3] trail hash, KEYS[4]
// memo hash
// ARGV: dead-letter entry IDs; then the memo token and TTL.
// Returns an array with the new stream entry ID per argument, or false for a
// dead letter that does not exist. A re-sent call returns what the first
// returned (without the memo it would find the letters gone).
var scriptRequeue = newProbed(idempotent("", `
local out = {}
for i = 1, #ARGV do
  local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
  if #e == 0 then
    out[i] = false
  else
    local f = e[1][2]
    local fields = {}
    local jid, dlid
    for k = 1, #f, 2 do
      local name = f[k]
      if name == 'jid' then jid = f[k + 1] elseif name == 'dl_id' then dlid = f[k + 1] end
      if string.sub(name, 1, 3) ~= 'dl_' and name ~= 'attempt' and name ~= 'ff' and name ~= 'err' and name ~= 'crashed' and name ~= 'fs' and name ~= 'uk' then
        fields[#fields + 1] = name
        fields[#fields + 1] = f[k + 1]
      end
    end
    if #fields == 0 then fields = {'v', ''} end
    if not jid and dlid and dlid ~= '' then
      jid = dlid
      fields[#fields + 1] = 'jid'
      fields[#fields + 1] = jid
    end
    out[i] = redis.call('XADD', KEYS[2], '*', unpack(fields))
    if jid then redis.call('HSET', KEYS[3], jid, 's:' .. out[i]) end
    redis.call('XDEL', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[1] .. ':cancelled', ARGV[i]) -- see markLib
  end
end
return out
`))

// RequeueParams are one call of scriptRequeue.
type RequeueParams struct {
	IDs  []string // the dead letters
	Memo Memo     // the call's memo (zero: a fresh one), the same for every send of it
}

// Requeue runs scriptRequeue and returns the new entry IDs ("" for a dead
// letter that does not exist).
func (q *Queue) Requeue(ctx context.Context, p RequeueParams) ([]string, error) {
	args := make([]any, len(p.IDs))
	for i, id := range p.IDs {
		args[i] = id
	}
	cmd, _ := q.runWrite(ctx, q.sc(scriptRequeue), q.memoOr(p.Memo), Replicas{}, []string{q.keys.Dead, q.keys.Stream, q.keys.Trail}, args)
	res, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(res))
	for i, v := range res {
		out[i], _ = v.(string)
	}
	return out, nil
}

// scriptAck acknowledges finished jobs, forgets the trail of those that
// were moved (retried or requeued copies) or carry a chosen ID, leaves the
// done markers of chosen IDs, and releases their unique-key locks.
//
// KEYS[1] stream, KEYS[2] trail hash, KEYS[3..] unique-key locks of some of
// the jobs, then the done markers of the chosen IDs among the stable IDs
// ARGV[1] group, ARGV[2] number of entry IDs n, ARGV[3] number of stable
// IDs m, ARGV[4] number of done markers d, ARGV[5] their TTL (ms); then n
// entry IDs, m stable IDs of moved jobs, and one lock token per lock key,
// in the same order.
// Returns the number of entries acknowledged.
var scriptAck = redis.NewScript(streamLib + ackBody)

const ackBody = `
local n, m, d = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local acked = redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 6, 5 + n))
if m > 0 then redis.call('HDEL', KEYS[2], unpack(ARGV, 6 + n, 5 + n + m)) end
local locks = #KEYS - 2 - d
for i = 1, locks do unlock(KEYS[2 + i], ARGV[5 + n + m + i]) end
for i = 1, d do redis.call('SET', KEYS[2 + locks + i], '1', 'PX', ARGV[5]) end
return acked
`

// AckParams are one acknowledgement of finished jobs.
type AckParams struct {
	IDs []string // the entries
	// JobIDs are the stable IDs of the jobs that were moved (retried or
	// requeued copies) or carry a chosen ID, whose trail is forgotten.
	// Chosen IDs leave a done marker for the queue's done retention.
	JobIDs []string
	// Keys are the unique keys of the jobs that hold one, and Tokens their
	// lock tokens, in the same order: their locks are released.
	Keys, Tokens []string
	// Flow, if not empty, is the consumer that acknowledges, of a queue
	// under flow control: the slots of the entries it still owns are given
	// back.
	Flow string
	// Completed are the records of the jobs, for a queue that keeps
	// completed jobs (Config.Completed): nil on every other queue, whose
	// acknowledgement stays as it is without them.
	Completed []CompletedJob
}

// Ack acknowledges p.IDs in one XACK, or, when some of the jobs hold
// unique-key locks or were moved, in one script that also releases the
// locks, forgets the trail and leaves the done markers of chosen IDs. Jobs
// that were never moved cost nothing more than the XACK. A call sent again
// changes nothing more: the entries are acknowledged, the locks released
// and the trail forgotten already (a lock taken by another job since has
// another token), and a done marker written again only lives a little
// longer; so on a Redis Cluster the script is sent again as [Queue.redo]
// says.
func (q *Queue) Ack(ctx context.Context, p *AckParams) error {
	k := &q.keys
	if p.Completed != nil && q.completedTTL > 0 {
		return q.ackCompleted(ctx, p)
	}
	if len(p.Keys) == 0 && len(p.JobIDs) == 0 && p.Flow == "" {
		return q.client.XAck(ctx, k.Stream, q.group, p.IDs...).Err()
	}
	keys, args := q.ackArgs(p)
	s := scriptAck
	if p.Flow != "" {
		s, args = q.sc(scriptFlowAck), append(args, p.Flow)
	}
	// On a Redis Cluster, sent again while its slot migrates (TRYAGAIN: the
	// stream and the trail are on two nodes for a while) or fails over.
	return q.redo(ctx, func() error { return s.Run(ctx, q.client, keys, args...).Err() })
}

// ackArgs returns the keys and arguments of scriptAck for p.
func (q *Queue) ackArgs(p *AckParams) ([]string, []any) {
	k := &q.keys
	keys := make([]string, 0, 2+len(p.Keys)+len(p.JobIDs))
	keys = append(keys, k.Stream, k.Trail)
	for _, u := range p.Keys {
		keys = append(keys, k.Unique(u))
	}
	keys = q.doneKeys(keys, p.JobIDs)
	args := make([]any, 0, 5+len(p.IDs)+len(p.JobIDs)+len(p.Tokens))
	args = append(args, q.group, len(p.IDs), len(p.JobIDs), len(keys)-2-len(p.Keys), q.doneTTL)
	for _, id := range p.IDs {
		args = append(args, id)
	}
	for _, id := range p.JobIDs {
		args = append(args, id)
	}
	for _, t := range p.Tokens {
		args = append(args, t)
	}
	return keys, args
}

// ackCompleted acknowledges p and records its jobs as completed: in one
// script, or, under flow control, recording first and acknowledging in a
// second call (scriptFlowAck), so that a failure between the two leaves
// the jobs pending and recorded, to run and be recorded again. Each is
// sent again on a Redis Cluster as the plain acknowledgement is (a send
// records only entries still pending).
func (q *Queue) ackCompleted(ctx context.Context, p *AckParams) error {
	keys, args := q.ackArgs(p)
	if p.Flow == "" {
		keys, args = q.completedArgs(keys, args, p)
		return q.redo(ctx, func() error { return scriptAckCompleted.Run(ctx, q.client, keys, args...).Err() })
	}
	rkeys, rargs := q.completedArgs([]string{q.keys.Stream}, []any{q.group}, p)
	if err := q.redo(ctx, func() error { return scriptRecordCompleted.Run(ctx, q.client, rkeys, rargs...).Err() }); err != nil {
		return err
	}
	args = append(args, p.Flow)
	return q.redo(ctx, func() error { return q.sc(scriptFlowAck).Run(ctx, q.client, keys, args...).Err() })
}

// pick returns flow when under flow control, else plain.
func pick(underFlow bool, flow, plain probedScript) probedScript {
	if underFlow {
		return flow
	}
	return plain
}

// doneKeys appends to keys the done markers of the chosen IDs among ids
// (none when the queue keeps no done markers).
func (q *Queue) doneKeys(keys, ids []string) []string {
	if q.doneTTL <= 0 {
		return keys
	}
	for _, id := range ids {
		if !Generated(id) {
			keys = append(keys, q.keys.Done(id))
		}
	}
	return keys
}
