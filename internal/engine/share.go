package engine

import (
	"context"
	"sync"
	"time"
)

const (
	// strideScale is the pass a member of weight 1 advances by per slot it
	// is granted (a member of weight w advances by strideScale/w: the
	// rounding is below one part in a million for weights up to 1000).
	strideScale = 1 << 32
	// passRebase is the pass at which every pass is lowered by the same
	// amount, long before an int64 could overflow.
	passRebase = 1 << 61
)

// Share divides one budget of handler slots between the engines of several
// queues (a streamq.Worker): every engine keeps its own pool, whose size is
// its queue's limit, and takes a slot of the share besides for every job it
// fetches, so that no more jobs run at once than the budget, and no more of
// one queue than its limit.
//
// Who gets the slots that free up, when several engines want them:
//
//   - Weighted (stride scheduling): every member has a pass that advances by
//     slots × strideScale/weight as it is granted slots, and the member
//     with the lowest pass that wants slots (or has a backlog and is on
//     its way back for more) is served first. While several queues
//     have jobs and wait for slots, each gets slots in proportion to its
//     weight, and a queue that waits is passed over only until the others'
//     passes exceed its own: it is never starved, however busy the others
//     are. A member that comes back after it had nothing to do starts at
//     the pass of the latest grant, so it cannot claim the slots of the
//     time it was idle.
//   - Strict: members are ranked; a member is served only when no member
//     of a higher rank wants slots or is likely to want them at once (its
//     latest fetch came back full and it has room under its limit: it is
//     on its way back). So a lower queue's job starts only once every higher
//     queue's latest look found no more than it took.
//
// An engine whose job must run alone takes the whole budget ([Member.AcquireAll]):
// nothing else is granted until every slot is free.
type Share struct {
	mu      sync.Mutex
	size    int64
	free    int64
	strict  bool
	members []*Member
	// vt is the pass of the latest grant (weighted): where a member that
	// comes back from idleness starts.
	vt int64
}

// NewShare returns a share of size slots, strict or weighted.
func NewShare(size int, strict bool) *Share {
	return &Share{size: int64(size), free: int64(size), strict: strict}
}

// Member returns a new member of s, ranked after the ones made before it,
// with weight (weighted mode, > 0) and limit, the most slots it can hold
// (its pool's size).
func (s *Share) Member(weight, limit int) *Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &Member{s: s, rank: len(s.members), weight: int64(max(weight, 1)), stride: strideScale / int64(max(weight, 1)),
		limit: int64(limit), wake: make(chan struct{}, 1)}
	s.members = append(s.members, m)
	return m
}

// Size returns the budget.
func (s *Share) Size() int { return int(s.size) }

// Member is one engine's part of a [Share]. Its Acquire, AcquireAll and
// Fetched are called by the engine's fetch loop only; Release by any
// goroutine.
type Member struct {
	s      *Share
	rank   int
	weight int64
	stride int64
	limit  int64

	// Guarded by s.mu.
	pass    int64
	want    int64 // > 0 while it waits in Acquire
	all     bool  // it waits in AcquireAll
	held    int64 // slots granted and not released
	backlog bool  // its latest fetch came back full (or it has not fetched yet)
	gone    bool  // its fetch loop ended

	wake chan struct{} // a token: it may be its turn
}

// Acquire waits until it is m's turn and a slot is free, and takes up to
// want free slots (want > 0). If gather is set (the latest fetch came back
// full, so a backlog is likely) and fewer than m's part of the budget are
// free (see part), it waits up to gatherWait for more, so that a busy
// worker fetches in batches rather than one slot at a time. It returns 0
// and ctx's error if ctx ended first.
func (m *Member) Acquire(ctx context.Context, want int64, gather bool, gatherWait time.Duration) (int64, error) {
	s := m.s
	var deadline time.Time
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	s.mu.Lock()
	if !m.backlog && m.pass < s.vt {
		m.pass = s.vt // back from idleness: no credit for the idle time
	}
	m.want = want
	for {
		if avail := s.avail(m); avail > 0 {
			target := min(want, s.part(m))
			if gather && avail < target {
				if deadline.IsZero() {
					deadline = time.Now().Add(gatherWait)
				}
				if d := time.Until(deadline); d > 0 {
					if timer == nil {
						timer = time.NewTimer(d)
					} else {
						timer.Reset(d)
					}
					if !m.sleep(ctx, timer.C) {
						return 0, ctx.Err()
					}
					continue
				}
			}
			k := min(want, avail)
			s.free -= k
			m.held += k
			m.want = 0
			s.vt = m.pass
			m.pass += k * m.stride
			if m.pass > passRebase {
				s.rebase()
			}
			s.wakeNext()
			s.mu.Unlock()
			return k, nil
		}
		if !m.sleep(ctx, nil) {
			return 0, ctx.Err()
		}
	}
}

// sleep waits, with s.mu held on entry and on return, for a wake-up, tick
// or ctx. It reports false, with m no longer waiting and s.mu released,
// if ctx ended.
func (m *Member) sleep(ctx context.Context, tick <-chan time.Time) bool {
	s := m.s
	s.mu.Unlock()
	select {
	case <-m.wake:
	case <-tick:
	case <-ctx.Done():
		s.mu.Lock()
		m.want, m.all = 0, false
		s.wakeNext()
		s.mu.Unlock()
		return false
	}
	s.mu.Lock()
	return true
}

// AcquireAll waits until every slot of the budget is free and takes them
// all, for a job that must run alone: nothing is granted to any member
// meanwhile. It returns ctx's error if ctx ended first.
func (m *Member) AcquireAll(ctx context.Context) error {
	s := m.s
	s.mu.Lock()
	m.all = true
	for {
		if s.next() == m && s.free == s.size {
			s.free = 0
			m.held += s.size
			m.all = false
			s.wakeNext()
			s.mu.Unlock()
			return nil
		}
		if !m.sleep(ctx, nil) {
			return ctx.Err()
		}
	}
}

// Fetched tells the share how a fetch of asked slots went: got jobs came
// back, of which started were started (the others wait to run alone). The
// slots not started are given back and not counted against m's share; a
// fetch that came back with fewer jobs than asked tells that m has no
// backlog.
func (m *Member) Fetched(asked, got, started int64) {
	s := m.s
	s.mu.Lock()
	m.backlog = got >= asked
	m.pass -= (asked - started) * m.stride
	s.giveLocked(m, asked-started)
	s.wakeNext() // the turn may have changed with the backlog
	s.mu.Unlock()
}

// Idle tells the share that m will not ask for slots soon (its queue is
// paused, or Redis failed): in strict mode lower members need not wait
// for it.
func (m *Member) Idle() {
	s := m.s
	s.mu.Lock()
	m.backlog = false
	s.wakeNext()
	s.mu.Unlock()
}

// Join tells the share that m's fetch loop starts: until its first fetch
// it is taken to have a backlog.
func (m *Member) Join() {
	s := m.s
	s.mu.Lock()
	m.backlog, m.gone = true, false
	s.mu.Unlock()
}

// Leave tells the share that m's fetch loop ended.
func (m *Member) Leave() {
	s := m.s
	s.mu.Lock()
	m.backlog, m.gone = false, true
	s.wakeNext()
	s.mu.Unlock()
}

// Release gives back n slots of jobs that finished running.
func (m *Member) Release(n int64) {
	if n <= 0 {
		return
	}
	s := m.s
	s.mu.Lock()
	s.giveLocked(m, n)
	s.mu.Unlock()
}

func (s *Share) giveLocked(m *Member, n int64) {
	if n <= 0 {
		return
	}
	m.held -= n
	s.free += n
	s.wakeNext()
}

// part is how many slots are worth gathering for one fetch of m: in
// weighted mode its weight's part of the budget among the members that
// want slots or have a backlog (all of it when it is alone), in strict mode
// the whole budget.
func (s *Share) part(m *Member) int64 {
	if s.strict {
		return s.size
	}
	busy := m.weight
	for _, o := range s.members {
		if o != m && (o.want > 0 || o.backlog && !o.gone && o.held < o.limit) {
			busy += o.weight
		}
	}
	return max(1, s.size*m.weight/busy)
}

// rebase lowers every pass by the latest grant's, keeping their order.
func (s *Share) rebase() {
	for _, o := range s.members {
		o.pass -= s.vt
	}
	s.vt = 0
}

// next returns the member whose turn it is, or nil: the first member
// waiting for the whole budget if any; else, of the members that wait or
// have a backlog and room under their limit (they are on their way back
// from a fetch), in strict mode the highest-ranked, in weighted mode the
// one with the lowest pass. Slots are held for a member on its way: given
// to others, they would be taken from its share.
func (s *Share) next() *Member {
	for _, m := range s.members {
		if m.all {
			return m
		}
	}
	var best *Member
	for _, m := range s.members {
		if m.want == 0 && (!m.backlog || m.gone || m.held >= m.limit) {
			continue // it does not want slots, or cannot take them
		}
		if s.strict {
			return m
		}
		if best == nil || m.pass < best.pass {
			best = m
		}
	}
	return best
}

// avail returns how many slots m may take now: every free slot when it is
// m's turn (see next). In weighted mode, while the member whose turn it is
// is on its way back from a fetch, the waiting member with the lowest pass
// may take the free slots beyond that member's part: they are kept for it
// only as far as its share needs them, so that members read side by side
// when slots are plenty and by weight when they are scarce.
func (s *Share) avail(m *Member) int64 {
	nx := s.next()
	switch {
	case nx == m:
		return s.free
	case nx == nil || nx.all || nx.want > 0 || s.strict || s.nextWaiting() != m:
		return 0
	}
	return max(0, s.free-s.part(nx))
}

// nextWaiting returns the waiting member with the lowest pass, or nil.
func (s *Share) nextWaiting() *Member {
	var best *Member
	for _, m := range s.members {
		if m.want > 0 && (best == nil || m.pass < best.pass) {
			best = m
		}
	}
	return best
}

// wakeNext wakes the member whose turn it is, if it waits (a member waiting
// for the whole budget when that is free), or else the waiting member that
// may take slots beside it (see avail).
func (s *Share) wakeNext() {
	m := s.next()
	if m == nil {
		return
	}
	if m.want == 0 && !m.all {
		if m = s.nextWaiting(); m == nil || s.avail(m) == 0 {
			return
		}
	}
	if m.all && s.free < s.size {
		return
	}
	select {
	case m.wake <- struct{}{}:
	default:
	}
}
