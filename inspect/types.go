package inspect

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/streamq/streamq"
)

// Overview is a snapshot of one queue's counts.
type Overview struct {
	Name        string
	Kind        Kind
	Paused      bool
	WriteBehind bool
	// Length is the number of entries in the stream (including
	// acknowledged history not trimmed yet); for a priority queue the jobs
	// in its ready, lease and delayed sets.
	Length int64
	// Waiting jobs are not yet delivered to a consumer (ready, for a
	// priority queue); Running ones are delivered and not acknowledged
	// (leased); Delayed are scheduled for later; Retrying wait for a retry
	// (their data has an attempt above 0 or an error). The split of the
	// delayed set into Delayed and Retrying, and of the dead letters into
	// Dead and Cancelled, comes from markers that the scripts moving jobs
	// keep beside those structures (counted with SCARD and ZCARD); jobs
	// that an older streamq retried or cancelled have none and count as
	// Delayed and Dead.
	Waiting, Running, Delayed, Retrying int64
	// Dead letters, of which Cancelled were cancelled jobs (dl_reason
	// "cancelled"); Dead counts the others.
	Dead, Cancelled int64
	// Completed is the number of completed jobs kept (0 unless the queue
	// keeps them: streamq.QueueConfig.CompletedRetention).
	Completed int64
	// Consumers and workers alive now: with a heartbeat within
	// [LiveWithin].
	Consumers int
	// OldestWaiting is the age of the oldest waiting job; 0 when nothing
	// waits.
	OldestWaiting time.Duration
	// Estimated is true when Waiting is a lower bound: Redis could not tell
	// the group's lag (an entry after the last delivered one was deleted)
	// and counting the entries after it stopped at Options.ScanLimit.
	Estimated bool
}

// Point is one minute of throughput.
type Point struct {
	At                time.Time // start of the minute
	Processed, Failed int64
	// WaitP50 and WaitP95 are the median and the 95th percentile of the
	// time the jobs that ran waited ready before their handler started
	// (from their stream entry's time, or the enqueue time on a priority
	// queue); RunP50 and RunP95 those of the handlers' run times. Only
	// [Queue.History] sets them (0: no job ran). Each is read from a
	// histogram whose buckets are at most 1/8 of their value wide: it is
	// within 6.25 % of the wait or run time of the job of its rank (within
	// 0.5 µs below 8 µs), and times from about 19 hours on all read as 19
	// hours.
	WaitP50, WaitP95, RunP50, RunP95 time.Duration
}

// MaxThroughputMinutes is the most minutes Throughput returns: the counters
// are kept for two hours.
const MaxThroughputMinutes = 120

// State is the state of a job.
type State string

// States of a job.
const (
	StateWaiting   State = "waiting"   // in the queue, not yet delivered
	StateRunning   State = "running"   // delivered to a consumer (leased, for a priority queue)
	StateDelayed   State = "delayed"   // scheduled for later (ProcessIn, ProcessAt)
	StateRetrying  State = "retrying"  // failed, waiting for its retry
	StateDead      State = "dead"      // dead-lettered
	StateCancelled State = "cancelled" // cancelled while it ran; kept as a dead letter
	StateDone      State = "done"      // finished with a result stored
	// StateCompleted: succeeded, and recorded because the queue keeps
	// completed jobs (streamq.QueueConfig.CompletedRetention).
	StateCompleted State = "completed"
)

var states = []State{StateWaiting, StateRunning, StateDelayed, StateRetrying, StateDead, StateCancelled, StateDone, StateCompleted}

// ParseState parses a state name ("waiting", "running", ...).
func ParseState(s string) (State, error) {
	for _, st := range states {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("inspect: unknown state %q: use one of waiting, running, delayed, retrying, dead, cancelled, done, completed", s)
}

// Reasons are the dead-letter reasons streamq writes (dl_reason), in the
// order the CLI and the dashboard offer them.
var reasons = []string{streamq.ReasonMaxDeliveries, streamq.ReasonPermanent, streamq.ReasonMalformed, streamq.ReasonCancelled}

// Reasons returns the dead-letter reasons streamq writes.
func Reasons() []string { return slices.Clone(reasons) }

// ParseReason checks a dead-letter reason typed by a person: one of
// [Reasons], else an error (errors.Is [ErrUnknownReason]) that lists them.
func ParseReason(s string) (string, error) {
	if slices.Contains(reasons, s) {
		return s, nil
	}
	return "", fmt.Errorf("%w %q: use one of %s", ErrUnknownReason, s, strings.Join(reasons, ", "))
}

// Limits of a listing.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// ListOptions selects the jobs of one listing call.
type ListOptions struct {
	// State of the jobs to list. Required.
	State State
	// Cursor continues from a previous Page.Cursor; "" starts at the
	// beginning.
	Cursor string
	// Limit is the most jobs returned. Defaults to DefaultListLimit (50);
	// at most MaxListLimit (1000).
	Limit int
	// Header keeps jobs whose headers hold every pair.
	Header map[string]string
	// Grep keeps jobs whose payload contains this substring.
	Grep string
	// Kind keeps jobs of this kind (see streamq.WithKind); "" keeps every
	// kind.
	Kind string
	// Tags keeps jobs that carry every one of these tags (see
	// streamq.Tags).
	Tags []string
	// Dead keeps the dead letters (StateDead, StateCancelled) it selects:
	// reason, error text and time (its IDs are not used). A filtered page
	// examines up to the inspector's ScanLimit letters to fill it.
	Dead DeadFilter
}

// Page is one page of a listing.
type Page struct {
	Jobs []Job
	// Cursor continues the listing; "" when there are no more entries.
	// A page may hold fewer than Limit jobs (even none) and a cursor: the
	// call stopped after examining ScanLimit entries.
	Cursor string
	// Scanned is the number of entries the call examined, at most the
	// inspector's ScanLimit.
	Scanned int
}

// Failure is one failed attempt of a job.
type Failure struct {
	At      time.Time
	Attempt int
	Error   string
}

// Progress is what a handler last reported with streamq.SetProgress.
type Progress struct {
	Percent int
	Message string
	At      time.Time
}

// Job is one job as the inspector sees it.
type Job struct {
	// ID is the job's stable ID: the ID of its first copy, kept when it is
	// retried or requeued (the jid field). Use it with Queue.Job and the
	// control verbs.
	ID string
	// EntryID is the ID of the current copy: stream entry, delayed-set
	// member, dead-letter entry or priority job.
	EntryID string
	Queue   string
	State   State
	Payload []byte
	Headers map[string]string
	// Attempt is the number of attempts charged so far.
	Attempt int
	// Priority of a job of a priority queue: its priority header, else
	// the negated score of its member (a queue with LowerFirst shows its
	// priorities negated).
	Priority   int64
	EnqueuedAt time.Time
	DueAt      time.Time // delayed and retrying: when it runs
	StartedAt  time.Time // running: when the current run started (approximate: from the entry's idle time); completed: see FinishedAt
	DeadAt     time.Time // dead and cancelled: when it was dead-lettered
	// FinishedAt is when a completed job was acknowledged (Redis's
	// clock); StartedAt is then when its successful run started, and
	// RunTime how long it ran.
	FinishedAt time.Time
	Owner      string // running: the consumer or worker
	// RunTime is how long the current run has been going (running jobs;
	// for a stream job, the idle time of its pending entry, which the
	// consumer's keep-alive resets, so it is a lower bound).
	RunTime   time.Duration
	LastError string
	Errors    []Failure // the last failures, oldest first
	Reason    string    // dead and cancelled: dl_reason
	Progress  *Progress
	Result    []byte
	TraceID   string // from the traceparent header
	// Key is the job's unique key, if it has one.
	Key string
	// Kind is the job's kind ("" for an untyped job).
	Kind string
	// PayloadSize is a completed job's payload size in bytes: its record
	// keeps the payload itself (Payload) only up to
	// streamq.CompletedPayloadMax bytes.
	PayloadSize int
	// Tags are the job's tags (nil: none).
	Tags []string
	// FlowKey is the job's flow key, if it has one (see [Queue.Explain]).
	FlowKey string

	aside *aside // where it waits aside for a cap, if it does
}

// Consumer is one stream consumer or priority worker.
type Consumer struct {
	Name    string
	Kind    string // "consumer" or "worker"
	Pending int64  // jobs it holds (pending entries, or leases)
	// Idle is the time since it last read from the group (stream consumers)
	// or since its last heartbeat (priority workers).
	Idle time.Duration
	// LastSeen is its last heartbeat (zero for a consumer of a version
	// without heartbeats: then the time of its last read).
	LastSeen time.Time
	// Alive says that its last heartbeat is recent: within [LiveWithin],
	// or three of its control intervals if that is longer. A consumer that
	// stopped cleanly is no longer listed; one that crashed is listed with
	// Alive false until it is pruned.
	Alive bool
	// From the heartbeat record, when there is one: where it runs, its
	// concurrency, the streamq version and when it started.
	Host        string
	PID         int
	Concurrency int
	Version     string
	Started     time.Time
}

// Schedule is one periodic schedule of a queue.
type Schedule struct {
	Name, Queue, Spec  string
	LastTick, NextTick time.Time // zero when unknown
}

// Level is one priority of a priority queue's ready set.
type Level struct {
	Priority int64
	Count    int64
}

// WriteBehindStatus is the state of a queue fed by a writebehind.Writer.
type WriteBehindStatus struct {
	// Unpersisted changes: waiting or running in the stream.
	Unpersisted int64
	// OldestAge is the age of the oldest unpersisted change.
	OldestAge time.Duration
	// Retrying batches (delayed) and Dead changes (dead letters).
	Retrying, Dead int64
	// LastError is the error of the newest dead letter or retry.
	LastError string
}

// DeadFilter selects dead letters (and cancelled jobs). Every set field must
// match; the zero filter matches every one.
type DeadFilter struct {
	Reason string    // dl_reason, e.g. "max_deliveries", "permanent", "cancelled"
	Error  string    // substring of the error
	Since  time.Time // dead-lettered at or after
	Until  time.Time // dead-lettered before
	IDs    []string  // only these dead-letter entry IDs (or stable job IDs)
}
