package periodic

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// env is one test's queue on the shared test Redis.
type env struct {
	rdb *redis.Client
	q   *streamq.Queue
	p   *streamq.Producer
}

func setup(t *testing.T, qcfg *streamq.QueueConfig) *env {
	t.Helper()
	rdb := redistest.NewClient(t)
	q, err := streamq.NewQueue(rdb, redistest.Name(t), qcfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &env{rdb: rdb, q: q, p: p}
}

// scheduler returns a new scheduler on e's queue with clk as its clock.
func (e *env) scheduler(t *testing.T, clk *fakeClock, cfg Config) *Scheduler {
	t.Helper()
	if clk != nil {
		cfg.Now = clk.Now
	}
	s, err := New(e.p, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// job is a stream entry as the test sees it.
type job struct {
	id      string
	payload string
	name    string
	tick    time.Time
	enq     string
	headers map[string]string
}

// jobs reads every entry of the queue's stream.
func (e *env) jobs(t *testing.T) []job {
	t.Helper()
	msgs, err := e.rdb.XRange(context.Background(), core.Of(e.q).Keys.Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]job, 0, len(msgs))
	for _, m := range msgs {
		j := job{id: m.ID, headers: map[string]string{}}
		j.payload, _ = m.Values["payload"].(string)
		j.enq, _ = m.Values["enq"].(string)
		if v, _ := m.Values["v"].(string); v != "1" {
			t.Fatalf("entry %s has v=%q, want 1", m.ID, v)
		}
		h, _ := m.Values["headers"].(string)
		if err := json.Unmarshal([]byte(h), &j.headers); err != nil {
			t.Fatalf("entry %s headers %q: %v", m.ID, h, err)
		}
		j.name = j.headers[HeaderName]
		if j.tick, err = time.Parse(time.RFC3339Nano, j.headers[HeaderTick]); err != nil {
			t.Fatalf("entry %s tick header: %v", m.ID, err)
		}
		out = append(out, j)
	}
	return out
}

// ticksOf returns the ticks of the jobs, in stream order.
func ticksOf(js []job) []time.Time {
	out := make([]time.Time, len(js))
	for i, j := range js {
		out[i] = j.tick
	}
	return out
}

func sameTicks(t *testing.T, got []time.Time, want ...time.Time) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i].Equal(want[i])
	}
	if !ok {
		t.Fatalf("ticks %v, want %v", got, want)
	}
}

func TestNew_Validation(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var ce *streamq.ConfigError
	if _, err := New(nil, nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), "streamq.NewProducer") {
		t.Errorf("nil producer: %v", err)
	}
	if _, err := New(e.p, &Config{Missed: 7}); !errors.As(err, &ce) || ce.Field != "periodic.Config.Missed" {
		t.Errorf("bad policy: %v", err)
	}
	cfg := &Config{}
	s, err := New(e.p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Location != nil || cfg.Now != nil {
		t.Errorf("New changed the caller's config: %+v", cfg)
	}
	if s.cfg.Location != time.UTC || s.cfg.Now == nil || s.cfg.Missed != MissedSkip {
		t.Errorf("defaults not applied: %+v", s.cfg)
	}
}

func TestScheduler_RegisterValidation(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	s := e.scheduler(t, nil, Config{})
	if err := s.Register("taken", "@hourly", nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		reg  func() error
		hint string // part of the error that says how to fix it
	}{
		{"empty name", func() error { return s.Register("", "@hourly", nil) }, "name the schedule"},
		{"name with space", func() error { return s.Register("a b", "@hourly", nil) }, "without spaces"},
		{"long name", func() error { return s.Register(strings.Repeat("x", streamq.MaxNameLen+1), "@hourly", nil) }, "use at most"},
		{"duplicate name", func() error { return s.Register("taken", "@daily", nil) }, "give each schedule its own name"},
		{"duplicate name interval", func() error { return s.RegisterInterval("taken", time.Second, nil) }, "give each schedule its own name"},
		{"bad spec", func() error { return s.Register("x", "every day", nil) }, "use 5 fields"},
		{"empty spec", func() error { return s.Register("x", "", nil) }, "is empty"},
		{"never fires", func() error { return s.Register("x", "0 0 30 2 *", nil) }, "never fires"},
		{"zone twice", func() error { return s.Register("x", "CRON_TZ=UTC @daily", nil, InLocation(paris)) }, "keep one of the two"},
		{"nil zone", func() error { return s.Register("x", "@daily", nil, InLocation(nil)) }, "pass a zone"},
		{"bad policy", func() error { return s.Register("x", "@daily", nil, WithMissed(-1)) }, "MissedRunOnce"},
		{"reserved header", func() error {
			return s.Register("x", "@daily", nil, WithHeaders(map[string]string{HeaderTick: "1"}))
		}, "set by the scheduler"},
		{"interval too short", func() error { return s.RegisterInterval("x", time.Millisecond, nil) }, "use a longer interval"},
		{"interval not whole ms", func() error { return s.RegisterInterval("x", time.Second+time.Microsecond, nil) }, "round it"},
		{"interval with zone", func() error { return s.RegisterInterval("x", time.Second, nil, InLocation(paris)) }, "remove it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.reg()
			var ce *streamq.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.hint) {
				t.Fatalf("err = %v, want a ConfigError containing %q", err, tt.hint)
			}
		})
	}
}

func TestScheduler_Next(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	s := e.scheduler(t, nil, Config{Location: tokyo})
	must(t, s.Register("cfg-zone", "0 9 * * *", nil))
	must(t, s.Register("opt-zone", "0 9 * * *", nil, InLocation(time.UTC)))
	must(t, s.Register("seconds", "15 * * * * *", nil))
	must(t, s.RegisterInterval("interval", 90*time.Second, nil))
	from := utc("2024-05-01T00:00:00Z")
	for name, want := range map[string]string{
		"cfg-zone": "2024-05-02T00:00:00Z", // 09:00 Tokyo is midnight UTC; strictly after from
		"opt-zone": "2024-05-01T09:00:00Z",
		"seconds":  "2024-05-01T00:00:15Z",
		"interval": "2024-05-01T00:01:30Z",
	} {
		got, ok := s.Next(name, from)
		if !ok || !got.Equal(utc(want)) {
			t.Errorf("Next(%s) = %s, %v; want %s", name, got.UTC(), ok, want)
		}
	}
	if _, ok := s.Next("unknown", from); ok {
		t.Error("Next of an unknown schedule reported true")
	}
}

// TestScheduler_OneJobPerTick runs several schedulers through the same ticks
// with a fake clock: each tick gives one job, whoever gets there first.
func TestScheduler_OneJobPerTick(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	t0 := utc("2024-05-01T10:00:00.400Z")
	clk := newFakeClock(t0)
	var ss []*Scheduler
	var sts [][]state
	for range 3 {
		s := e.scheduler(t, clk, Config{})
		must(t, s.Register("beat", "* * * * * *", []byte("hello"), WithHeaders(map[string]string{"team": "ops"})))
		ss = append(ss, s)
		sts = append(sts, s.start(s.scheds, t0))
	}
	// Each scheduler wakes a little late, at a different offset, at every tick.
	for sec := 1; sec <= 5; sec++ {
		for i, s := range ss {
			now := utc("2024-05-01T10:00:00Z").Add(time.Duration(sec)*time.Second + time.Duration(i*7)*time.Millisecond)
			clk.Set(now)
			wake, failed, err := s.step(ctx, s.scheds, sts[i], now)
			if err != nil || failed {
				t.Fatalf("step: %v (failed %v)", err, failed)
			}
			if want := utc("2024-05-01T10:00:00Z").Add(time.Duration(sec+1) * time.Second); !wake.Equal(want) {
				t.Fatalf("wake %s, want %s", wake, want)
			}
		}
	}
	js := e.jobs(t)
	base := utc("2024-05-01T10:00:00Z")
	sameTicks(t, ticksOf(js), base.Add(time.Second), base.Add(2*time.Second), base.Add(3*time.Second), base.Add(4*time.Second), base.Add(5*time.Second))
	for _, j := range js {
		if j.payload != "hello" || j.name != "beat" || j.headers["team"] != "ops" {
			t.Fatalf("job %+v", j)
		}
		if j.headers[HeaderTick] != j.tick.UTC().Format(time.RFC3339) {
			t.Fatalf("tick header %q is not RFC 3339 UTC", j.headers[HeaderTick])
		}
	}
	// The tick key holds the job's ID and expires.
	key := core.Of(e.q).Keys.Part("periodic:beat:" + strconv.FormatInt(base.Add(time.Second).UnixMilli(), 10))
	if id, err := e.rdb.Get(ctx, key).Result(); err != nil || id != js[0].id {
		t.Fatalf("tick key = %q, %v; want %s", id, err, js[0].id)
	}
	if ttl := e.rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 2*time.Second+time.Minute {
		t.Fatalf("tick key TTL %s", ttl)
	}
	// A retry of an old tick (say, after a timeout whose reply was lost)
	// reports the existing job and adds nothing.
	id, o, err := ss[0].fire(ctx, ss[0].scheds[0], base.Add(2*time.Second), false)
	if err != nil || o != duplicate || id != js[1].id {
		t.Fatalf("refire = %q, %v, %v; want duplicate of %s", id, o, err, js[1].id)
	}
}

// TestScheduler_FallsBehind: a scheduler that wakes several ticks late
// enqueues only the latest due tick.
func TestScheduler_FallsBehind(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	t0 := utc("2024-05-01T10:00:00Z")
	clk := newFakeClock(t0)
	s := e.scheduler(t, clk, Config{})
	must(t, s.RegisterInterval("every-10s", 10*time.Second, nil))
	sts := s.start(s.scheds, t0)
	now := t0.Add(47 * time.Second)
	clk.Set(now)
	wake, _, err := s.step(ctx, s.scheds, sts, now)
	if err != nil {
		t.Fatal(err)
	}
	sameTicks(t, ticksOf(e.jobs(t)), t0.Add(40*time.Second))
	if !wake.Equal(t0.Add(50 * time.Second)) {
		t.Fatalf("wake %s", wake)
	}
}

// TestScheduler_DaylightSaving drives two schedulers with an injected clock
// through each dstCase: the stream gets one job per local wall time, at the
// instants the case lists, and the tick keys (the schedulers' agreement on a
// tick) are named after those instants, even for the scheduler that wakes up
// late.
func TestScheduler_DaylightSaving(t *testing.T) {
	t.Parallel()
	for _, tt := range dstCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, nil)
			ctx := context.Background()
			from, to := utc(tt.from), utc(tt.to)
			clk := newFakeClock(from)
			type runner struct {
				s   *Scheduler
				sts []state
				lag time.Duration // how late after the wake-up this scheduler steps
			}
			var rs []*runner
			for _, lag := range []time.Duration{0, 250 * time.Millisecond} {
				s := e.scheduler(t, clk, Config{})
				must(t, s.Register("dst", tt.spec, []byte("p")))
				rs = append(rs, &runner{s: s, sts: s.start(s.scheds, from), lag: lag})
			}
			now, steps := from, 0
			for ; !now.After(to); steps++ {
				if steps == 100 {
					t.Fatalf("still at %s after %d steps", now, steps)
				}
				wake := now.Add(dormantRecheck)
				for _, r := range rs {
					clk.Set(now.Add(r.lag))
					w, failed, err := r.s.step(ctx, r.s.scheds, r.sts, now.Add(r.lag))
					if err != nil || failed {
						t.Fatalf("step at %s: %v (failed %v)", now.Add(r.lag), err, failed)
					}
					wake = minTime(wake, w)
				}
				now = wake
			}
			want := make([]time.Time, len(tt.want))
			for i, w := range tt.want {
				want[i] = utc(w)
			}
			js := e.jobs(t)
			if got := ticksOf(js); !equalTimes(got, want) {
				t.Fatalf("jobs for ticks\n %s\nwant\n %s", formatIn(got, specZone(t, tt.spec)), tt.want)
			}
			for i, tick := range want {
				key := core.Of(e.q).Keys.Part("periodic:dst:" + strconv.FormatInt(tick.UnixMilli(), 10))
				if id, err := e.rdb.Get(ctx, key).Result(); err != nil || id != js[i].id {
					t.Errorf("tick key %s = %q, %v; want %s", key, id, err, js[i].id)
				}
			}
		})
	}
}

// TestScheduler_Missed covers what a scheduler does on start with the ticks
// that passed while no scheduler ran.
func TestScheduler_Missed(t *testing.T) {
	t.Parallel()
	base := utc("2024-05-01T00:00:00Z")
	hour := func(n int) time.Time { return base.Add(time.Duration(n) * time.Hour) }
	tests := []struct {
		name    string
		policy  MissedPolicy
		option  bool // set the policy per schedule instead of in Config
		history bool // the schedule fired at hour 1 before the outage
		want    []time.Time
	}{
		{"skip", MissedSkip, false, true, []time.Time{hour(1), hour(6)}},
		{"run once", MissedRunOnce, false, true, []time.Time{hour(1), hour(5), hour(6)}},
		{"run once per schedule", MissedRunOnce, true, true, []time.Time{hour(1), hour(5), hour(6)}},
		{"run once without history", MissedRunOnce, false, false, []time.Time{hour(6)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, nil)
			ctx := context.Background()
			clk := newFakeClock(base)
			newSched := func() (*Scheduler, []state) {
				cfg := Config{Missed: tt.policy}
				var opts []Option
				if tt.option {
					cfg.Missed = MissedSkip
					opts = append(opts, WithMissed(tt.policy))
				}
				s := e.scheduler(t, clk, cfg)
				must(t, s.Register("hourly", "@hourly", nil, opts...))
				return s, s.start(s.scheds, clk.Now())
			}
			if tt.history {
				// A scheduler runs from 00:30 to 01:30, firing 01:00.
				clk.Set(base.Add(30 * time.Minute))
				s, st := newSched()
				clk.Set(hour(1))
				if _, _, err := s.step(ctx, s.scheds, st, hour(1)); err != nil {
					t.Fatal(err)
				}
			}
			// Every scheduler is down until 05:20; two start at once.
			restart := hour(5).Add(20 * time.Minute)
			clk.Set(restart)
			a, sa := newSched()
			b, sb := newSched()
			for _, p := range []struct {
				s  *Scheduler
				st []state
			}{{a, sa}, {b, sb}} {
				wake, failed, err := p.s.step(ctx, p.s.scheds, p.st, restart)
				if err != nil || failed {
					t.Fatalf("step: %v (failed %v)", err, failed)
				}
				if !wake.Equal(hour(6)) {
					t.Fatalf("wake %s, want %s", wake, hour(6))
				}
			}
			clk.Set(hour(6))
			if _, _, err := a.step(ctx, a.scheds, sa, hour(6)); err != nil {
				t.Fatal(err)
			}
			sameTicks(t, ticksOf(e.jobs(t)), tt.want...)
		})
	}
}

// TestScheduler_StaleTick: a tick older than the last enqueued one is never
// enqueued, even once its tick key has expired.
func TestScheduler_StaleTick(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	t0 := utc("2024-05-01T10:00:00Z")
	s := e.scheduler(t, newFakeClock(t0), Config{})
	must(t, s.RegisterInterval("i", time.Second, nil))
	sc := s.scheds[0]
	if _, o, err := s.fire(ctx, sc, t0.Add(2*time.Second), false); err != nil || o != enqueued {
		t.Fatalf("fire: %v, %v", o, err)
	}
	if _, o, err := s.fire(ctx, sc, t0.Add(time.Second), false); err != nil || o != stale {
		t.Fatalf("older tick: %v, %v; want stale", o, err)
	}
	if n := len(e.jobs(t)); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
}

// TestScheduler_QueueFull: the scheduler respects the queue's cap and keeps
// no trace of a tick it could not enqueue.
func TestScheduler_QueueFull(t *testing.T) {
	t.Parallel()
	e := setup(t, &streamq.QueueConfig{MaxLen: 2})
	ctx := context.Background()
	must(t, e.q.Setup(ctx))
	for range 2 {
		if _, err := e.p.Enqueue(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	t0 := utc("2024-05-01T10:00:00Z")
	s := e.scheduler(t, newFakeClock(t0), Config{})
	must(t, s.RegisterInterval("i", time.Second, nil))
	_, _, err := s.fire(ctx, s.scheds[0], t0, false)
	if !errors.Is(err, streamq.ErrQueueFull) {
		t.Fatalf("err = %v, want ErrQueueFull", err)
	}
	if n := e.rdb.Exists(ctx, core.Of(e.q).Keys.Part("periodic-last:i")).Val(); n != 0 {
		t.Fatal("last-tick key written for a tick that was not enqueued")
	}
}

// tickHook counts the tick script calls made through a client.
type tickHook struct{ calls atomic.Int64 }

func (h *tickHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tickHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 4 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			if key, _ := args[4].(string); strings.Contains(key, ":periodic:") {
				h.calls.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}

func (h *tickHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// warnCounter is a slog.Handler that counts records at WARN and above.
type warnCounter struct{ n atomic.Int64 }

func (w *warnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnCounter) Handle(context.Context, slog.Record) error    { w.n.Add(1); return nil }
func (w *warnCounter) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnCounter) WithGroup(string) slog.Handler                { return w }

// setupFull returns an env whose stream is at its cap of 2 with jobs that
// nothing reads, so trimming cannot make room, and a hook counting the tick
// script calls of its client.
func setupFull(t *testing.T) (*env, *tickHook) {
	t.Helper()
	e := setup(t, &streamq.QueueConfig{MaxLen: 2})
	must(t, e.q.Setup(context.Background()))
	e.fill(t)
	hook := &tickHook{}
	e.rdb.AddHook(hook)
	return e, hook
}

// fill enqueues jobs until the stream is at its cap.
func (e *env) fill(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for range core.Of(e.q).MaxLen - e.rdb.XLen(ctx, core.Of(e.q).Keys.Stream).Val() {
		if _, err := e.p.Enqueue(ctx, []byte("backlog")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScheduler_RunBacksOff: while the stream is full, Run retries a tick
// after a backoff of 50 ms doubling to 5 s, not in a busy loop, with one
// warning per attempt; once there is room again, the job is enqueued.
func TestScheduler_RunBacksOff(t *testing.T) {
	t.Parallel()
	e, hook := setupFull(t)
	warns := &warnCounter{}
	s := e.scheduler(t, nil, Config{Logger: slog.New(warns)})
	must(t, s.RegisterInterval("fast", MinInterval, nil))

	r := redistest.Background(t, "Scheduler.Run", 5*time.Second, s.Run)
	redistest.WaitFor(t, 5*time.Second, "a first tick attempt", func() bool { return hook.calls.Load() >= 1 })
	// Watch for 1.5 s from the first attempt. The backoff waits at least
	// 25, 50, 100, 200, 400 and 800 ms (half of 50 ms doubling, the jitter's
	// floor), so attempt 7 comes 1575 ms after the first at the earliest.
	window := time.NewTimer(1500 * time.Millisecond)
	defer window.Stop()
	select {
	case <-window.C:
	case <-r.Done():
		t.Fatalf("Run returned early: %v", r.Err())
	}
	// One more call than attempts if the script was not cached yet (EVALSHA,
	// then EVAL).
	calls, logged := hook.calls.Load(), warns.n.Load()
	if calls < 3 || calls > 7 {
		t.Errorf("%d tick script calls in 1.5 s while the queue is full, want 3 to 7 (backoff from 50 ms)", calls)
	}
	if logged < 1 || logged > 6 {
		t.Errorf("%d warnings in 1.5 s, want one per attempt (1 to 6)", logged)
	}
	if n := e.rdb.XLen(context.Background(), core.Of(e.q).Keys.Stream).Val(); n != 2 {
		t.Fatalf("%d entries in a full stream of 2", n)
	}

	// Room again: the next retry (within the current delay, at most 3.2 s)
	// enqueues the latest due tick.
	must(t, e.rdb.XTrimMaxLen(context.Background(), core.Of(e.q).Keys.Stream, 0).Err())
	redistest.WaitFor(t, 10*time.Second, "a periodic job once the stream has room", func() bool {
		return e.rdb.XLen(context.Background(), core.Of(e.q).Keys.Stream).Val() > 0
	})
	must(t, r.Stop())
}

// TestScheduler_BackoffSteps follows the backoff with an injected clock: no
// attempt before the delay, delays of 50 ms doubling to 5 s (each between
// half of its ceiling and the ceiling), the failed tick itself enqueued once
// the stream has room, and the backoff back at 50 ms after that success.
func TestScheduler_BackoffSteps(t *testing.T) {
	t.Parallel()
	e, hook := setupFull(t)
	ctx := context.Background()
	t0 := utc("2024-05-01T10:00:00Z")
	clk := newFakeClock(t0.Add(-time.Minute))
	s := e.scheduler(t, clk, Config{Logger: slog.New(&warnCounter{})})
	must(t, s.Register("hourly", "@hourly", nil))
	sts := s.start(s.scheds, clk.Now())

	step := func(now time.Time) (time.Time, bool) {
		t.Helper()
		clk.Set(now)
		wake, failed, err := s.step(ctx, s.scheds, sts, now)
		if err != nil {
			t.Fatalf("step at %s: %v", now, err)
		}
		return wake, failed
	}
	// expectDelay checks that a failed step at now asks to wake after a
	// delay with the given ceiling.
	expectDelay := func(now, wake time.Time, ceiling time.Duration) {
		t.Helper()
		if d := wake.Sub(now); d < ceiling/2 || d > ceiling {
			t.Fatalf("after a failure at %s: retry in %s, want %s to %s", now, d, ceiling/2, ceiling)
		}
	}

	now := t0
	ceilings := []time.Duration{50, 100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i, ceiling := range ceilings {
		calls := hook.calls.Load()
		wake, failed := step(now)
		if !failed {
			t.Fatalf("attempt %d succeeded on a full stream", i+1)
		}
		expectDelay(now, wake, ceiling*time.Millisecond)
		if n := hook.calls.Load() - calls; n < 1 || n > 2 { // EVALSHA, and EVAL if the script was not cached
			t.Fatalf("attempt %d made %d script calls", i+1, n)
		}
		// A step before the retry time (a timer that fired early, another
		// schedule's tick) does not try again.
		calls = hook.calls.Load()
		if early, _ := step(wake.Add(-time.Millisecond)); !early.Equal(wake) {
			t.Fatalf("step before the retry time moved the retry from %s to %s", wake, early)
		}
		if n := hook.calls.Load() - calls; n != 0 {
			t.Fatalf("%d script calls before the retry time", n)
		}
		now = wake
	}

	// Room again: the retry enqueues the 10:00 tick, the one that failed.
	must(t, e.rdb.XTrimMaxLen(ctx, core.Of(e.q).Keys.Stream, 0).Err())
	wake, failed := step(now)
	if failed {
		t.Fatal("retry failed with room in the stream")
	}
	sameTicks(t, ticksOf(e.jobs(t)), t0)
	if !wake.Equal(t0.Add(time.Hour)) {
		t.Fatalf("wake %s after the success, want the next tick %s", wake, t0.Add(time.Hour))
	}

	// Full again at 11:00: the backoff starts over at 50 ms.
	e.fill(t)
	now = t0.Add(time.Hour)
	wake, failed = step(now)
	if !failed {
		t.Fatal("11:00 succeeded on a full stream")
	}
	expectDelay(now, wake, 50*time.Millisecond)
}

func TestScheduler_Run(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	s := e.scheduler(t, nil, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Run(ctx); err == nil || !strings.Contains(err.Error(), "call Register") {
		t.Fatalf("Run without schedules: %v", err)
	}
	must(t, s.RegisterInterval("fast", MinInterval, []byte("p")))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	redistest.WaitFor(t, 5*time.Second, "3 periodic jobs", func() bool {
		return e.rdb.XLen(context.Background(), core.Of(e.q).Keys.Stream).Val() >= 3
	})
	if err := s.Run(ctx); !errors.Is(err, streamq.ErrRunning) {
		t.Errorf("second Run: %v, want ErrRunning", err)
	}
	if err := s.RegisterInterval("late", time.Second, nil); err == nil || !strings.Contains(err.Error(), "before calling Run") {
		t.Errorf("Register during Run: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	js := e.jobs(t)
	for i := 1; i < len(js); i++ {
		if !js[i].tick.After(js[i-1].tick) || js[i].tick.UnixMilli()%MinInterval.Milliseconds() != 0 {
			t.Fatalf("ticks not increasing multiples of %s: %v", MinInterval, ticksOf(js))
		}
	}
}

// TestScheduler_RunFatal: Run returns errors that retrying cannot fix.
func TestScheduler_RunFatal(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	must(t, e.rdb.Set(ctx, core.Of(e.q).Keys.Stream, "not a stream", time.Minute).Err())
	s := e.scheduler(t, nil, Config{})
	must(t, s.RegisterInterval("fast", MinInterval, nil))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Run = %v, want a WRONGTYPE error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return on a fatal error")
	}
}

// TestScheduler_RunsProducerHooks: periodic jobs are written with
// Producer.EntryFields, so the producer's EnqueueHooks run for them and the
// headers they add (a trace context, say) reach the job.
func TestScheduler_RunsProducerHooks(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	var calls int
	p, err := streamq.NewProducer(e.q, &streamq.ProducerConfig{Hooks: []streamq.EnqueueHook{
		func(_ context.Context, h map[string]string) {
			calls++
			h["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			h["saw-name"] = h[HeaderName] // hooks see the periodic headers
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(p, &Config{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Register("beat", "* * * * * *", []byte("hello"), WithHeaders(map[string]string{"team": "ops"})))
	tick := utc("2024-05-01T10:00:01Z")
	if _, o, err := s.fire(ctx, s.scheds[0], tick, false); err != nil || o != enqueued {
		t.Fatalf("fire = %v, %v; want enqueued", o, err)
	}
	js := e.jobs(t)
	if len(js) != 1 {
		t.Fatalf("%d jobs, want 1", len(js))
	}
	h := js[0].headers
	if h["traceparent"] == "" || h["saw-name"] != "beat" || h["team"] != "ops" || !js[0].tick.Equal(tick) {
		t.Fatalf("job headers %v: want the hook's traceparent, the user header and the periodic headers", h)
	}
	if calls != 1 {
		t.Fatalf("hook ran %d times, want 1", calls)
	}
}

func TestFromMessage(t *testing.T) {
	t.Parallel()
	tick := utc("2024-05-01T10:00:00Z")
	name, got, ok := FromMessage(&streamq.Message{Headers: map[string]string{HeaderName: "n", HeaderTick: "2024-05-01T10:00:00Z"}})
	if !ok || name != "n" || !got.Equal(tick) {
		t.Fatalf("FromMessage = %q, %s, %v", name, got, ok)
	}
	for _, m := range []*streamq.Message{nil, {Headers: map[string]string{}}, {Headers: map[string]string{HeaderName: "n", HeaderTick: "yesterday"}}} {
		if _, _, ok := FromMessage(m); ok {
			t.Errorf("FromMessage(%+v) reported true", m)
		}
	}
}

func TestMissedPolicy_String(t *testing.T) {
	t.Parallel()
	for p, want := range map[MissedPolicy]string{MissedSkip: "skip", MissedRunOnce: "run_once", 9: "MissedPolicy(9)"} {
		if got := p.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(p), got, want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestScheduler_RejectsBadJobs: a schedule whose payload or headers break
// the queue's limits (or are not valid UTF-8) is refused when registered.
func TestScheduler_RejectsBadJobs(t *testing.T) {
	t.Parallel()
	e := setup(t, &streamq.QueueConfig{MaxPayloadBytes: 4})
	s := e.scheduler(t, nil, Config{})
	var ce *streamq.ConfigError
	if err := s.RegisterInterval("big", time.Second, []byte("12345")); !errors.As(err, &ce) || !strings.Contains(err.Error(), "MaxPayloadBytes") {
		t.Errorf("payload of 5 bytes with a limit of 4: %v, want a ConfigError naming MaxPayloadBytes", err)
	}
	if err := s.Register("bad", "* * * * *", nil, WithHeaders(map[string]string{"k": "\xff"})); !errors.As(err, &ce) || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("header that is not UTF-8: %v, want a ConfigError about UTF-8", err)
	}
}
