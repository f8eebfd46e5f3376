package rdb

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Claims on stream entries: keeping running jobs' claims fresh, charging a
// start, taking over abandoned entries and entries of lost read replies, and
// pruning departed consumers. The calls that hand a consumer entries to
// start (Reclaim, Adopt) refuse while the queue is paused, in the same
// script: once Pause has set the flag, no consumer gets a job to start,
// however its own view of the flag lags. (Reads are XREADGROUP, pipelined
// with a look at the flag: see the consumer's backend.)

// pausedReply is the reply of a script that refused because the queue is
// paused.
const pausedReply = "paused"

// scriptTouch keeps running jobs' claims fresh.
//
// KEYS[1] stream
// ARGV[1] group, ARGV[2] consumer, ARGV[3..] entry IDs of jobs the consumer
// holds.
// Resets the idle time of the entries the consumer still owns (XCLAIM with
// min-idle 0 and JUSTID, which does not count a delivery) and returns the IDs
// it no longer owns.
var scriptTouch = redis.NewScript(streamLib + `
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

// TouchParams are one call of scriptTouch.
type TouchParams struct {
	Consumer string   // the consumer that holds the entries
	IDs      []string // the entries
}

// Touch runs scriptTouch and returns the IDs p.Consumer no longer owns. A
// call sent again only resets the idle times again.
func (q *Queue) Touch(ctx context.Context, p TouchParams) ([]string, error) {
	args := make([]any, 0, 2+len(p.IDs))
	args = append(args, q.group, p.Consumer)
	for _, id := range p.IDs {
		args = append(args, id)
	}
	return scriptTouch.Run(ctx, q.client, []string{q.keys.Stream}, args...).StringSlice()
}

// scriptCharge sets the delivery counter of an entry the consumer owns: the
// count of its handler starts. The engine charges a start this way right
// before it runs a job it took over (XAUTOCLAIM ... JUSTID does not count
// one), and takes back the charge of a read job that has to wait.
//
// KEYS[1] stream
// ARGV[1] group, ARGV[2] consumer, ARGV[3] entry ID, ARGV[4] the count
// Returns 1 when set, 0 when the entry is no longer pending for consumer.
var scriptCharge = redis.NewScript(streamLib + `
if not owned(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'RETRYCOUNT', ARGV[4], 'JUSTID')
return 1
`)

// ChargeParams are one call of scriptCharge.
type ChargeParams struct {
	Consumer string // the consumer that holds the entry
	ID       string // the entry
	Count    int    // the delivery counter to set: the entry's handler starts
}

// Charge runs scriptCharge and reports whether p.Consumer holds the entry.
// A call sent again sets the same count: it changes nothing more.
func (q *Queue) Charge(ctx context.Context, p ChargeParams) (bool, error) {
	n, err := scriptCharge.Run(ctx, q.client, []string{q.keys.Stream}, q.group, p.Consumer, p.ID, p.Count).Int()
	return n == 1, err
}

// scriptReclaim takes over entries idle for at least a minimum time (their
// consumer died, hung or lost Redis) without counting a delivery
// (XAUTOCLAIM ... JUSTID): a start is counted only when the job runs. The
// claim is remembered under a token, so a call re-sent after a lost reply
// returns the same entries instead of taking more.
//
// KEYS[1] stream, KEYS[2] the consumer's claims memo, KEYS[3] pause flag
// ARGV[1] group, ARGV[2] consumer, ARGV[3] min idle (ms), ARGV[4] cursor,
// ARGV[5] count, ARGV[6] token, ARGV[7] memo TTL (ms)
// Returns {"paused"} when the queue is paused (nothing taken over; a call
// sent again after the pause returns what the token took before it), else
// {next cursor, {IDs whose data was deleted}, ID, delivery counter, fields,
// ID, ...}.
var scriptReclaim = redis.NewScript(streamLib + `
if redis.call('EXISTS', KEYS[3]) == 1 then return {'paused'} end
local ids, nextc, deleted
if redis.call('HGET', KEYS[2], 'token') == ARGV[6] then
  nextc = redis.call('HGET', KEYS[2], 'next')
  ids = cmsgpack.unpack(redis.call('HGET', KEYS[2], 'ids'))
  deleted = cmsgpack.unpack(redis.call('HGET', KEYS[2], 'deleted'))
else
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], 'COUNT', ARGV[5], 'JUSTID')
  nextc, ids, deleted = r[1], r[2], r[3] or {}
  redis.call('HSET', KEYS[2], 'token', ARGV[6], 'next', nextc, 'ids', cmsgpack.pack(ids), 'deleted', cmsgpack.pack(deleted))
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
end
local out = {nextc, deleted}
claimed(KEYS[1], ARGV[1], ARGV[2], ids, out, deleted)
return out
`)

// Claimed is an entry taken over by [Reclaim] or [Adopt].
type Claimed struct {
	ID     string
	Count  int // its delivery counter: handler starts charged to this copy
	Fields map[string]any
}

// ReclaimParams are one call of scriptReclaim.
type ReclaimParams struct {
	Consumer string        // the consumer that takes the entries over
	MinIdle  time.Duration // how long an entry must be idle
	Cursor   string        // where the pass over the pending list stands ("0-0": at the start)
	Count    int           // the most entries to take over
	// Token names the call: a call sent again with the same token returns
	// what the first took over, and takes nothing more.
	Token string
	// MemoTTL is how long the call is remembered for that.
	MemoTTL time.Duration
}

// Reclaim runs scriptReclaim. It returns the cursor of the next call, the
// entries taken over, and the IDs of pending entries whose data was gone;
// or [ErrPaused] when the queue is paused.
func (q *Queue) Reclaim(ctx context.Context, p ReclaimParams) (next string, jobs []Claimed, deleted []string, err error) {
	res, err := scriptReclaim.Run(ctx, q.client, []string{q.keys.Stream, q.keys.Claims(p.Consumer), q.keys.Paused},
		q.group, p.Consumer, p.MinIdle.Milliseconds(), p.Cursor, p.Count, p.Token, p.MemoTTL.Milliseconds()).Slice()
	if err != nil {
		return p.Cursor, nil, nil, err
	}
	if len(res) == 1 && res[0] == pausedReply {
		return p.Cursor, nil, nil, ErrPaused
	}
	return parseClaimed(res)
}

// scriptAdopt takes back entries that were delivered to the consumer by a
// read whose reply never arrived (the connection broke after Redis sent it,
// and the client re-sent the read): they are pending for the consumer, which
// never saw them. Their handlers never started, so their delivery counters
// go back to 0.
//
// KEYS[1] stream, KEYS[2] pause flag
// ARGV[1] group, ARGV[2] consumer, ARGV[3..] entry IDs
// Returns {"paused"} when the queue is paused (the counters are reset, but
// nothing is taken back: the consumer leaves them pending until the
// resume), else as scriptReclaim, with cursor "0-0", for the IDs pending for
// consumer.
var scriptAdopt = redis.NewScript(streamLib + `
local ids, deleted = {}, {}
for i = 3, #ARGV do
  if owned(KEYS[1], ARGV[1], ARGV[2], ARGV[i]) then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'RETRYCOUNT', 0, 'JUSTID')
    ids[#ids + 1] = ARGV[i]
  end
end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'paused'} end
local out = {'0-0', deleted}
claimed(KEYS[1], ARGV[1], ARGV[2], ids, out, deleted)
return out
`)

// AdoptParams are one call of scriptAdopt.
type AdoptParams struct {
	Consumer string   // the consumer the entries were delivered to
	IDs      []string // the entries
}

// Adopt runs scriptAdopt and returns the entries taken back and the IDs of
// those whose data was gone, or [ErrPaused] when the queue is paused. A
// call sent again takes back the same entries (still pending for
// p.Consumer) and resets their counters again.
func (q *Queue) Adopt(ctx context.Context, p AdoptParams) ([]Claimed, []string, error) {
	args := make([]any, 0, 2+len(p.IDs))
	args = append(args, q.group, p.Consumer)
	for _, id := range p.IDs {
		args = append(args, id)
	}
	res, err := scriptAdopt.Run(ctx, q.client, []string{q.keys.Stream, q.keys.Paused}, args...).Slice()
	if err != nil {
		return nil, nil, err
	}
	if len(res) == 1 && res[0] == pausedReply {
		return nil, nil, ErrPaused
	}
	_, jobs, deleted, err := parseClaimed(res)
	return jobs, deleted, err
}

// parseClaimed decodes {cursor, {deleted}, id, count, fields, ...}.
func parseClaimed(res []any) (next string, jobs []Claimed, deleted []string, err error) {
	if len(res) < 2 || (len(res)-2)%3 != 0 {
		return "0-0", nil, nil, fmt.Errorf("unexpected claim reply with %d elements", len(res))
	}
	next, _ = res[0].(string)
	if ids, ok := res[1].([]any); ok {
		for _, d := range ids {
			if s, ok := d.(string); ok {
				deleted = append(deleted, s)
			}
		}
	}
	for i := 2; i+2 < len(res); i += 3 {
		id, _ := res[i].(string)
		n, _ := res[i+1].(int64)
		jobs = append(jobs, Claimed{ID: id, Count: int(n), Fields: fieldMap(res[i+2])})
	}
	return next, jobs, deleted, nil
}

// fieldMap turns a reply's flat field/value array (or RESP3 map) into a map.
func fieldMap(v any) map[string]any {
	switch kv := v.(type) {
	case []any:
		m := make(map[string]any, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			m[k] = kv[i+1]
		}
		return m
	case map[any]any:
		m := make(map[string]any, len(kv))
		for k, v := range kv {
			s, _ := k.(string)
			m[s] = v
		}
		return m
	}
	return nil
}

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

// PruneParams are one call of scriptPrune.
type PruneParams struct {
	Idle time.Duration // how long a consumer without pending entries must be idle
	Self string        // the calling consumer, never deleted
}

// Prune runs scriptPrune and returns the names of the consumers it
// deleted. A call sent again finds them gone and deletes nothing more.
func (q *Queue) Prune(ctx context.Context, p PruneParams) ([]string, error) {
	return scriptPrune.Run(ctx, q.client, []string{q.keys.Stream}, q.group, p.Idle.Milliseconds(), p.Self).StringSlice()
}
