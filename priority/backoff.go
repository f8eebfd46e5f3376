package priority

import (
	"context"
	"math/rand/v2"
	"strings"
	"time"
)

// backoff paces retries of failing Redis calls in the worker's loops: 50 ms
// doubling to 5 s, with jitter (the stream consumer's pacing).
type backoff struct{ n int }

func (b *backoff) reset() { b.n = 0 }

func (b *backoff) peek() time.Duration {
	d := 50 * time.Millisecond
	for i := 0; i < b.n && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, 5*time.Second)
}

func (b *backoff) next() time.Duration {
	d := b.peek()
	b.n++
	return d/2 + rand.N(d/2+1)
}

// wait sleeps for the next delay; it returns false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// isFatal reports Redis errors that retrying cannot fix.
func isFatal(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	for _, p := range []string{"WRONGTYPE", "NOPERM", "WRONGPASS", "NOAUTH", "ERR unknown command"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
