package engine

import (
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Dead-letter log limits: the first deadLogBurst dead letters of each
// deadLogWindow are logged one by one, at WARN, with their job ID, reason and
// error; the others are counted by reason and summarised in one WARN line
// when the window is over (at the next dead letter after it, or when the run
// ends). One bad batch of 20,000 jobs thus writes a handful of lines, not
// 20,000, and nothing goes unreported: the summary has every count, and
// every dead letter still has its event and its entry in the dead-letter
// stream.
const (
	deadLogWindow = 10 * time.Second
	deadLogBurst  = 5
)

// deadLog is the dead-letter log limiter of a [Monitor].
type deadLog struct {
	mu      sync.Mutex
	now     func() time.Time // time.Now; tests replace it
	start   time.Time        // start of the current window
	logged  int              // dead letters logged one by one in the window
	skipped map[string]int64 // dead letters counted but not logged, by reason
}

// DeadLettered logs a dead letter of reason with the attributes args, one by
// one or as part of a later summary (see deadLogWindow).
func (m *Monitor) DeadLettered(reason string, args ...any) {
	l := &m.deadLog
	l.mu.Lock()
	now := l.clock()
	summary := l.rollLocked(now)
	one := l.logged < deadLogBurst
	if one {
		l.logged++
	} else {
		if l.skipped == nil {
			l.skipped = make(map[string]int64, 1)
		}
		l.skipped[reason]++
	}
	l.mu.Unlock()
	m.logDeadSummary(summary)
	if one {
		m.Log.Warn("streamq: job dead-lettered", append([]any{"reason", reason}, args...)...)
	}
}

// FlushDeadLog writes the summary of dead letters not yet logged, if any.
// The engine calls it when a run ends.
func (m *Monitor) FlushDeadLog() {
	l := &m.deadLog
	l.mu.Lock()
	s := l.takeLocked(l.clock())
	l.mu.Unlock()
	m.logDeadSummary(s)
}

// deadSummary is what a window counted without logging.
type deadSummary struct {
	window   time.Duration
	byReason map[string]int64
}

func (l *deadLog) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// rollLocked starts a new window when the current one is over, and returns
// the summary of the old one.
func (l *deadLog) rollLocked(now time.Time) deadSummary {
	if !l.start.IsZero() && now.Sub(l.start) < deadLogWindow {
		return deadSummary{}
	}
	s := l.takeLocked(now)
	l.start, l.logged = now, 0
	return s
}

// takeLocked returns the counts not yet logged and clears them.
func (l *deadLog) takeLocked(now time.Time) deadSummary {
	if len(l.skipped) == 0 {
		return deadSummary{}
	}
	s := deadSummary{window: now.Sub(l.start).Round(time.Millisecond), byReason: l.skipped}
	l.skipped = nil
	return s
}

// logDeadSummary writes s, if it counted anything.
func (m *Monitor) logDeadSummary(s deadSummary) {
	if len(s.byReason) == 0 {
		return
	}
	reasons := make([]string, 0, len(s.byReason))
	var total int64
	for r, n := range s.byReason {
		reasons = append(reasons, r)
		total += n
	}
	sort.Strings(reasons)
	attrs := make([]any, 0, len(reasons))
	for _, r := range reasons {
		attrs = append(attrs, slog.Int64(r, s.byReason[r]))
	}
	m.Log.Warn("streamq: more jobs dead-lettered than logged one by one; see the dead-letter stream",
		"count", total, "window", s.window, slog.Group("by_reason", attrs...))
}
