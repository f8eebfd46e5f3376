package streamq

import (
	"math/rand/v2"
	"time"
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
