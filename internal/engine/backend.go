package engine

import (
	"context"
	"time"

	"github.com/streamq/streamq/internal/rdb"
)

// A Backend is where an [Engine] gets jobs and settles them: a Redis stream
// read with a consumer group, or a priority sorted set with leases. It only
// does Redis calls; every decision (what runs, when, what is charged, what
// is retried or dead-lettered) is the engine's.
//
// Attempts: a backend counts the handler starts of the copy of a job it
// holds, durably, before the handler runs, so that a start cut short by a
// crash (the worker died while the handler ran) is still counted. A fetch
// either counts the coming start itself ([Delivery.Charged]: XREADGROUP, a
// pop) or not (a takeover with XAUTOCLAIM ... JUSTID); the engine counts
// it with [Backend.Charge] right before the handler runs, and takes a
// fetch's count back when the job has to wait.
//
// The engine calls Fetch, Charge and Start from its fetch loop only (one
// goroutine); the other methods from any goroutine.
type Backend interface {
	// Start prepares a run (for example creates the consumer group). The
	// engine retries transient errors with backoff.
	Start(ctx context.Context) error

	// Fetch returns up to n jobs to run now, waiting up to wait when none
	// is ready (it may return none). owns reports whether the engine holds
	// a job by its key. The engine copies the deliveries before it calls
	// Fetch again, so a backend may return the same slice every time.
	Fetch(ctx context.Context, n int, wait time.Duration, owns func(key string) bool) ([]Delivery, error)

	// Charge counts the coming start of d (charge true), or takes back the
	// count a fetch made (false). It reports false when d is no longer held.
	Charge(ctx context.Context, d *Delivery, charge bool) (held bool, err error)

	// Touch keeps the claims of held jobs fresh and returns the keys that
	// are no longer held.
	Touch(ctx context.Context, keys []string) (lost []string, err error)

	// Finish settles jobs whose handler succeeded. The engine calls it from
	// one goroutine at a time, and reuses done once it returned.
	Finish(ctx context.Context, done []Finished) error

	// Move settles an attempt by writing the job again as a new copy with
	// fields, due after delay (0: at once), whose count of starts begins at
	// zero, recording where it went in the trail under st.JobID and, when
	// st.Failed, a failure in the throughput counters. It reports false
	// when d is no longer held (nothing changed).
	Move(ctx context.Context, d *Delivery, fields []any, delay time.Duration, st rdb.Settle) (moved bool, err error)

	// DeadLetter moves d to the dead-letter stream with fields, releasing
	// its unique-key lock (lock, token) if it has one, recording it in the
	// trail and the failures, and removing its cancel request. It returns
	// the dead letter's ID, or "" when d is no longer held (nothing changed).
	DeadLetter(ctx context.Context, d *Delivery, lock, token string, st rdb.Settle, fields []any) (string, error)

	// DropCancels removes the cancel requests of the jobs with stable IDs
	// ids that no worker holds any more (they finished or were settled
	// otherwise). The engine calls it for requests of jobs it does not hold.
	DropCancels(ctx context.Context, ids []string) error

	// Abandon tells the backend that the engine gave up on a held job
	// without settling it (Redis failed): it stays claimed until another
	// worker takes it over as after a crash.
	Abandon(key string)

	// Loops are the backend's periodic maintenance (moving due jobs,
	// returning expired leases, pruning consumers).
	Loops() []Loop

	// Wake ends a Fetch that waits for work, when the run is cancelled.
	Wake()
}

// Delivery is a job a backend handed to the engine.
type Delivery struct {
	// Key identifies the backend's hold on the job (a stream entry ID, a
	// lease member): the engine's registry, keep-alive and settlement use it.
	Key string
	// ID is the job's ID as handlers see it.
	ID string
	// Fields are the job's wire fields (nil when its data is gone). A
	// backend that stores them packed sets Packed instead.
	Fields map[string]any
	// The stable ID of a job is the engine's to find (see stableID): the
	// jid field of its fields (packed or not), else ID.
	Packed string
	// Prior counts the starts of this copy of the job counted before this
	// delivery: each was cut short by a crash (a start that ended with a
	// verdict replaced the copy).
	Prior int
	// Charged is true when the fetch already counted the coming start.
	Charged bool
	// Suspect is true when the job's latest runs were cut short by crashes
	// (Prior > 0, or a crashed mark in its fields; a false positive only
	// costs a decode): its last attempt must run alone.
	Suspect bool
	// Headers are added to the job's headers for the handler and in a dead
	// letter (a job's priority), not in its retried copies.
	Headers map[string]string
}

// Finished is a job whose handler succeeded, for [Backend.Finish].
type Finished struct {
	Key, ID     string
	Lock, Token string // unique-key lock to release, if any
	// Moved is the job's stable ID if this copy carries one (written by a
	// move: retry, requeue; or enqueued with a chosen ID): its trail entry
	// is to be removed, and a chosen ID leaves its done marker. Else "".
	Moved string
	// For a backend that records completed jobs: the delivery (valid
	// until Finish returns), when its handler started (the process's
	// clock, with its monotonic reading) and the run's attempt number.
	D       *Delivery
	Started time.Time
	Attempt int
}

// Loop is a backend's periodic task. Do reports more when it stopped at its
// per-call bound with work left; the engine then calls it again at once, up
// to 100 times a tick.
type Loop struct {
	Name  string
	Every time.Duration
	Do    func(ctx context.Context) (more bool, err error)
}
