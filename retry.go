package streamq

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/streamq/streamq/internal/pool"
)

// BackoffFunc returns the delay before retry number attempt (1 for the first
// retry of a job).
type BackoffFunc func(attempt int) time.Duration

// Default backoff bounds.
const (
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 10 * time.Minute
)

// DefaultBackoff is ExponentialBackoff(DefaultBackoffBase, DefaultBackoffMax).
func DefaultBackoff(attempt int) time.Duration {
	return fullJitter(DefaultBackoffBase, DefaultBackoffMax, attempt)
}

// ExponentialBackoff returns a backoff that waits a random time between 0 and
// min(max, base·2^(attempt-1)) ("full jitter"), which spreads the retries of
// many jobs that failed together.
func ExponentialBackoff(base, max time.Duration) BackoffFunc {
	return func(attempt int) time.Duration { return fullJitter(base, max, attempt) }
}

func fullJitter(base, ceil time.Duration, attempt int) time.Duration {
	d := expDelay(base, ceil, attempt)
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// expDelay is min(ceil, base·2^(attempt-1)), without overflow.
func expDelay(base, ceil time.Duration, attempt int) time.Duration {
	if base <= 0 || ceil <= 0 {
		return 0
	}
	d := base
	for i := 1; i < attempt && d < ceil; i++ {
		d *= 2
	}
	return min(d, ceil)
}

// promoteLoop moves due delayed jobs into the stream every SchedulerInterval.
// Any number of consumers may run it; the script moves each job exactly once.
func (r *run) promoteLoop(ctx context.Context) error {
	c := r.c
	// Start at a random offset so that consumers started together do not
	// poll in step: with n consumers a due job waits about interval/(2n).
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(rand.N(c.cfg.SchedulerInterval)):
	}
	t := time.NewTicker(c.cfg.SchedulerInterval)
	defer t.Stop()
	var bo pool.Backoff
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// Bounded: at most 100 batches per tick, then let other loops breathe.
		for range 100 {
			n, err := c.q.promote(ctx, time.Now(), DefaultSchedulerBatch)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if pool.Fatal(err) {
					return err
				}
				c.log.WarnContext(ctx, "streamq: cannot move due jobs, retrying", "error", err)
				if !bo.Wait(ctx) {
					return nil
				}
				break
			}
			bo.Reset()
			if n < DefaultSchedulerBatch {
				break
			}
		}
	}
}

// promote moves up to limit jobs due at now from the delayed set into the
// stream and returns how many it moved.
func (q *Queue) promote(ctx context.Context, now time.Time, limit int) (int, error) {
	return scriptPromote.Run(ctx, q.rdb, []string{q.stream, q.delayed, q.jobs}, millis(now), limit).Int()
}
