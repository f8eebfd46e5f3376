package pool

import (
	"sync/atomic"
	"time"
)

// Batcher hands items to a flush function in batches: under load it turns
// many small Redis calls into a few large ones, at the price of settling an
// item up to a linger later.
//
// Senders never wake the flushing goroutine per item. It sleeps through the
// linger instead of waiting on the channel, and the items sent meanwhile
// queue in the channel's buffer; a sender that brings the queue to the
// wanted size wakes it early, once. (Waiting on the channel itself would
// wake the flusher for every item: under load a wake-up and a goroutine
// switch per job.)
type Batcher[T any] struct {
	in   chan T
	full chan struct{} // a token: the queue reached need
	want int
	// need is how many queued items complete the batch that lingers: want
	// less what it holds already.
	need atomic.Int64
}

// NewBatcher returns a batcher whose queue holds up to buffer items (a
// sender waits when it is full) and whose linger ends early once want items
// are queued.
func NewBatcher[T any](buffer, want int) *Batcher[T] {
	b := &Batcher[T]{in: make(chan T, max(buffer, 1)), full: make(chan struct{}, 1), want: max(want, 1)}
	b.need.Store(int64(b.want))
	return b
}

// Add queues an item. It waits only when the queue is full.
func (b *Batcher[T]) Add(v T) {
	b.in <- v
	if int64(len(b.in)) >= b.need.Load() {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
}

// Close ends [Batcher.Run] once the queued items are flushed. Nothing may
// be added after it.
func (b *Batcher[T]) Close() { close(b.in) }

// Run hands the queued items to flush in batches of at most most, until
// Close. After the first item of a batch it takes what is queued, and while
// the batch holds fewer than want items it lingers up to linger for more.
func (b *Batcher[T]) Run(most int, linger time.Duration, flush func([]T)) {
	batch := make([]T, 0, most)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for item := range b.in {
		var open bool
		batch, open = b.take(append(batch[:0], item), most)
		if open && len(batch) < b.want && len(batch) < most {
			b.linger(t, linger, b.want-len(batch))
			batch, open = b.take(batch, most)
		}
		flush(batch)
		if !open {
			return
		}
	}
}

// linger waits up to d, or until a sender reports need more items queued.
func (b *Batcher[T]) linger(t *time.Timer, d time.Duration, need int) {
	select { // a token left by an earlier batch says nothing about this one
	case <-b.full:
	default:
	}
	b.need.Store(int64(need))
	defer b.need.Store(int64(b.want))
	if len(b.in) >= need { // a sender may have looked before need was set
		return
	}
	t.Reset(d)
	select {
	case <-t.C:
	case <-b.full:
		t.Stop()
	}
}

// take adds queued items to batch without waiting, up to most. It reports
// false when the queue was closed.
func (b *Batcher[T]) take(batch []T, most int) ([]T, bool) {
	for len(batch) < most {
		select {
		case item, ok := <-b.in:
			if !ok {
				return batch, false
			}
			batch = append(batch, item)
		default:
			return batch, true
		}
	}
	return batch, true
}
