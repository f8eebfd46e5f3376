package pool

import (
	"context"
	"sync/atomic"
	"time"
)

// slots counts the free handler slots of a pool. One goroutine takes them
// (the engine's fetch loop); any goroutine gives them back. With a single
// taker, a counter and a wake-up channel do what a weighted semaphore does
// without a lock per job: giving back is an atomic add, and a wake-up is
// sent only while the taker waits for more than are free.
type slots struct {
	free atomic.Int64
	want atomic.Int64  // > 0 while the taker waits for that many
	wake chan struct{} // a token: the taker may find what it waits for
}

func newSlots(n int64) *slots {
	s := &slots{wake: make(chan struct{}, 1)}
	s.free.Store(n)
	return s
}

// take takes n slots, waiting until they are free or ctx ends (then it
// returns ctx's error and takes none, also when they are free: a cancelled
// fetch loop must stop). Only the taker calls it.
func (s *slots) take(ctx context.Context, n int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for {
		if s.free.Load() >= n {
			s.free.Add(-n) // only the taker takes: what it saw is still free
			return nil
		}
		// Say what it waits for, then look again: a giver either sees the
		// wish or gave before the second look (atomics are sequentially
		// consistent), so no wake-up is lost.
		s.want.Store(n)
		if s.free.Load() >= n {
			s.want.Store(0)
			continue
		}
		select {
		case <-s.wake: // may be stale: look again
			s.want.Store(0)
		case <-ctx.Done():
			s.want.Store(0)
			return ctx.Err()
		}
	}
}

// takeWithin is take with a bound on the wait; it reports whether it took
// them.
func (s *slots) takeWithin(ctx context.Context, n int64, d time.Duration) bool {
	if s.free.Load() >= n && ctx.Err() == nil {
		s.free.Add(-n)
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return s.take(wctx, n) == nil
}

// takeFree takes up to most of the free slots without waiting and returns
// how many it took. Only the taker calls it.
func (s *slots) takeFree(most int64) int64 {
	n := min(most, s.free.Load())
	if n <= 0 {
		return 0
	}
	s.free.Add(-n)
	return n
}

// give gives back n slots, waking the taker if it waits for them.
func (s *slots) give(n int64) {
	f := s.free.Add(n)
	if w := s.want.Load(); w > 0 && f >= w {
		select {
		case s.wake <- struct{}{}:
		default: // a token is there already
		}
	}
}
