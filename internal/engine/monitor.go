package engine

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// EventKind says what an [Event] reports. The values are those of
// streamq.EventKind.
type EventKind int

// Event kinds.
const (
	EventRetried EventKind = iota + 1
	EventDeadLettered
	EventReclaimed
	EventDeleted
	EventClaimLost
	EventPostponed
)

// Event is something the engine or a backend did to a job besides running it.
type Event struct {
	Kind   EventKind
	Queue  string
	ID     string
	Run    *Run // the job, when it was decoded
	Err    error
	Delay  time.Duration
	Reason string
}

// Stats are the counters of a [Monitor]. Its fields are those of
// streamq.ConsumerStats, in the same order, so that it converts to it.
type Stats struct {
	Processed, Failed, Retried, DeadLettered  int64
	Reclaimed, Deleted, ClaimsLost, Postponed int64
}

// Health is the state of a run, for readiness and liveness probes. Its
// fields are those of streamq.Health, which converts from it.
type Health struct {
	Running      bool
	Fetching     bool
	ShuttingDown bool
	LastFetch    time.Time
	LastError    string
	LastErrorAt  time.Time
	Jobs         int
	Waiting      int
	Concurrency  int
	Paused       bool
}

// Monitor holds the counters, the health, the logger and the event hook of
// one consumer or worker. The engine and the backend report through it.
type Monitor struct {
	Log     *slog.Logger
	queue   string
	onEvent func(ctx context.Context, e Event)

	processed, failed, retried, postponed, dead atomic.Int64
	reclaimed, deleted, claimsLost              atomic.Int64

	running, fetching, stopping, paused atomic.Bool
	lastFetch, lastErrAt                atomic.Int64 // Unix ns
	lastErr                             atomic.Pointer[string]
	held                                atomic.Pointer[func() int]
	waiting                             atomic.Int64
	concurrency                         int
	deadLog                             deadLog
	lease                               startLease
}

// NewMonitor returns a monitor of queue that logs to log and calls onEvent
// (may be nil) for every event.
func NewMonitor(queue string, log *slog.Logger, onEvent func(ctx context.Context, e Event)) *Monitor {
	m := &Monitor{Log: log, queue: queue, onEvent: onEvent}
	m.lease.base = time.Now()
	return m
}

// Event reports e.
func (m *Monitor) Event(ctx context.Context, e Event) {
	switch e.Kind {
	case EventRetried:
		m.retried.Add(1)
	case EventPostponed:
		m.postponed.Add(1)
	case EventDeadLettered:
		m.dead.Add(1)
	case EventReclaimed:
		m.reclaimed.Add(1)
	case EventDeleted:
		m.deleted.Add(1)
	case EventClaimLost:
		m.claimsLost.Add(1)
	}
	if m.onEvent != nil {
		e.Queue = m.queue
		m.onEvent(ctx, e)
	}
}

// Stats returns the counters.
func (m *Monitor) Stats() Stats {
	return Stats{
		Processed:    m.processed.Load(),
		Failed:       m.failed.Load(),
		Retried:      m.retried.Load(),
		Postponed:    m.postponed.Load(),
		DeadLettered: m.dead.Load(),
		Reclaimed:    m.reclaimed.Load(),
		Deleted:      m.deleted.Load(),
		ClaimsLost:   m.claimsLost.Load(),
	}
}

// Health returns the state of the current run.
func (m *Monitor) Health() Health {
	h := Health{
		Running:      m.running.Load(),
		Fetching:     m.fetching.Load(),
		ShuttingDown: m.stopping.Load(),
		Waiting:      int(m.waiting.Load()),
		Concurrency:  m.concurrency,
		Paused:       m.paused.Load(),
	}
	if ns := m.lastFetch.Load(); ns != 0 {
		h.LastFetch = time.Unix(0, ns)
	}
	if s := m.lastErr.Load(); s != nil {
		h.LastError = *s
		if ns := m.lastErrAt.Load(); ns != 0 {
			h.LastErrorAt = time.Unix(0, ns)
		}
	}
	if f := m.held.Load(); f != nil && h.Running {
		h.Jobs = (*f)()
	}
	return h
}

func (m *Monitor) fetched(now time.Time) {
	m.lastFetch.Store(now.UnixNano())
	if m.lastErr.Load() != nil {
		m.lastErr.Store(nil)
	}
}

func (m *Monitor) fetchFailed(err error) {
	s := err.Error()
	m.lastErr.Store(&s)
	m.lastErrAt.Store(time.Now().UnixNano())
}
