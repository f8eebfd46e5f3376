package engine

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// shareHarness drives members of a share that always want slots: each
// member's goroutine acquires, reports its grant, and acquires again; the
// test releases slots one at a time once every driven member waits, so
// that each release goes to the member whose turn it is.
type shareHarness struct {
	t      *testing.T
	s      *Share
	ms     []*Member
	grants chan grant
	cancel context.CancelFunc
	done   chan struct{}
}

type grant struct {
	member int
	n      int64
}

func newShareHarness(t *testing.T, s *Share, ms ...*Member) *shareHarness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &shareHarness{t: t, s: s, ms: ms, grants: make(chan grant, 1024), cancel: cancel, done: make(chan struct{})}
	left := make(chan struct{}, len(ms))
	for _, m := range ms {
		m.Join() // as an engine's fetch loop does when it starts
	}
	for i, m := range ms {
		go func() {
			defer func() { left <- struct{}{} }()
			for {
				k, err := m.Acquire(ctx, 1, false, 0)
				if err != nil {
					return
				}
				m.Fetched(k, k, k)
				h.grants <- grant{i, k}
			}
		}()
	}
	go func() {
		for range ms {
			<-left
		}
		close(h.done)
	}()
	t.Cleanup(func() { cancel(); <-h.done })
	return h
}

// waitAll waits until every member waits in Acquire.
func (h *shareHarness) waitAll() {
	h.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		h.s.mu.Lock()
		n := 0
		for _, m := range h.ms {
			if m.want > 0 {
				n++
			}
		}
		h.s.mu.Unlock()
		if n == len(h.ms) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("only %d of %d members wait for slots", n, len(h.ms))
		}
		time.Sleep(50 * time.Microsecond) // the members are about to wait: nothing to signal it
	}
}

// next returns the next grant.
func (h *shareHarness) next() grant {
	h.t.Helper()
	select {
	case g := <-h.grants:
		return g
	case <-time.After(wait):
		h.t.Fatal("no grant")
		return grant{}
	}
}

// run takes the budget's initial grants, then releases one slot at a time
// until size+n slots were granted, and returns each member's slots.
func (h *shareHarness) run(n int) []int {
	h.t.Helper()
	var held []grant
	counts := make([]int, len(h.ms))
	for range h.s.Size() {
		g := h.next()
		counts[g.member]++
		held = append(held, g)
	}
	for range n {
		h.waitAll()
		g := held[0]
		held = held[1:]
		h.ms[g.member].Release(1)
		ng := h.next()
		counts[ng.member] += int(ng.n)
		held = append(held, ng)
	}
	return counts
}

func TestShare_WeightedShares(t *testing.T) {
	t.Parallel()
	s := NewShare(10, false)
	h := newShareHarness(t, s, s.Member(6, 10), s.Member(3, 10), s.Member(1, 10))
	counts := h.run(990)
	for i, want := range []int{600, 300, 100} {
		if d := counts[i] - want; d < -want/50 || d > want/50 {
			t.Errorf("member %d (weight %d/10) got %d of 1000 slots, want %d ±2%%", i, want/100, counts[i], want)
		}
	}
}

func TestShare_NoStarvation(t *testing.T) {
	t.Parallel()
	s := NewShare(4, false)
	h := newShareHarness(t, s, s.Member(MaxTestWeight, 4), s.Member(1, 4))
	// Of 3003 slots, the weight-1 member gets 3 (one per 1001), however
	// the first four went.
	counts := h.run(3*(MaxTestWeight+1) - 4)
	if counts[1] < 2 || counts[1] > 4 {
		t.Errorf("the weight-1 member got %d of %d slots beside one of weight %d, want 3", counts[1], 3*(MaxTestWeight+1), MaxTestWeight)
	}
}

// MaxTestWeight is the largest weight streamq allows (streamq.MaxQueueWeight).
const MaxTestWeight = 1000

func TestShare_Strict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewShare(2, true)
	hi, lo := s.Member(1, 2), s.Member(1, 2)
	hi.Join()
	lo.Join()
	// hi has not fetched yet: lo waits although every slot is free.
	got := make(chan int64, 1)
	go func() {
		k, err := lo.Acquire(ctx, 2, false, 0)
		if err != nil {
			k = -1
		}
		got <- k
	}()
	k, err := hi.Acquire(ctx, 2, false, 0)
	if err != nil || k != 2 {
		t.Fatalf("hi got %d, %v; want 2", k, err)
	}
	hi.Fetched(2, 2, 2) // full: more may wait
	hi.Release(2)       // both finished; hi is on its way back for more
	select {
	case k := <-got:
		t.Fatalf("lo got %d slots while hi has a backlog", k)
	case <-time.After(20 * time.Millisecond): // a wrong grant would come at once
	}
	k, err = hi.Acquire(ctx, 2, false, 0)
	if err != nil || k != 2 {
		t.Fatalf("hi got %d, %v; want 2", k, err)
	}
	hi.Fetched(2, 1, 1) // hi's queue is drained: lo may take what is free
	select {
	case k := <-got:
		if k != 1 {
			t.Fatalf("lo got %d slots, want the one free", k)
		}
	case <-time.After(wait):
		t.Fatal("lo got nothing after hi's queue was drained")
	}
	lo.Fetched(1, 1, 1)
	lo.Release(1)
	hi.Release(2)

	// A member with a backlog at its limit does not hold lower ones back.
	s2 := NewShare(2, true)
	hi2, lo2 := s2.Member(1, 1), s2.Member(1, 2)
	if k, _ := hi2.Acquire(ctx, 1, false, 0); k != 1 {
		t.Fatalf("hi got %d, want 1", k)
	}
	hi2.Fetched(1, 1, 1) // full, and at its limit
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if k, err := lo2.Acquire(cctx, 2, false, 0); k != 1 {
		t.Fatalf("lo got %d, %v beside a member at its limit, want the free slot", k, err)
	}
}

func TestShare_AcquireAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewShare(3, false)
	a, b := s.Member(1, 3), s.Member(1, 3)
	if k, _ := b.Acquire(ctx, 1, false, 0); k != 1 {
		t.Fatalf("b got %d, want 1", k)
	}
	b.Fetched(1, 1, 1)
	all := make(chan error, 1)
	go func() { all <- a.AcquireAll(ctx) }()
	waitFor(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return a.all })
	// While a waits for the whole budget, nobody else gets a slot.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if k, err := b.Acquire(cctx, 1, false, 0); err == nil {
		t.Fatalf("b got %d slots while a waits for all", k)
	}
	cancel()
	b.Release(1)
	select {
	case err := <-all:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("a did not get the whole budget once it was free")
	}
	a.Release(3)
	a.Idle() // a's queue is drained
	if k, _ := b.Acquire(ctx, 3, false, 0); k != 3 {
		t.Fatalf("b got %d after a released the budget, want 3", k)
	}
}

func TestShare_IdleGetsNoCredit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewShare(1, false)
	a, b := s.Member(1, 1), s.Member(1, 1)
	b.Idle() // b's queue has nothing; a takes 100 slots alone
	for range 100 {
		k, _ := a.Acquire(ctx, 1, false, 0)
		a.Fetched(k, k, k)
		a.Release(k)
	}
	// b comes back at the pass of the latest grant, not 100 slots behind.
	k, _ := b.Acquire(ctx, 1, false, 0)
	b.Fetched(k, k, k)
	b.Release(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.pass != b.pass {
		t.Errorf("passes a %d, b %d after b came back: b got credit for its idle time (or lost some)", a.pass, b.pass)
	}
}

// waitFor waits until cond holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(100 * time.Microsecond) // state inside the share: no signal for it
	}
}

// TestEngine_GatedLastAttemptAloneInWorker runs two gated engines on one
// share: the budget bounds the jobs of both, and a job making its last
// attempt alone in one engine runs with no job of the other beside it.
func TestEngine_GatedLastAttemptAloneInWorker(t *testing.T) {
	t.Parallel()
	s := NewShare(3, false)
	var busy []Delivery
	for i := range 12 {
		busy = append(busy, job("a"+strconv.Itoa(i)))
	}
	fa := newFake(busy...)
	took := Delivery{Key: "took", ID: "took", Fields: job("took", "attempt", "1").Fields, Prior: 1, Suspect: true}
	fb := newFake(job("b1"), took, job("b2"))
	var running, maxRunning, maxAlone atomic.Int64
	handle := func(_ context.Context, r *Run) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
		}
		if r.ID == "took" {
			maxAlone.Store(n)
		}
		time.Sleep(2 * time.Millisecond) // long enough for a neighbour to overlap if one could
		if r.ID == "took" {
			maxAlone.Store(max(maxAlone.Load(), running.Load()))
		}
		return nil
	}
	start(t, fa, Config{Concurrency: 3, Gate: s.Member(1, 3)}, handle)
	start(t, fb, Config{Concurrency: 3, Gate: s.Member(1, 3)}, handle)
	fa.settled(t, 12)
	fb.settled(t, 3)
	if m := maxRunning.Load(); m > 3 {
		t.Errorf("%d jobs ran at once on a share of 3", m)
	}
	if m := maxAlone.Load(); m != 1 {
		t.Errorf("%d jobs ran while a last attempt ran, want it alone in the whole share", m)
	}
}
