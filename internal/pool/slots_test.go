package pool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestSlots(t *testing.T) {
	t.Parallel()
	s := newSlots(4)
	ctx := context.Background()
	if err := s.take(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if got := s.takeFree(5); got != 1 {
		t.Fatalf("takeFree(5) with 1 free took %d", got)
	}
	if s.takeWithin(ctx, 1, time.Millisecond) {
		t.Fatal("takeWithin took a slot when none was free")
	}
	// A taker waiting for 2 is woken only once 2 are free.
	done := make(chan error, 1)
	go func() { done <- s.take(ctx, 2) }()
	s.give(1)
	select {
	case <-done:
		t.Fatal("take(2) returned with 1 slot free")
	case <-time.After(10 * time.Millisecond):
	}
	s.give(1)
	if err := recv(t, done, "take(2)"); err != nil {
		t.Fatal(err)
	}
	s.give(4)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.take(cctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("take with a cancelled context = %v, want context.Canceled even with slots free", err)
	}
	if got := s.free.Load(); got != 4 {
		t.Fatalf("%d slots free, want 4", got)
	}
}

// TestSlots_NoLostWakeup runs one taker against many givers: every slot
// given back is taken again, so the taker never waits for a wake-up that
// was lost between its look at the count and its wait.
func TestSlots_NoLostWakeup(t *testing.T) {
	t.Parallel()
	const n, rounds = 8, 20000
	s := newSlots(n)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	work := make(chan struct{}, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for range work {
				s.give(1)
			}
		})
	}
	for i := range rounds {
		k := int64(1 + i%n)
		if err := s.take(ctx, k); err != nil {
			t.Fatalf("round %d: take(%d) never returned: %v", i, k, err)
		}
		for range k {
			work <- struct{}{}
		}
	}
	close(work)
	wg.Wait()
	if got := s.free.Load(); got != n {
		t.Fatalf("%d slots free at the end, want %d", got, n)
	}
}
