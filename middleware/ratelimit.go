package middleware

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
)

// DefaultRateLimitMaxWait is the longest a job waits for a token when
// RateLimitConfig.MaxWait is zero.
const DefaultRateLimitMaxWait = 30 * time.Second

// ErrRateLimited is wrapped (inside a [streamq.PostponeError]) by the error
// [RateLimiter.Wait] returns when no token would be free within the wait the
// job may spend.
var ErrRateLimited = errors.New("streamq: rate limited: no token free within the allowed wait")

// RateLimitConfig configures [NewRateLimiter]. Rate is required; every other
// field has a default.
type RateLimitConfig struct {
	// Rate is the number of jobs per second that all workers of the queue
	// together may start, in every process that uses the same Key. It must
	// be positive; fractions are allowed (0.5 is one job every two seconds).
	// Use the same Rate and Burst in every process.
	Rate float64

	// Burst is how many jobs may start at once after the limit was idle: the
	// capacity of the bucket. Over any window of t seconds at most
	// Burst + Rate·t jobs start. Defaults to 1 (no bursts).
	Burst int

	// Key is the Redis key of the shared bucket. Defaults to
	// <prefix>:{<queue>}:ratelimit, one limit per queue. Give several
	// queues' limiters the same key to share one limit between them (the
	// script uses one key, so this works on a Redis Cluster too).
	Key string

	// MaxWait is the longest one job waits for a token; it also never waits
	// past its context's deadline. A job that would have to wait longer is
	// not started: the middleware returns a [streamq.Postpone] error so the
	// consumer runs it again when a token is due, without charging an
	// attempt. Defaults to DefaultRateLimitMaxWait.
	MaxWait time.Duration
}

// RateLimiter is a token bucket in Redis shared by every worker of a queue,
// whatever process they run in. Each job takes one token in one script call
// that refills the bucket from the Redis server's clock; when no token is
// free, the job reserves the next one and waits for it (without polling, in
// the order the reservations were made), so jobs are delayed rather than
// failed. Create it with [NewRateLimiter]; it is safe for concurrent use and
// holds no resources.
type RateLimiter struct {
	rdb     redis.UniversalClient
	key     string
	rate    float64
	burst   int
	maxWait time.Duration
}

// NewRateLimiter returns the rate limiter of queue q, stored on q's Redis
// client. It copies, defaults and validates cfg.
func NewRateLimiter(q *streamq.Queue, cfg RateLimitConfig) (*RateLimiter, error) {
	if q == nil {
		return nil, &streamq.ConfigError{Field: "queue", Reason: "q is nil: create one with streamq.NewQueue"}
	}
	c := cfg
	if !(c.Rate > 0) || math.IsInf(c.Rate, 0) {
		return nil, &streamq.ConfigError{Field: "RateLimitConfig.Rate", Reason: fmt.Sprintf("%v: use a positive, finite number of jobs per second", c.Rate)}
	}
	switch {
	case c.Burst == 0:
		c.Burst = 1
	case c.Burst < 0:
		return nil, &streamq.ConfigError{Field: "RateLimitConfig.Burst", Reason: fmt.Sprintf("%d is negative: use a positive bucket size, or 0 for 1", c.Burst)}
	}
	switch {
	case c.MaxWait == 0:
		c.MaxWait = DefaultRateLimitMaxWait
	case c.MaxWait < 0:
		return nil, &streamq.ConfigError{Field: "RateLimitConfig.MaxWait", Reason: fmt.Sprintf("%s is negative: use a positive duration, or 0 for %s", c.MaxWait, DefaultRateLimitMaxWait)}
	}
	if c.Key == "" {
		c.Key = core.Of(q).Keys.Part("ratelimit")
	}
	return &RateLimiter{rdb: core.Of(q).RDB, key: c.Key, rate: c.Rate, burst: c.Burst, maxWait: c.MaxWait}, nil
}

// Key returns the Redis key of the bucket.
func (l *RateLimiter) Key() string { return l.key }

// Wait takes one token, waiting for it if need be. It returns nil once the
// caller may start. It waits at most RateLimitConfig.MaxWait and never past
// ctx's deadline: if the next token is due later, it takes none and returns
// a [*streamq.PostponeError] (wrapping [ErrRateLimited]) whose Delay is the
// time until the token is due plus up to half of it again, at random (so
// that jobs refused together do not all come back at once); a handler
// returning it has its job run again then, without charging an attempt. It returns the cause of ctx if ctx ends
// while waiting (the reserved token is then lost, which only slows the
// queue). When the bucket cannot be read (a Redis error) it returns a
// [*streamq.PostponeError] too, wrapping the Redis error, with a delay of
// MaxWait (at most 1 s) plus up to half of it: a job must never be charged
// an attempt, let alone dead-lettered, because the limiter failed.
func (l *RateLimiter) Wait(ctx context.Context) error {
	if ctx.Err() != nil {
		return fmt.Errorf("streamq: rate limit: %w", context.Cause(ctx))
	}
	limit := l.maxWait
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl))
	}
	took, waitMs, err := rdb.TakeToken(ctx, l.rdb, l.key, l.rate, l.burst, max(limit.Milliseconds(), 0))
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("streamq: rate limit: %w", context.Cause(ctx))
		}
		d := min(l.maxWait, time.Second)
		return streamq.Postpone(d+rand.N(d/2+1), fmt.Errorf("streamq: rate limit %s: %w", l.key, err))
	}
	wait := time.Duration(waitMs) * time.Millisecond
	if !took {
		// Jobs refused together would all come back when the same token is
		// due and be refused together again: spread them over half as much
		// again.
		delay := wait + rand.N(wait/2+1)
		return streamq.Postpone(delay, fmt.Errorf("%w (next token in %s, may wait %s)", ErrRateLimited, wait, max(limit, 0)))
	}
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("streamq: rate limit: %w", context.Cause(ctx))
	}
}

// Middleware returns middleware that calls [RateLimiter.Wait] before each job
// and runs the job only when it returns nil; otherwise it returns Wait's error
// without running the job. The [streamq.Postpone] error of a job that could
// not get a token within MaxWait makes the consumer run it again when a token
// is due, without charging an attempt: rate limiting only delays jobs. A
// Redis error in the limiter postpones the job the same way (see
// [RateLimiter.Wait]); one that retrying cannot fix, such as a command the
// user may not run, postpones every job until it is fixed, and shows in
// each postponed job's error (the [streamq.EventPostponed] event, the
// Logging middleware at debug level). They
// are not counted as failed (see [Metrics], [Logging] and [Tracing]) and never
// reach ConsumerConfig.MaxDeliveries, however long an overload lasts. Waiting
// jobs hold a handler slot, which keeps the consumer from reading more jobs
// than it may start.
//
// The middleware needs a runtime that understands [streamq.Postpone] (the
// [streamq.Consumer] and the priority worker do).
func (l *RateLimiter) Middleware() streamq.Middleware {
	return func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
			if err := l.Wait(ctx); err != nil {
				return err
			}
			return next.Handle(ctx, msg)
		})
	}
}
