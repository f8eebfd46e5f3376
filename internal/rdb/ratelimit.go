package rdb

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// scriptTakeToken is the shared token bucket of the rate limiter of package middleware. A token that is
// not there yet may be reserved: the bucket goes negative and the caller
// waits until its token is due, so waiting workers are served in order with
// one round trip each and never poll. The clock is the Redis server's TIME,
// the same for every worker.
//
// KEYS[1]: the bucket, a hash with "tokens" (negative while future tokens
// are reserved) and "ts" (time of the last refill, microseconds of server
// TIME). A missing key is a full bucket; the key expires when it would be
// full again, so an unused limit leaves nothing behind.
// ARGV[1]: rate, tokens added per second (> 0).
// ARGV[2]: burst, the capacity of the bucket (>= 1).
// ARGV[3]: max_wait_ms, reserve a future token only if it is due within this
// many milliseconds.
// Returns {1, wait_ms} when a token was taken: the caller may start after
// wait_ms (0: at once); {0, wait_ms} when none was taken because the next one
// is due in wait_ms > max_wait_ms.
var scriptTakeToken = redis.NewScript(`
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
-- If the server clock went back (failover to a replica), refill nothing
-- until it has passed ts again.
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate / 1000000)
  ts = now
end
local wait = 0
if tokens < 1 then
  wait = math.ceil((1 - tokens) * 1000 / rate)
end
if wait > max_wait then
  return {0, wait}
end
tokens = tokens - 1
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', string.format('%.0f', ts))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
return {1, wait}
`)

// TakeToken runs scriptTakeToken.
func TakeToken(ctx context.Context, c redis.Scripter, key string, rate float64, burst int, maxWaitMillis int64) (took bool, waitMillis int64, err error) {
	res, err := scriptTakeToken.Run(ctx, c, []string{key}, rate, burst, maxWaitMillis).Int64Slice()
	if err != nil {
		return false, 0, err
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("unexpected reply %v", res)
	}
	return res[0] == 1, res[1], nil
}
