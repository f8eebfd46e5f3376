package pool

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff paces retries of failing Redis calls in a run's loops: 50 ms
// doubling to 5 s, with jitter. The zero value is ready to use.
type Backoff struct{ n int }

// Reset starts over after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Peek returns the ceiling of the next delay, for logs.
func (b *Backoff) Peek() time.Duration {
	d := 50 * time.Millisecond
	for i := 0; i < b.n && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, 5*time.Second)
}

// Next returns the next delay: between half of Peek and Peek.
func (b *Backoff) Next() time.Duration {
	d := b.Peek()
	b.n++
	return d/2 + rand.N(d/2+1)
}

// Wait sleeps for the next delay; it reports false if ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
