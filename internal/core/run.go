package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/rdb"
)

// MaxNameLen is the longest name of a queue, group, key prefix, consumer or
// worker, in bytes (streamq.MaxNameLen).
const MaxNameLen = 200

// NameProblem says what is wrong with a name that goes into Redis keys,
// lease tokens and log lines, or returns "": it must be 1..MaxNameLen
// bytes of printable ASCII without spaces, braces (which would break the
// Cluster hash tag) or the characters of forbid.
func NameProblem(s, forbid string) string {
	if s == "" {
		return `is empty: use a short name such as "emails"`
	}
	if len(s) > MaxNameLen {
		return fmt.Sprintf("%q is %d bytes long: use at most %d", s[:20]+"...", len(s), MaxNameLen)
	}
	forbid = "{}" + forbid
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch <= ' ' || ch >= 0x7f || strings.IndexByte(forbid, ch) >= 0 {
			quoted := make([]string, len(forbid))
			for j := range forbid {
				quoted[j] = "'" + forbid[j:j+1] + "'"
			}
			others := strings.Join(quoted[:len(quoted)-1], ", ") + " and " + quoted[len(quoted)-1]
			return fmt.Sprintf("%q contains %q at byte %d: use letters, digits and punctuation other than %s, without spaces", s, ch, i, others)
		}
	}
	return ""
}

// RunDefaults are the defaults of what a stream consumer and a priority
// worker configure alike: the root package's Default… constants, which
// priority's are too.
type RunDefaults struct {
	Concurrency     int
	MaxDeliveries   int
	Block           time.Duration
	JobTimeout      time.Duration
	ShutdownTimeout time.Duration
	ControlInterval time.Duration
	MinControl      time.Duration // the shortest ControlInterval
	ResultRetention time.Duration
	MaxFetchBytes   int64
	MaxResultBytes  int64
	Backoff         func(attempt int) time.Duration
	Version         string // the module's version, for heartbeats
}

// RunConfig points at the fields of a streamq.ConsumerConfig or a
// priority.WorkerConfig that the two share, so that [Queue.NewRun] applies
// their defaults, validates them and builds the run in one place. It also
// says how the two differ.
type RunConfig struct {
	// Role is "consumer" or "worker": the log key of the name, and the
	// start of a default name on a host whose name cannot be one.
	Role string
	// Forbid lists the characters a name may not hold besides those a
	// queue name may not.
	Forbid string
	// Own are the config's own durations, defaulted and checked with the
	// shared ones.
	Own []Duration
	// Claim is how long a held job's claim lasts without a keep-alive
	// (MinIdle, Lease), read after the defaults: running jobs renew it
	// every quarter of it.
	Claim *time.Duration
	// Group is the consumer group handlers see ("" for none).
	Group string
	// FinishBatch is the most finished jobs one settlement call takes.
	FinishBatch int
	// Heartbeat records the run as alive under its name in the queue's
	// workers set, with its host, PID, concurrency, version and start time
	// (see rdb.Heartbeat), at every control tick.
	Heartbeat bool
	// StartLease, with Heartbeat, lets the run's reads skip the look at
	// the pause flag while it holds a start lease (see engine.Config).
	StartLease bool
	// Check, if set, applies the defaults of the config's own fields and
	// validates them, after the shared ones.
	Check func() error
	// Handler returns the handler with its middleware (a streamq.Handler),
	// once the config is valid.
	Handler func() any

	Name            *string
	Concurrency     *int
	MaxDeliveries   *int
	Block           *time.Duration
	JobTimeout      *time.Duration
	ShutdownTimeout *time.Duration
	ControlInterval *time.Duration
	ResultRetention *time.Duration
	MaxFetchBytes   *int64
	MaxResultBytes  *int64
	Backoff         *func(attempt int) time.Duration
	// NilMiddleware is the index of the config's first nil middleware, or
	// -1 (see [NilAt]).
	NilMiddleware int
	Logger        *slog.Logger
	// OnEvent is the config's event hook (a func(context.Context,
	// streamq.Event), or nil), for Queue.NewEngine.
	OnEvent any
}

// opTimeout bounds one bookkeeping call made for a job: a refresh of
// claims takes at most this long.
const opTimeout = 5 * time.Second

// Apply sets the zero fields c points at to d's defaults (and its Own
// durations to theirs) and validates them; errf names the fields in
// errors. It changes no field of the caller's config but through c.
func (c *RunConfig) Apply(d RunDefaults, errf ErrFunc) error {
	if *c.Name == "" {
		*c.Name = defaultName(c.Role, c.Forbid)
	}
	if p := NameProblem(*c.Name, c.Forbid); p != "" {
		return errf("Name", "%s", p)
	}
	if err := Durations(append([]Duration{
		{Field: "Block", V: c.Block, Def: d.Block},
		{Field: "JobTimeout", V: c.JobTimeout, Def: d.JobTimeout, Off: true},
		{Field: "ShutdownTimeout", V: c.ShutdownTimeout, Def: d.ShutdownTimeout},
		{Field: "ControlInterval", V: c.ControlInterval, Def: d.ControlInterval},
		{Field: "ResultRetention", V: c.ResultRetention, Def: d.ResultRetention},
	}, c.Own...), errf); err != nil {
		return err
	}
	if err := Control(*c.ControlInterval, d.MinControl, d.ControlInterval, *c.ResultRetention, d.ResultRetention, errf); err != nil {
		return err
	}
	if err := Sizes([]Bytes{
		{Field: "MaxResultBytes", V: c.MaxResultBytes, Def: d.MaxResultBytes},
		{Field: "MaxFetchBytes", V: c.MaxFetchBytes, Def: d.MaxFetchBytes},
	}, errf); err != nil {
		return err
	}
	if *c.Block < time.Millisecond {
		return errf("Block", "%s is below 1ms, which Redis reads as 'block forever': use at least 1ms (default %s)", *c.Block, d.Block)
	}
	for _, n := range []struct {
		field, what string
		v           *int
		def         int
	}{
		{"Concurrency", "handler goroutines", c.Concurrency, d.Concurrency},
		{"MaxDeliveries", "attempts", c.MaxDeliveries, d.MaxDeliveries},
	} {
		switch {
		case *n.v == 0:
			*n.v = n.def
		case *n.v < 0:
			return errf(n.field, "%d is negative: use a positive number of %s, or 0 for %d", *n.v, n.what, n.def)
		}
	}
	if *c.Backoff == nil {
		*c.Backoff = d.Backoff
	}
	if c.NilMiddleware >= 0 {
		return errf(fmt.Sprintf("Middleware[%d]", c.NilMiddleware), "is nil: remove it")
	}
	if c.Check != nil {
		return c.Check()
	}
	return nil
}

// NilAt returns the index of the first nil middleware of ms, or -1.
func NilAt[H any, M ~func(H) H](ms []M) int {
	for i, m := range ms {
		if m == nil {
			return i
		}
	}
	return -1
}

// heartbeatInfo returns the heartbeat record of a run started now.
func heartbeatInfo(role string, concurrency int, version string, every time.Duration) string {
	host, _ := os.Hostname()
	b, _ := json.Marshal(rdb.Heartbeat{
		Role: role, Host: host, PID: os.Getpid(), Concurrency: concurrency, Version: version,
		Started: time.Now().UnixMilli(), Every: every.Milliseconds(),
	})
	return string(b)
}

// defaultName returns "<hostname>-<pid>-<random>", or "<role>-<pid>-<random>"
// when the host name cannot be part of a name.
func defaultName(role, forbid string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	suffix := fmt.Sprintf("-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	host, err := os.Hostname()
	if err != nil || host == "" || NameProblem(host+suffix, forbid) != "" { // exotic host names
		host = role
	}
	return host + suffix
}

// ErrRunning is what Run returns while the consumer or worker runs
// (streamq.ErrRunning).
var ErrRunning = errors.New("streamq: already running")

// Run is what a stream consumer and a priority worker keep alike: the
// engine that runs their handler, its monitor, and the guard that lets one
// Run at a time.
type Run struct {
	Engine  engine.Runner
	Mon     *engine.Monitor
	running atomic.Bool
}

// NewRun applies the queue's Defaults to the zero fields c points at (see
// [RunConfig.Apply]; errf names the fields in errors) and returns the run
// of c.Handler on q with the root package's rules.
func (q *Queue) NewRun(c *RunConfig, errf ErrFunc) (*Run, error) {
	if err := c.Apply(q.Defaults, errf); err != nil {
		return nil, err
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	var heartbeat, info string
	if c.Heartbeat {
		heartbeat = *c.Name
		info = heartbeatInfo(c.Role, *c.Concurrency, q.Defaults.Version, *c.ControlInterval)
	}
	claim := *c.Claim
	eng := q.NewEngine(c.Handler(), c.OnEvent, c.Group, engine.Config{
		Queue:           q.Name,
		Concurrency:     *c.Concurrency,
		Block:           *c.Block,
		JobTimeout:      max(*c.JobTimeout, 0),
		ShutdownTimeout: *c.ShutdownTimeout,
		// A refresh that takes longer than half the claim is too late
		// anyway; the next tick tries again.
		TouchEvery:    max(claim/4, 5*time.Millisecond),
		TouchTimeout:  min(claim/2, opTimeout),
		MaxDeliveries: *c.MaxDeliveries,
		Backoff:       *c.Backoff,
		FinishBatch:   c.FinishBatch,
		Logger:        log.With("queue", q.Name, c.Role, *c.Name),

		DB:              q.DB,
		ControlInterval: *c.ControlInterval,
		ResultRetention: *c.ResultRetention,
		MaxResultBytes:  *c.MaxResultBytes,
		Heartbeat:       heartbeat,
		HeartbeatInfo:   info,
		StartLease:      c.StartLease,
	})
	return &Run{Engine: eng, Mon: eng.Monitor()}, nil
}

// Run runs the engine on backend b until ctx is cancelled (see
// engine.Engine.Run), or returns [ErrRunning] at once while another call
// runs.
func (r *Run) Run(ctx context.Context, b engine.Backend) error {
	if !r.Claim() {
		return ErrRunning
	}
	defer r.Unclaim()
	return r.Engine.Run(ctx, b)
}

// Claim takes the guard that lets one run at a time; it reports false
// while another run holds it. Unclaim gives it back.
func (r *Run) Claim() bool { return r.running.CompareAndSwap(false, true) }

// Unclaim gives back the guard taken by [Run.Claim].
func (r *Run) Unclaim() { r.running.Store(false) }
