package engine

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamq/streamq/internal/hist"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// latencySlots is the number of minutes a latency recorder keeps at once:
// the current one and two before it, so a handler that read the minute just
// before it turned still finds its slot.
const latencySlots = 3

// latHist is a wait and a run time histogram (see package hist).
type latHist struct {
	wait, run [hist.Buckets]atomic.Uint32
}

// kindHist is the histograms and counts of one kind in one minute.
type kindHist struct {
	name string
	latHist
	ok, failed atomic.Int64
}

// latMinute is the histograms of one minute: those of up to
// rdb.MaxLatencyKinds kinds, taken in the order they first ran, and one for
// the runs of the other kinds. The queue's histogram is their sum, made when
// they are drained: a run adds to one histogram, not two (the adds are
// atomic on counters every handler shares, so each costs at concurrency).
type latMinute struct {
	minute    atomic.Int64
	dirty     atomic.Bool // something was recorded since the last drain
	kinds     [rdb.MaxLatencyKinds]atomic.Pointer[kindHist]
	other     latHist // the runs of kinds without histograms of their own
	untracked atomic.Int64
}

// latency records the wait and run time of every handler run in fixed
// histograms per minute, without locks or allocations on the way of a job
// (a kind's histograms are allocated once per minute, the first time it
// runs), for the control loop to add to the queue's latency hashes with
// the throughput counters: one pipeline per control tick, never a command
// per job.
type latency struct {
	slots [latencySlots]latMinute
	// mu orders the turn of a slot to a new minute and the drains.
	mu sync.Mutex
	// pending are drained counts not written yet (minute -> field -> n).
	pending map[int64]map[string]int64
}

// record counts, in the minute of at, a handler run of kind that ran run
// long after waiting wait (wait < 0: unknown, not counted) and returned nil
// if ok.
func (l *latency) record(at time.Time, kind string, wait, run time.Duration, ok bool) {
	m := rdb.Minute(at)
	s := &l.slots[m%latencySlots]
	if s.minute.Load() != m {
		l.turn(s, m)
	}
	wi := -1
	if wait >= 0 {
		wi = hist.Index(wait)
	}
	ri := hist.Index(run)
	if k := s.kind(kind); k != nil {
		k.add(wi, ri)
		if ok {
			k.ok.Add(1)
		} else {
			k.failed.Add(1)
		}
	} else {
		s.other.add(wi, ri)
		s.untracked.Add(1)
	}
	if !s.dirty.Load() { // after the counts: see drain
		s.dirty.Store(true)
	}
}

func (h *latHist) add(wi, ri int) {
	if wi >= 0 {
		h.wait[wi].Add(1)
	}
	h.run[ri].Add(1)
}

// kind returns the histograms of kind in s, making them if there is room;
// nil if rdb.MaxLatencyKinds other kinds have them.
func (s *latMinute) kind(name string) *kindHist {
	for i := range s.kinds {
		k := s.kinds[i].Load()
		if k == nil {
			nk := &kindHist{name: strings.Clone(name)} // the name may be a view of a read buffer
			if s.kinds[i].CompareAndSwap(nil, nk) {
				return nk
			}
			k = s.kinds[i].Load()
		}
		if k.name == name {
			return k
		}
	}
	return nil
}

// turn makes s the slot of minute m, draining what it holds of an earlier
// minute first.
func (l *latency) turn(s *latMinute, m int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.minute.Load() == m {
		return
	}
	l.drain(s)
	for i := range s.kinds {
		s.kinds[i].Store(nil)
	}
	s.minute.Store(m)
}

// take returns the counts recorded and not written yet, and forgets them
// (nil: none).
func (l *latency) take() map[int64]map[string]int64 {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.slots {
		l.drain(&l.slots[i])
	}
	p := l.pending
	l.pending = nil
	return p
}

// put gives back counts that could not be written; those of minutes whose
// hashes have expired are dropped.
func (l *latency) put(c map[int64]map[string]int64, now time.Time) {
	if l == nil || len(c) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	oldest := rdb.Minute(now) - rdb.StatsTTL/60
	for m, fields := range c {
		if m <= oldest {
			continue
		}
		for f, n := range fields {
			l.pendingOf(m)[f] += n
		}
	}
}

// pendingOf returns the pending counts of minute m. l.mu is held.
func (l *latency) pendingOf(m int64) map[string]int64 {
	if l.pending == nil {
		l.pending = make(map[int64]map[string]int64, 2)
	}
	p := l.pending[m]
	if p == nil {
		p = make(map[string]int64)
		l.pending[m] = p
	}
	return p
}

// drain moves the counts of s to l.pending. l.mu is held. A count added
// after s.dirty was cleared here sets it again after it was added (see
// record), so the next drain finds it.
func (l *latency) drain(s *latMinute) {
	if !s.dirty.Swap(false) {
		return
	}
	m := s.minute.Load()
	var p map[string]int64
	get := func() map[string]int64 {
		if p == nil {
			p = l.pendingOf(m)
		}
		return p
	}
	var all [2][hist.Buckets]int64 // the queue's wait and run histograms
	for i := range s.kinds {
		k := s.kinds[i].Load()
		if k == nil {
			break
		}
		k.drain(get, k.name, true, &all)
		if n := k.ok.Swap(0); n > 0 {
			get()[rdb.LatencyCountField(rdb.LatencyOK, k.name)] += n
		}
		if n := k.failed.Swap(0); n > 0 {
			get()[rdb.LatencyCountField(rdb.LatencyFail, k.name)] += n
		}
	}
	s.other.drain(nil, "", false, &all)
	for i := range all[0] {
		if n := all[0][i]; n > 0 {
			get()[rdb.LatencyField(rdb.LatencyWait, i, "", false)] += n
		}
		if n := all[1][i]; n > 0 {
			get()[rdb.LatencyField(rdb.LatencyRun, i, "", false)] += n
		}
	}
	if n := s.untracked.Swap(0); n > 0 {
		get()[rdb.LatencyUntracked] += n
	}
}

// drain takes the counts of h, adds them to all (wait, run) and, if get is
// not nil, to kind's fields.
func (h *latHist) drain(get func() map[string]int64, kind string, perKind bool, all *[2][hist.Buckets]int64) {
	for i := range h.wait {
		if n := int64(h.wait[i].Swap(0)); n > 0 {
			all[0][i] += n
			if get != nil {
				get()[rdb.LatencyField(rdb.LatencyWait, i, kind, perKind)] += n
			}
		}
		if n := int64(h.run[i].Swap(0)); n > 0 {
			all[1][i] += n
			if get != nil {
				get()[rdb.LatencyField(rdb.LatencyRun, i, kind, perKind)] += n
			}
		}
	}
}

// readyMillis returns when the job of d became ready to run, Unix ms, 0 if
// unknown: the time of its stream entry (Redis's clock) for a stream
// delivery, else its enqueue time.
func readyMillis(d *Delivery, wj *wire.Job) int64 {
	if d.Fields != nil {
		if ms, _, ok := strings.Cut(d.Key, "-"); ok {
			if n, err := strconv.ParseInt(ms, 10, 64); err == nil && n > 0 {
				return n
			}
		}
	}
	return wj.EnqMillis
}

// recordRun counts a handler run of the job of d that started at start in
// the latency histograms of the minute it ended (as the throughput counters
// count it), if the run writes statistics. The wait is read with the
// process's clock against the time of the stream entry (the server's) or
// the producer's enqueue time: a clock that is off shifts it, never below 0.
func (r *run[F]) recordRun(d *Delivery, wj *wire.Job, start time.Time, ok bool) {
	if r.lat == nil {
		return
	}
	run := time.Since(start)
	wait := time.Duration(-1)
	if ready := readyMillis(d, wj); ready > 0 {
		wait = max(start.Sub(time.UnixMilli(ready)), 0)
	}
	at := start.Add(run)
	if r.cfg.DB != nil && !r.sysClock {
		at = r.cfg.DB.Now() // the clock of the throughput counters
	}
	r.lat.record(at, wj.Kind, wait, run, ok)
}
