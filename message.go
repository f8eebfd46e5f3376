package streamq

import (
	"time"

	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/wire"
)

// WireVersion is the version of the stream entry format written by this
// package, stored in the "v" field of every entry. Any Redis client can
// produce a job with
//
//	XADD streamq:{orders}:stream * v 1 payload <bytes>
//
// and every other field is optional. See docs/operations.md for the full table.
const WireVersion = wire.Version

// Message is one job as delivered to a [Handler].
type Message struct {
	// ID is the job's ID, the same through its whole life: the ID Enqueue
	// returned (the one chosen with WithJobID, or a generated one), kept
	// when the job waits delayed, runs, is retried, dead-lettered or
	// requeued. Progress, results, cancel requests, the inspect package, the
	// CLI and the dashboard name the job by it.
	ID string
	// EntryID is the ID of this copy of the job: its stream entry ID (a
	// priority worker's job ID for jobs of a priority set). A retried job
	// is written again as a new copy with a new EntryID.
	EntryID string
	// JobID is ID.
	//
	// Deprecated: use ID, which is the job's stable ID since streamq 0.2.0
	// (it was the copy's entry ID, now EntryID).
	JobID string
	// Queue is the queue name.
	Queue string
	// Group is the consumer group that delivered the job ("" when it was not
	// delivered by a consumer group).
	Group string
	// Payload is the job's payload as enqueued. It shares its bytes with the
	// job as the consumer read it, which a retry or a dead letter writes
	// again: read it, or copy it before you change it; never modify it in
	// place.
	Payload []byte
	// Headers are the job's string headers (user headers and trace context),
	// nil when it has none (reading a nil map is fine).
	Headers map[string]string
	// EnqueuedAt is when the job was first enqueued (zero if unknown).
	EnqueuedAt time.Time
	// Attempt is the number of this attempt: 1 on the first run. Every
	// earlier handler start of the job counts, whether it failed or was cut
	// short by a crash, except runs that handed the job back without charge
	// ([Postpone], a shutdown). ConsumerConfig.MaxDeliveries bounds it: the
	// last attempt has Attempt == MaxDeliveries. So "the first run" is
	// Attempt == 1, never 0, and a dead letter's Attempts is the Attempt of
	// its last run.
	Attempt int
	// Key is the job's unique key, if it was enqueued with [Unique].
	Key string
	// FirstFailedAt is the time of the first failed attempt (zero if none).
	FirstFailedAt time.Time
	// LastError is the error text of the previous failed attempt, if any.
	LastError string
	// Kind is the job's kind ("" for an untyped job): see [WithKind] and
	// [Mux].
	Kind string
	// Tags are the job's tags, nil when it has none: see [Tags]. Read them;
	// never modify them.
	Tags []string

	// opts are the job's per-job options other than its kind and tags
	// (max attempts, timeout, deadline, retention, flow key, unknown-kind
	// count), for a forwarder that writes the job again (see messageOpts).
	// nil when it has none, which is most jobs: the message lives in the
	// engine's per-job slot, and a plain job's slot stays small.
	opts *wire.Opts
}

// messageOpts returns the wire fields of version 2 of a *Message (see
// core.Queue.MessageOpts).
func messageOpts(msg any) wire.Opts {
	m, ok := msg.(*Message)
	if !ok || m == nil {
		return wire.Opts{}
	}
	var o wire.Opts
	if m.opts != nil {
		o = *m.opts
	}
	o.Kind, o.Tags = m.Kind, m.Tags
	return o
}

// newMessage returns the message of a run.
func newMessage(r *engine.Run, group string) *Message {
	m := &Message{}
	fillMessage(m, r, group)
	return m
}

// fillMessage sets *m to the message of a run.
func fillMessage(m *Message, r *engine.Run, group string) {
	j := &r.Job
	*m = Message{
		ID:        r.ID,
		EntryID:   r.ID,
		JobID:     r.ID,
		Queue:     r.Queue,
		Group:     group,
		Payload:   j.Payload,
		Headers:   r.Headers,
		Attempt:   r.Attempt,
		Key:       j.Key,
		LastError: j.LastError,
		Kind:      j.Kind,
		Tags:      j.Tags,
	}
	if j.Opts.Rare() {
		o := j.Opts
		o.Kind, o.Tags = "", nil // in m.Kind and m.Tags
		m.opts = &o
	}
	if j.JobID != "" {
		m.ID, m.JobID = j.JobID, j.JobID
	}
	if j.EnqMillis > 0 {
		m.EnqueuedAt = time.UnixMilli(j.EnqMillis)
	}
	if j.FirstFail > 0 {
		m.FirstFailedAt = time.UnixMilli(j.FirstFail)
	}
}
