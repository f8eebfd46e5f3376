package rdb

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// statsLib holds the helper that counts settlements in a minute's
// throughput counters (see [Keys.Stats]).
const statsLib = `
-- count adds n to field of the counters key; the key's first write of the
-- minute sets its expiry.
local function count(key, field, n)
  if n > 0 and redis.call('HINCRBY', key, field, n) == n then
    redis.call('EXPIRE', key, 7200)
  end
end
`

// deadLib holds the helpers that write dead letters (with statsLib's
// count).
const deadLib = statsLib + `
-- xadd_capped appends a dead letter of the field/value arguments to stream
-- key, which MAXLEN ~ trims to about cap entries (0 or less: no cap), and
-- keeps the overview's markers in step (see markLib). Returns its ID.
local function xadd_capped(key, cap, ...)
  local id
  if cap > 0 then
    id = redis.call('XADD', key, 'MAXLEN', '~', cap, '*', ...)
    forget_trimmed(key)
  else
    id = redis.call('XADD', key, '*', ...)
  end
  mark_cancelled(key, id, ...)
  return id
end

-- dead_letter appends a dead letter of the field/value arguments to stream
-- dead under cap, records it in the trail under the job's stable ID jid,
-- counts a failure in the minute's counters stats and removes the job's
-- cancel request. Returns the dead letter's ID.
local function dead_letter(dead, cap, trail, stats, cancel, jid, ...)
  local id = xadd_capped(dead, cap, ...)
  redis.call('HSET', trail, jid, 'x:' .. id)
  count(stats, 'failed', 1)
  redis.call('HDEL', cancel, jid)
  return id
end
`

// Minute returns the counter minute of t (Unix seconds / 60).
func Minute(t time.Time) int64 { return t.Unix() / 60 }

// Register records the queue as kind in the registry of its prefix (no hash
// tag: see [Registry]). A priority queue has a stream too (priority.Forward
// feeds its set from it), so KindStream is recorded only for a queue not
// recorded yet (HSETNX), and KindPriority always (HSET): the stream side
// starting after a restart never turns a priority queue back into a stream
// queue.
func (q *Queue) Register(ctx context.Context, kind string) error {
	if kind == KindStream {
		return q.client.HSetNX(ctx, Registry(q.prefix), q.name, kind).Err()
	}
	return q.client.HSet(ctx, Registry(q.prefix), q.name, kind).Err()
}

// RegisterWriteBehind records that a write-behind Writer feeds the queue.
func (q *Queue) RegisterWriteBehind(ctx context.Context) error {
	return q.client.HSet(ctx, WriteBehindRegistry(q.prefix), q.name, "1").Err()
}

// WorkerForget is how long a consumer or worker that stopped sending
// heartbeats without leaving (a crash) stays in the queue's workers set, and
// how long its heartbeat record lives.
const WorkerForget = 24 * time.Hour

// Heartbeat is what a consumer or worker records about itself at every
// control tick, as JSON under [Keys.Heartbeat].
type Heartbeat struct {
	Role        string `json:"role"` // "consumer" or "worker"
	Host        string `json:"host"`
	PID         int    `json:"pid"`
	Concurrency int    `json:"concurrency"`
	Version     string `json:"version"`
	Started     int64  `json:"started"` // Unix ms
	Every       int64  `json:"every"`   // control interval, ms
}

// ControlParams are one tick of a control loop.
type ControlParams struct {
	// Processed are jobs finished, by minute, to add to the throughput
	// counters.
	Processed map[int64]int64
	// Latency are wait and run time histograms and per-kind counts, by
	// minute and field of [Keys.Latency], to add to the latency hashes.
	Latency map[int64]map[string]int64
	// Worker, if not empty, is the name of a consumer or worker to record as
	// alive now in the workers set (those silent for WorkerForget are
	// removed from it).
	Worker string
	// Info, with Worker, is its heartbeat record (JSON of [Heartbeat]),
	// written with a TTL of WorkerForget.
	Info string
}

// Control reads, in one pipeline, whether the queue is paused and the
// stable IDs of the jobs whose cancellation was requested, adds
// p.Processed to the throughput counters, setting their expiry, and
// records p.Worker's heartbeat. On an error the counts may or may not have
// been added. A call sent again adds its counts again: the counters are
// statistics, not a guarantee.
//
// It also gives a TTL to the memo hashes of the current and the previous
// bucket if they have none (PEXPIRE ... NX, Redis 7; on older servers the
// command fails and is ignored): a producer sets the TTL of a bucket's hash
// with its first call in the bucket, and a hash deleted meanwhile (an
// operator deleting the queue's keys while producers run) is made again by
// later calls without one.
func (q *Queue) Control(ctx context.Context, p ControlParams) (paused bool, cancel []string, err error) {
	k := &q.keys
	pipe := q.client.Pipeline()
	ex := pipe.Exists(ctx, k.Paused)
	ids := pipe.HKeys(ctx, k.Cancel)
	for m, n := range p.Processed {
		pipe.HIncrBy(ctx, k.Stats(m), "processed", n)
		pipe.Expire(ctx, k.Stats(m), StatsTTL*time.Second)
	}
	k.addLatency(ctx, pipe, p.Latency)
	t := q.clock.Now()
	now := t.UnixMilli()
	if p.Worker != "" {
		pipe.ZAdd(ctx, k.Workers, redis.Z{Score: float64(now), Member: p.Worker})
		pipe.ZRemRangeByScore(ctx, k.Workers, "-inf", "("+strconv.FormatInt(t.Add(-WorkerForget).UnixMilli(), 10))
		if p.Info != "" {
			pipe.Set(ctx, k.Heartbeat(p.Worker), p.Info, WorkerForget)
		}
	}
	now -= now % memoBucket.Milliseconds()
	var ttls [2]*redis.BoolCmd
	for i, b := range []int64{now, now - memoBucket.Milliseconds()} {
		ttls[i] = redis.NewBoolCmd(ctx, "pexpire", memoKey(k.base, b), memoTTL.Milliseconds(), "nx")
		_ = pipe.Process(ctx, ttls[i])
	}
	cmds, _ := pipe.Exec(ctx) // the errors are in the commands
	for _, cmd := range cmds {
		if cmd == ttls[0] || cmd == ttls[1] {
			continue // optional
		}
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return false, nil, err
		}
	}
	return ex.Val() > 0, ids.Val(), nil
}

// Leave removes the heartbeat of the consumer or worker name (its entry in
// the workers set and its record) and its start lease: it stopped and runs
// nothing any more.
func (q *Queue) Leave(ctx context.Context, name string) error {
	pipe := q.client.TxPipeline()
	pipe.ZRem(ctx, q.keys.Workers, name)
	pipe.ZRem(ctx, q.keys.StartLeases, name)
	pipe.Del(ctx, q.keys.Heartbeat(name))
	_, err := pipe.Exec(ctx)
	return err
}

// scriptDropCancels removes cancel requests of stream jobs that are no
// longer pending in the group (they finished, were retried, dead-lettered,
// or never ran): nobody will act on them. A job's entry is the one its trail
// names (s:<entry ID>), else its stable ID; a trail naming any other place
// (delayed, dead) means the job is not running.
//
// KEYS[1] stream, KEYS[2] cancel requests, KEYS[3] trail hash
// ARGV[1] group, ARGV[2..] stable job IDs
// Returns the number of requests removed.
var scriptDropCancels = redis.NewScript(`
local gone = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local at = redis.call('HGET', KEYS[3], id)
  local entry = id
  if at then
    if string.sub(at, 1, 2) == 's:' then entry = string.sub(at, 3) else entry = nil end
  end
  local pending = false
  if entry and string.match(entry, '^%d+%-%d+$') then
    pending = #redis.call('XPENDING', KEYS[1], ARGV[1], entry, entry, 1) > 0
  end
  if not pending then gone[#gone + 1] = id end
end
if #gone == 0 then return 0 end
return redis.call('HDEL', KEYS[2], unpack(gone))
`)

// DropCancels runs scriptDropCancels for ids.
func (q *Queue) DropCancels(ctx context.Context, ids []string) (int, error) {
	k := &q.keys
	args := make([]any, 0, 1+len(ids))
	args = append(args, q.group)
	for _, id := range ids {
		args = append(args, id)
	}
	n, err := scriptDropCancels.Run(ctx, q.client, []string{k.Stream, k.Cancel, k.Trail}, args...).Int()
	if IsNoGroup(err) || IsNoSuchKey(err) {
		// No group or no stream: no job of it is pending.
		n64, err := q.client.HDel(ctx, k.Cancel, ids...).Result()
		return int(n64), err
	}
	return n, err
}

// scriptPriorityDropCancels removes cancel requests of priority jobs whose
// data is gone (they finished or were dead-lettered).
//
// KEYS[1] job hash, KEYS[2] cancel requests
// ARGV: job IDs
// Returns the number of requests removed.
var scriptPriorityDropCancels = redis.NewScript(`
local gone = {}
for i = 1, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then gone[#gone + 1] = ARGV[i] end
end
if #gone == 0 then return 0 end
return redis.call('HDEL', KEYS[2], unpack(gone))
`)

// DropCancels runs scriptPriorityDropCancels for ids.
func (s *PrioritySet) DropCancels(ctx context.Context, ids []string) (int, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return scriptPriorityDropCancels.Run(ctx, s.q.client, []string{s.k.Jobs, s.k.Cancel}, args...).Int()
}

// AddProcessed adds processed (jobs finished, by minute) to the throughput
// counters and latency (see [ControlParams.Latency]) to the latency hashes
// in one pipeline, setting their expiry.
func (q *Queue) AddProcessed(ctx context.Context, processed map[int64]int64, latency map[int64]map[string]int64) error {
	k := &q.keys
	pipe := q.client.Pipeline()
	for m, n := range processed {
		pipe.HIncrBy(ctx, k.Stats(m), "processed", n)
		pipe.Expire(ctx, k.Stats(m), StatsTTL*time.Second)
	}
	k.addLatency(ctx, pipe, latency)
	_, err := pipe.Exec(ctx)
	return err
}
