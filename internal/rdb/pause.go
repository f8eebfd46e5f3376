package rdb

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartLease is how long a consumer may start the jobs of its reads
// without looking at the pause flag, counted from a control tick that saw
// the queue running (see [Queue.TakeStartLease]). [Queue.StartLeases]
// counts the leases still open, so a pause waits at most this long for
// consumers that neither confirm nor run any more.
const StartLease = 3 * time.Second

// StartLeaseSlack is how much earlier than Redis a consumer ends its
// lease: the lease's start is the process's reading before the tick was
// sent, and this covers clock rates that differ between the process and
// the server.
const StartLeaseSlack = 300 * time.Millisecond

// scriptStartLease grants or refuses a start lease, atomically with the
// look at the pause flag: while the queue runs, the consumer's lease ends
// lease ms after the server's time; while it is paused, nothing changes
// (a consumer gives its lease back only once it stopped starting jobs, see
// scriptDropLease). Leases ended by the server's clock are removed.
//
// KEYS[1] pause flag, KEYS[2] leases (ZSET consumer -> end, Unix ms)
// ARGV[1] consumer, ARGV[2] lease (ms)
// Returns the pause flag's value, or false when the queue runs.
var scriptStartLease = redis.NewScript(timeLib + `
local p = redis.call('GET', KEYS[1])
if p then return p end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
return false
`)

// scriptLeases counts the start leases not yet ended by the server's clock.
//
// KEYS[1] leases
// Returns that count.
var scriptLeases = redis.NewScript(timeLib + `
return redis.call('ZCOUNT', KEYS[1], '(' .. now_ms(), '+inf')
`)

// TakeStartLease takes or renews consumer's start lease for [StartLease]
// unless the queue is paused, in one script. It returns the pause flag's
// value, "" when the queue runs (the lease was granted).
func (q *Queue) TakeStartLease(ctx context.Context, consumer string) (string, error) {
	v, err := scriptStartLease.Run(ctx, q.client, []string{q.keys.Paused, q.keys.StartLeases},
		consumer, StartLease.Milliseconds()).Text()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}

// DropStartLease gives consumer's start lease back: it starts no job
// without looking at the pause flag any more.
func (q *Queue) DropStartLease(ctx context.Context, consumer string) error {
	return q.client.ZRem(ctx, q.keys.StartLeases, consumer).Err()
}

// StartLeases counts the start leases still open: consumers that may
// start jobs without looking at the pause flag.
func (q *Queue) StartLeases(ctx context.Context) (int64, error) {
	return scriptLeases.Run(ctx, q.client, []string{q.keys.StartLeases}).Int64()
}
