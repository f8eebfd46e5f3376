package rdb

import (
	"context"
	"errors"
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

// Minute returns the counter minute of t (Unix seconds / 60).
func Minute(t time.Time) int64 { return t.Unix() / 60 }

// Register records queue name of kind in the registry of prefix (one HSET,
// no hash tag: see [Registry]).
func Register(ctx context.Context, c redis.Cmdable, prefix, name, kind string) error {
	return c.HSet(ctx, Registry(prefix), name, kind).Err()
}

// RegisterWriteBehind records that a write-behind Writer feeds queue name.
func RegisterWriteBehind(ctx context.Context, c redis.Cmdable, prefix, name string) error {
	return c.HSet(ctx, WriteBehindRegistry(prefix), name, "1").Err()
}

// Control reads, in one pipeline, whether the queue is paused and the
// stable IDs of the jobs whose cancellation was requested, and adds
// processed (jobs finished, by minute) to the throughput counters, setting
// their expiry. extra, if not nil, adds commands to the same pipeline (a
// worker's heartbeat). On an error the counts may or may not have been
// added.
//
// It also gives a TTL to the memo hashes of the current and the previous
// bucket if they have none (PEXPIRE ... NX, Redis 7; on older servers the
// command fails and is ignored): a producer sets the TTL of a bucket's hash
// with its first call in the bucket, and a hash deleted meanwhile (an
// operator deleting the queue's keys while producers run) is made again by
// later calls without one.
func Control(ctx context.Context, c redis.Cmdable, k Keys, processed map[int64]int64, extra func(redis.Pipeliner)) (paused bool, cancel []string, err error) {
	pipe := c.Pipeline()
	ex := pipe.Exists(ctx, k.Paused)
	ids := pipe.HKeys(ctx, k.Cancel)
	for m, n := range processed {
		pipe.HIncrBy(ctx, k.Stats(m), "processed", n)
		pipe.Expire(ctx, k.Stats(m), StatsTTL*time.Second)
	}
	now := time.Now().UnixMilli()
	now -= now % memoBucket.Milliseconds()
	var ttls [2]*redis.BoolCmd
	for i, b := range []int64{now, now - memoBucket.Milliseconds()} {
		ttls[i] = redis.NewBoolCmd(ctx, "pexpire", memoKey(k.base, b), memoTTL.Milliseconds(), "nx")
		_ = pipe.Process(ctx, ttls[i])
	}
	if extra != nil {
		extra(pipe)
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
if #gone > 0 then redis.call('HDEL', KEYS[2], unpack(gone)) end
return #gone
`)

// DropCancels runs scriptDropCancels for ids.
func DropCancels(ctx context.Context, c redis.Cmdable, k Keys, group string, ids []string) (int, error) {
	args := make([]any, 0, 1+len(ids))
	args = append(args, group)
	for _, id := range ids {
		args = append(args, id)
	}
	n, err := scriptDropCancels.Run(ctx, c, []string{k.Stream, k.Cancel, k.Trail}, args...).Int()
	if IsNoGroup(err) || IsNoSuchKey(err) {
		// No group or no stream: no job of it is pending.
		return 0, c.HDel(ctx, k.Cancel, ids...).Err()
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
if #gone > 0 then redis.call('HDEL', KEYS[2], unpack(gone)) end
return #gone
`)

// PriorityDropCancels runs scriptPriorityDropCancels for ids.
func PriorityDropCancels(ctx context.Context, c redis.Scripter, pk PriorityKeys, ids []string) (int, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return scriptPriorityDropCancels.Run(ctx, c, []string{pk.Jobs, pk.Cancel}, args...).Int()
}

// AddProcessed adds processed (jobs finished, by minute) to the throughput
// counters in one pipeline, setting their expiry.
func AddProcessed(ctx context.Context, c redis.Cmdable, k Keys, processed map[int64]int64) error {
	pipe := c.Pipeline()
	for m, n := range processed {
		pipe.HIncrBy(ctx, k.Stats(m), "processed", n)
		pipe.Expire(ctx, k.Stats(m), StatsTTL*time.Second)
	}
	_, err := pipe.Exec(ctx)
	return err
}
