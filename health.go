package streamq

import (
	"encoding/json"
	"net/http"
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
	// Paused is true while the queue is paused (see the inspect package):
	// Run takes no new jobs, and running ones finish.
	Paused bool
}

// A Health converts from the engine's, which has the same fields.
var _ = Health(engine.Health{})

// HealthHandler returns an http.Handler for liveness and readiness probes
// (for example on /healthz) of a service that embeds consumers or priority
// workers: it answers 200 when every probe is healthy and 503 otherwise,
// with a JSON body {"ok": bool, "probes": [...]} listing each probe's
// [Health] and, for an unhealthy one, why. A probe is healthy while its Run
// fetches jobs (a paused queue is healthy) and its last fetch error, if any,
// is older than its last successful fetch. With no probes it answers 200.
func HealthHandler(probes ...interface{ Health() Health }) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		type probe struct {
			Health
			OK     bool   `json:"ok"`
			Reason string `json:"reason,omitempty"`
		}
		body := struct {
			OK     bool    `json:"ok"`
			Probes []probe `json:"probes"`
		}{OK: true, Probes: make([]probe, 0, len(probes))}
		for _, p := range probes {
			h := p.Health()
			reason := h.problem()
			body.Probes = append(body.Probes, probe{Health: h, OK: reason == "", Reason: reason})
			if reason != "" {
				body.OK = false
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !body.OK {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
}

// problem says why h is unhealthy, or "".
func (h Health) problem() string {
	switch {
	case !h.Running:
		return "not running"
	case h.ShuttingDown:
		return "shutting down"
	case !h.Fetching:
		return "fetch loop stopped"
	case h.LastError != "" && !h.LastErrorAt.Before(h.LastFetch):
		return "redis: " + h.LastError
	}
	return ""
}
