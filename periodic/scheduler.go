package periodic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/pool"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Headers set on every periodic job. Register refuses user headers with
// these names.
const (
	// HeaderName holds the name of the schedule that enqueued the job.
	HeaderName = "streamq-periodic"
	// HeaderTick holds the tick the job is for, in RFC 3339 (UTC): the
	// schedule's own time, not the moment a scheduler woke up.
	HeaderTick = "streamq-tick"
)

// MinInterval is the shortest interval [Scheduler.RegisterInterval] accepts.
const MinInterval = 100 * time.Millisecond

// dormantRecheck is how long Run waits before looking again at a schedule
// that has no tick within the five years robfig/cron searches.
const dormantRecheck = 24 * time.Hour

// MissedPolicy says what happens to ticks that passed while no scheduler of
// the queue was running.
type MissedPolicy int

const (
	// MissedSkip skips them: after a restart the schedule continues with its
	// next tick. It is the default.
	MissedSkip MissedPolicy = iota
	// MissedRunOnce enqueues one job for the latest missed tick, if the
	// schedule has fired before (it is tracked in Redis, so it works across
	// restarts of every process), then continues with the next tick.
	MissedRunOnce
)

// String returns the policy's name.
func (p MissedPolicy) String() string {
	switch p {
	case MissedSkip:
		return "skip"
	case MissedRunOnce:
		return "run_once"
	}
	return "MissedPolicy(" + strconv.Itoa(int(p)) + ")"
}

func (p MissedPolicy) valid() bool { return p == MissedSkip || p == MissedRunOnce }

// Config configures a [Scheduler]. The zero value is valid.
type Config struct {
	// Missed is the policy for ticks missed while no scheduler ran, for
	// schedules registered without [WithMissed]. Defaults to MissedSkip.
	Missed MissedPolicy

	// Location is the time zone of crontab specs that have no CRON_TZ=
	// prefix and no [InLocation] option. Defaults to UTC, not the machine's
	// local zone, so that schedulers on machines in different zones agree on
	// the ticks.
	Location *time.Location

	// Now is the process's clock. Run corrects it to the Redis server's
	// clock (it reads TIME when it starts and once a minute), and the tick
	// script refuses a tick that is still in the future by the server's
	// clock, so schedulers whose clocks are off enqueue every tick once and
	// on time. Defaults to time.Now; tests inject a fake or shifted clock.
	Now func() time.Time

	// Logger receives the scheduler's logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// Option changes how one schedule is registered.
type Option func(*options)

type options struct {
	loc     *time.Location
	missed  *MissedPolicy
	headers map[string]string
	err     error
}

// InLocation sets the time zone of a crontab spec; it is the same as a
// "CRON_TZ=<zone> " prefix, and the two cannot be combined. Not allowed with
// RegisterInterval, whose ticks do not depend on a zone.
func InLocation(loc *time.Location) Option {
	return func(o *options) {
		if loc == nil {
			o.err = errors.New("InLocation(nil): pass a zone, e.g. from time.LoadLocation(\"Europe/Paris\"), or time.UTC")
			return
		}
		o.loc = loc
	}
}

// WithMissed sets the schedule's policy for missed ticks, overriding
// Config.Missed.
func WithMissed(p MissedPolicy) Option {
	return func(o *options) {
		if !p.valid() {
			o.err = fmt.Errorf("WithMissed(%v): use periodic.MissedSkip or periodic.MissedRunOnce", p)
			return
		}
		o.missed = &p
	}
}

// WithHeaders adds headers to every job of the schedule. Later options win
// on equal keys. HeaderName and HeaderTick are reserved.
func WithHeaders(h map[string]string) Option {
	return func(o *options) {
		if o.headers == nil {
			o.headers = make(map[string]string, len(h))
		}
		maps.Copy(o.headers, h)
	}
}

// schedule is one registered schedule. It is immutable after Register.
type schedule struct {
	name    string
	desc    string // the spec or "every <d>", for logs
	t       ticker
	missed  MissedPolicy
	payload []byte
	headers map[string]string // user headers, without the reserved ones
}

// Scheduler enqueues periodic jobs into the queue of a [streamq.Producer].
// Run a Scheduler in as many processes as you like: each tick of each
// schedule is enqueued exactly once, by whichever scheduler gets there
// first, with no leader election. Create it with [New], add schedules with
// [Scheduler.Register] or [Scheduler.RegisterInterval], then call
// [Scheduler.Run]. Its methods are safe for concurrent use.
type Scheduler struct {
	p   *core.Producer
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	scheds  []*schedule
	byName  map[string]*schedule
	running bool

	// skew is the server's clock minus cfg.Now, in nanoseconds (see now).
	skew atomic.Int64
	// synced is when (by cfg.Now) Run last read the server's clock; owned
	// by Run.
	synced time.Time
}

// syncEvery is how often Run reads the server's clock again.
const syncEvery = time.Minute

// now returns the time by the Redis server's clock, as Run last measured
// it against cfg.Now.
func (s *Scheduler) now() time.Time { return s.cfg.Now().Add(time.Duration(s.skew.Load())) }

// syncClock measures the server's clock against cfg.Now (TIME, taken to be
// read half-way through the round trip). A failure keeps the last
// measurement: the tick script still refuses early ticks.
func (s *Scheduler) syncClock(ctx context.Context) {
	t0 := s.cfg.Now()
	srv, err := s.p.Queue.RDB.Time(ctx).Result()
	t1 := s.cfg.Now()
	s.synced = t1
	if err != nil {
		if ctx.Err() == nil {
			s.log.DebugContext(ctx, "streamq: cannot read the Redis server's clock", "error", err)
		}
		return
	}
	s.skew.Store(int64(srv.Sub(t0.Add(t1.Sub(t0) / 2))))
}

// errEarly reports a tick that the server's clock has not reached: it is
// tried again at its time, after Run corrected its clock.
var errEarly = errors.New("tick not due yet by the Redis server's clock")

// New returns a scheduler that enqueues into p's queue. cfg may be nil; it
// is copied, defaulted and validated, never changed.
//
// Jobs are written by the scheduler's own script in the stream's wire format
// (version 1), with p's headers, so p's
// [streamq.EnqueueHook]s run for them as for any other job (a trace context
// reaches periodic jobs too). The hooks run each time a scheduler tries a
// tick, before it knows whether another scheduler enqueued that tick first,
// so they may run for a job that is then not enqueued.
func New(p *streamq.Producer, cfg *Config) (*Scheduler, error) {
	if p == nil {
		return nil, &streamq.ConfigError{Field: "producer", Reason: "p is nil: create one with streamq.NewProducer"}
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if !c.Missed.valid() {
		return nil, &streamq.ConfigError{Field: "periodic.Config.Missed",
			Reason: fmt.Sprintf("%v is unknown: use periodic.MissedSkip (the default) or periodic.MissedRunOnce", c.Missed)}
	}
	if c.Location == nil {
		c.Location = time.UTC
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	q := p.Queue()
	return &Scheduler{
		p:      core.OfProducer(p),
		cfg:    c,
		log:    log.With("queue", q.Name()),
		byName: make(map[string]*schedule),
	}, nil
}

// Register adds a schedule named name that enqueues payload at every tick of
// spec. name identifies the schedule across processes and restarts: every
// scheduler of the queue should register the same name with the same spec.
//
// spec is a crontab expression parsed by github.com/robfig/cron/v3: five
// fields (minute hour day-of-month month day-of-week, e.g. "*/15 9-17 * * 1-5"),
// or six with a leading seconds field ("*/10 * * * * *"), or a descriptor
// (@yearly, @monthly, @weekly, @daily, @hourly, or @every <duration> such as
// "@every 1m30s"). A "CRON_TZ=<IANA zone> " prefix or [InLocation] sets the
// zone; otherwise Config.Location (UTC by default) applies. The spec follows
// the zone's wall clock: one run per matching local time, also when the
// clocks change (see "Daylight saving time" in the package documentation).
// "@every d" ticks at whole multiples of d since the Unix epoch, like
// [Scheduler.RegisterInterval].
//
// Register must be called before Run (it fails while Run runs).
func (s *Scheduler) Register(name, spec string, payload []byte, opts ...Option) error {
	o, err := collect(name, opts)
	if err != nil {
		return err
	}
	loc := s.cfg.Location
	if o.loc != nil {
		if hasZonePrefix(strings.TrimSpace(spec)) {
			return &streamq.ConfigError{Field: "periodic spec of " + strconv.Quote(name),
				Reason: fmt.Sprintf("%q has a CRON_TZ= prefix and the InLocation option: keep one of the two", spec)}
		}
		loc = o.loc
	}
	t, err := parseSpec(spec, loc)
	if err != nil {
		return &streamq.ConfigError{Field: "periodic spec of " + strconv.Quote(name), Reason: err.Error()}
	}
	if t.next(s.cfg.Now()).IsZero() {
		return &streamq.ConfigError{Field: "periodic spec of " + strconv.Quote(name),
			Reason: fmt.Sprintf("%q never fires within five years (a date such as February 30?): fix the day and month fields", spec)}
	}
	return s.add(name, spec, t, payload, o)
}

// RegisterInterval adds a schedule named name that enqueues payload every
// interval. Ticks are the whole multiples of every since the Unix epoch, so
// every process computes the same ticks without talking to the others: with
// every = time.Hour the ticks are on the hour (UTC), with 24*time.Hour at
// midnight UTC (use Register with "@daily" and a zone for local midnight).
// every must be at least MinInterval and a whole number of milliseconds.
//
// RegisterInterval must be called before Run (it fails while Run runs).
func (s *Scheduler) RegisterInterval(name string, every time.Duration, payload []byte, opts ...Option) error {
	o, err := collect(name, opts)
	if err != nil {
		return err
	}
	field := "periodic interval of " + strconv.Quote(name)
	switch {
	case o.loc != nil:
		return &streamq.ConfigError{Field: field, Reason: "InLocation has no effect on intervals (their ticks are absolute): remove it, or use Register with a crontab spec"}
	case every < MinInterval:
		return &streamq.ConfigError{Field: field, Reason: fmt.Sprintf("%s is shorter than %s: use a longer interval", every, MinInterval)}
	case every%time.Millisecond != 0:
		return &streamq.ConfigError{Field: field, Reason: fmt.Sprintf("%s is not a whole number of milliseconds: round it, e.g. to %s", every, every.Truncate(time.Millisecond))}
	}
	return s.add(name, "every "+every.String(), intervalTicker{every: every}, payload, o)
}

// collect applies opts and validates the schedule name.
func collect(name string, opts []Option) (*options, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.err != nil {
		return nil, &streamq.ConfigError{Field: "periodic option of " + strconv.Quote(name), Reason: o.err.Error()}
	}
	for _, h := range []string{HeaderName, HeaderTick} {
		if _, ok := o.headers[h]; ok {
			return nil, &streamq.ConfigError{Field: "periodic headers of " + strconv.Quote(name),
				Reason: fmt.Sprintf("header %q is set by the scheduler: remove it from WithHeaders", h)}
		}
	}
	return &o, nil
}

// validName accepts 1..streamq.MaxNameLen bytes of printable ASCII without
// spaces: the name is part of Redis keys and of log lines.
func validName(name string) error {
	const field = "periodic schedule name"
	if name == "" {
		return &streamq.ConfigError{Field: field, Reason: "is empty: name the schedule, e.g. \"nightly-report\""}
	}
	if len(name) > streamq.MaxNameLen {
		return &streamq.ConfigError{Field: field, Reason: fmt.Sprintf("%q... is %d bytes long: use at most %d", name[:20], len(name), streamq.MaxNameLen)}
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f {
			return &streamq.ConfigError{Field: field, Reason: fmt.Sprintf("%q contains %q at byte %d: use printable ASCII without spaces", name, c, i)}
		}
	}
	return nil
}

func (s *Scheduler) add(name, desc string, t ticker, payload []byte, o *options) error {
	if err := s.p.Queue.CheckJob(payload, o.headers); err != nil {
		return &streamq.ConfigError{Field: "periodic job of " + strconv.Quote(name), Reason: err.Error()}
	}
	sc := &schedule{
		name:    name,
		desc:    desc,
		t:       t,
		missed:  s.cfg.Missed,
		payload: slices.Clone(payload),
		headers: o.headers,
	}
	if sc.payload == nil {
		sc.payload = []byte{}
	}
	if o.missed != nil {
		sc.missed = *o.missed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return &streamq.ConfigError{Field: "periodic schedule " + strconv.Quote(name), Reason: "registered while Run runs: register every schedule before calling Run"}
	}
	if _, dup := s.byName[name]; dup {
		return &streamq.ConfigError{Field: "periodic schedule name", Reason: fmt.Sprintf("%q is already registered: give each schedule its own name", name)}
	}
	s.byName[name] = sc
	s.scheds = append(s.scheds, sc)
	return nil
}

// Next returns the first tick of the schedule called name strictly after t.
// It reports false if there is no such schedule, or no tick within five years.
func (s *Scheduler) Next(name string, t time.Time) (time.Time, bool) {
	s.mu.Lock()
	sc := s.byName[name]
	s.mu.Unlock()
	if sc == nil {
		return time.Time{}, false
	}
	n := sc.t.next(t)
	return n, !n.IsZero()
}

// FromMessage returns the schedule name and tick of a job enqueued by a
// Scheduler. It reports false for other jobs.
func FromMessage(msg *streamq.Message) (name string, tick time.Time, ok bool) {
	if msg == nil {
		return "", time.Time{}, false
	}
	name, ok = msg.Headers[HeaderName]
	if !ok {
		return "", time.Time{}, false
	}
	tick, err := time.Parse(time.RFC3339Nano, msg.Headers[HeaderTick])
	if err != nil {
		return "", time.Time{}, false
	}
	return name, tick, true
}

// state is Run's bookkeeping for one schedule.
type state struct {
	next    time.Time // the next tick to enqueue; zero: none within five years
	recheck time.Time // when next is zero: when to look again
	catchUp time.Time // a missed tick still to enqueue (MissedRunOnce); zero: none

	// After a failed attempt, what failed stays due and is tried again at
	// retry, not before; a success clears retry and resets bo.
	retry    time.Time
	bo       pool.Backoff
	failures int // failed attempts in a row, for logs
}

// wake returns when the schedule next needs a step.
func (st *state) wake() time.Time {
	switch {
	case !st.retry.IsZero():
		return st.retry
	case st.next.IsZero():
		return st.recheck
	}
	return st.next
}

// Run enqueues the jobs of every registered schedule until ctx is cancelled.
// It sleeps with a timer until the next tick of any schedule; at a tick T it
// enqueues one job for (schedule, T) unless another scheduler already did.
// If Run falls behind by more than one tick (a long pause, Redis down), it
// enqueues only the latest due tick of each schedule.
//
// On start, ticks that passed while no scheduler ran are handled by the
// schedule's [MissedPolicy]. When a tick cannot be enqueued (Redis
// unreachable, [streamq.ErrQueueFull]), Run logs a warning and tries again
// after a backoff of 50 ms doubling to 5 s, with jitter, per schedule; the
// backoff starts over after a success. Run returns nil once ctx is done,
// [streamq.ErrRunning] if it is already running, and an error when no schedule is
// registered or Redis answers with an error that retrying cannot fix (wrong
// key type, missing permission). Run composes with errgroup.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return streamq.ErrRunning
	}
	if len(s.scheds) == 0 {
		s.mu.Unlock()
		return &streamq.ConfigError{Field: "periodic schedules", Reason: "none registered: call Register or RegisterInterval before Run"}
	}
	s.running = true
	scheds := slices.Clone(s.scheds)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()

	s.syncClock(ctx)
	sts := s.start(scheds, s.now())
	s.publish(ctx, scheds, sts)
	for {
		if s.cfg.Now().Sub(s.synced) >= syncEvery {
			s.syncClock(ctx)
		}
		wake, _, err := s.step(ctx, scheds, sts, s.now())
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		t := time.NewTimer(wake.Sub(s.now()))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// start returns the initial state of each schedule at now.
func (s *Scheduler) start(scheds []*schedule, now time.Time) []state {
	sts := make([]state, len(scheds))
	for i, sc := range scheds {
		sts[i].next = sc.t.next(now)
		if sc.missed == MissedRunOnce {
			sts[i].catchUp = sc.t.prev(now)
		}
	}
	return sts
}

// step enqueues what is due at now and returns when to wake up next. A
// schedule whose attempt fails keeps what failed due and waits for its
// backoff (50 ms doubling to 5 s) before the next attempt, even if more of
// its ticks fall due meanwhile; failed reports that an attempt failed in
// this step. err is fatal.
func (s *Scheduler) step(ctx context.Context, scheds []*schedule, sts []state, now time.Time) (wake time.Time, failed bool, err error) {
	wake = now.Add(dormantRecheck)
	for i, sc := range scheds {
		st := &sts[i]
		if st.next.IsZero() && !st.recheck.After(now) {
			st.next = sc.t.next(now)
			st.recheck = now.Add(dormantRecheck)
		}
		if !st.retry.After(now) {
			if aerr := s.advance(ctx, sc, st, now); errors.Is(aerr, errEarly) {
				// st.retry is the tick's time, by the corrected clock.
			} else if aerr != nil {
				if asFatal(aerr) {
					return wake, false, aerr
				}
				failed = true
				s.backOff(ctx, sc, st, now, aerr)
			} else {
				st.retry, st.failures = time.Time{}, 0
				st.bo.Reset()
			}
		}
		wake = minTime(wake, st.wake())
	}
	return wake, failed, nil
}

// advance enqueues what schedule sc has due at now: first a missed tick
// (MissedRunOnce), then the latest due tick. It stops at the first error;
// what failed stays due.
func (s *Scheduler) advance(ctx context.Context, sc *schedule, st *state, now time.Time) error {
	if !st.catchUp.IsZero() {
		if err := s.fireDue(ctx, sc, st, st.catchUp, true); err != nil {
			return err
		}
		st.catchUp = time.Time{}
	}
	if st.next.IsZero() || st.next.After(now) {
		return nil
	}
	// The latest due tick; older ones (if Run fell behind) are skipped.
	tick := sc.t.prev(now)
	if tick.IsZero() || tick.Before(st.next) {
		tick = st.next
	}
	if err := s.fireDue(ctx, sc, st, tick, false); err != nil {
		return err
	}
	st.next = sc.t.next(now)
	st.recheck = now.Add(dormantRecheck)
	s.publish(ctx, []*schedule{sc}, []state{*st})
	return nil
}

// fireDue fires tick, and returns errEarly when the server's clock has not
// reached it: then it corrects the scheduler's clock by the server's time
// of the reply and sets st.retry to the tick, so the step after it tries
// again on time.
func (s *Scheduler) fireDue(ctx context.Context, sc *schedule, st *state, tick time.Time, catchUp bool) error {
	srv, o, err := s.fire(ctx, sc, tick, catchUp)
	if err != nil || o != early {
		return err
	}
	if ms, perr := strconv.ParseInt(srv, 10, 64); perr == nil {
		s.skew.Store(int64(time.UnixMilli(ms).Sub(s.cfg.Now())))
	}
	st.retry = tick
	return errEarly
}

// publish records schedules' specs and next ticks in the queue's schedules
// hash (name -> {"spec": ..., "next": Unix ms}) for the inspector (package
// inspect): one HSET when Run starts and one per enqueued tick. It is best
// effort: a failure is logged at debug level and changes nothing else.
func (s *Scheduler) publish(ctx context.Context, scheds []*schedule, sts []state) {
	args := make([]any, 0, 2*len(scheds))
	for i, sc := range scheds {
		v, _ := json.Marshal(struct {
			Spec string `json:"spec"`
			Next int64  `json:"next"`
		}{sc.desc, wire.Millis(sts[i].next)})
		args = append(args, sc.name, string(v))
	}
	if err := s.p.Queue.RDB.HSet(ctx, s.p.Queue.Keys.Part(rdb.PartSchedules), args...).Err(); err != nil && ctx.Err() == nil {
		s.log.DebugContext(ctx, "streamq: cannot record periodic schedules for the inspector", "error", err)
	}
}

// backOff schedules the next attempt of sc after a failed one and logs the
// failure: one warning per attempt, so at most one per 5 s while it lasts.
func (s *Scheduler) backOff(ctx context.Context, sc *schedule, st *state, now time.Time, err error) {
	d := st.bo.Next()
	st.retry = now.Add(d)
	st.failures++
	if ctx.Err() == nil {
		s.log.WarnContext(ctx, "streamq: cannot enqueue periodic job, retrying",
			"schedule", sc.name, "failures", st.failures, "retry_in", d, "error", err)
	}
}

// outcome is what the tick script did.
type outcome int

const (
	enqueued  outcome = iota + 1
	duplicate         // this tick was already enqueued
	stale             // a later tick was already enqueued
	neverRan          // catch-up of a schedule with no history: nothing to do
	early             // the tick is later than the server's clock: nothing written
)

// fire runs the tick script for (sc, tick). It returns the job's entry ID
// (for enqueued and duplicate), or the server's time in Unix ms (for
// early), and what happened. The script applies the
// queue's cap as Enqueue does (trimming acknowledged history), and refuses
// with [streamq.ErrQueueFull] when MaxLen jobs are unacknowledged.
func (s *Scheduler) fire(ctx context.Context, sc *schedule, tick time.Time, catchUp bool) (string, outcome, error) {
	h := make(map[string]string, len(sc.headers)+2)
	maps.Copy(h, sc.headers)
	h[HeaderName] = sc.name
	h[HeaderTick] = tick.UTC().Format(time.RFC3339Nano)
	wj := wire.Job{Payload: sc.payload, Headers: s.p.Headers(ctx, h, nil), EnqMillis: s.now().UnixMilli()}
	if err := s.p.Queue.CheckJob(wj.Payload, wj.Headers); err != nil {
		return "", 0, fmt.Errorf("streamq: periodic %s tick %s: %w", sc.name, tick.UTC().Format(time.RFC3339Nano), err)
	}
	fields := wj.Args()
	cq := s.p.Queue
	res, err := cq.DB.Tick(ctx, rdb.TickParams{Schedule: sc.name, Tick: tick, TTL: tickKeyTTL(sc.t, tick), CatchUp: catchUp, Fields: fields})
	if err != nil {
		fatal := rdb.Fatal(err)
		err = fmt.Errorf("streamq: periodic %s tick %s: %w", sc.name, tick.UTC().Format(time.RFC3339Nano), err)
		if fatal {
			return "", 0, &fatalError{err}
		}
		return "", 0, err
	}
	o, id := parseResult(res)
	switch o {
	case enqueued:
		s.log.DebugContext(ctx, "streamq: periodic job enqueued", "schedule", sc.name, "tick", tick, "msg_id", id, "catch_up", catchUp)
	case duplicate, stale:
		s.log.DebugContext(ctx, "streamq: periodic tick already enqueued by another scheduler", "schedule", sc.name, "tick", tick, "msg_id", id)
	}
	return id, o, nil
}

// parseResult decodes scriptTick's reply.
func parseResult(res []any) (outcome, string) {
	str := func(i int) string {
		if i < len(res) {
			s, _ := res[i].(string)
			return s
		}
		return ""
	}
	if n, _ := res[0].(int64); n == 1 {
		return enqueued, str(1)
	}
	switch str(1) {
	case "dup":
		return duplicate, str(2)
	case "stale":
		return stale, ""
	case "early":
		return early, str(2)
	}
	return neverRan, ""
}

// tickKeyTTL is how long the tick key of tick lives: twice the gap to the
// following tick plus a minute. Once the following tick fired, the last-tick
// key alone keeps tick from firing again; the tick key only has to outlive
// the schedulers that may still be racing for it.
func tickKeyTTL(t ticker, tick time.Time) time.Duration {
	gap := dormantRecheck
	if n := t.next(tick); !n.IsZero() {
		gap = n.Sub(tick)
	}
	return 2*gap + time.Minute
}

// fatalError marks an error that makes Run return instead of retrying.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func asFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
