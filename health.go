package streamq

import (
	"time"

	"github.com/streamq/streamq/internal/engine"
)

// Health is the state of a running [Consumer] (or priority worker), for the
// readiness and liveness probes of a service that embeds it.
type Health struct {
	// Running is true while Run runs.
	Running bool
	// Fetching is true while Run's fetch loop runs: false before Run, once a
	// shutdown began, and after an error that stopped Run.
	Fetching bool
	// ShuttingDown is true once Run's context was cancelled and it drains.
	ShuttingDown bool
	// LastFetch is when the fetch loop last heard from Redis (a read that
	// returned jobs or timed out empty). Zero before the first one.
	LastFetch time.Time
	// LastError is the fetch loop's latest Redis error, "" once a fetch
	// succeeded again; LastErrorAt is when it happened.
	LastError   string
	LastErrorAt time.Time
	// Jobs is the number of jobs the run holds: running, waiting to run
	// alone, or being settled. Concurrency bounds the running ones.
	Jobs int
	// Waiting is the number of jobs that wait to make their last attempt
	// alone (their earlier runs were cut short by crashes).
	Waiting     int
	Concurrency int
}

// A Health converts from the engine's, which has the same fields.
var _ = Health(engine.Health{})
