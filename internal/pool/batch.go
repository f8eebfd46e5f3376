package pool

import "time"

// Batch reads items from in until it is closed and hands them to flush in
// batches of at most most. After the first item of a batch it takes what is
// queued, and while the batch holds fewer than want items it lingers up to
// linger for more: under load that turns many small Redis calls into a few
// large ones, at the price of settling an item up to linger later. Senders
// never wait for the linger: the channel is drained while lingering.
func Batch[T any](in <-chan T, most, want int, linger time.Duration, flush func([]T)) {
	batch := make([]T, 0, most)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for item := range in {
		var open bool
		batch, open = gather(in, append(batch[:0], item), most, want, linger, t)
		flush(batch)
		if !open {
			return
		}
	}
}

// gather adds queued items to batch (see Batch). It reports false when in
// was closed.
func gather[T any](in <-chan T, batch []T, most, want int, linger time.Duration, t *time.Timer) ([]T, bool) {
	lingering, expired := false, false
	defer func() {
		if lingering {
			t.Stop()
		}
	}()
	for len(batch) < most {
		if len(batch) >= want || expired {
			select {
			case item, ok := <-in:
				if !ok {
					return batch, false
				}
				batch = append(batch, item)
				continue
			default:
				return batch, true
			}
		}
		if !lingering {
			t.Reset(linger)
			lingering = true
		}
		select {
		case item, ok := <-in:
			if !ok {
				return batch, false
			}
			batch = append(batch, item)
		case <-t.C:
			lingering, expired = false, true
		}
	}
	return batch, true
}
