package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/testsignal"
	"github.com/streamq/streamq/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	errShutdown  = errors.New("shutdown")
	errLost      = errors.New("lost")
	errTimeout   = errors.New("timeout")
	errPermanent = errors.New("permanent")
	errPostpone  = errors.New("postpone")
)

const wait = 10 * time.Second

// fakeBackend hands out queued deliveries and records every settlement, in
// memory: the engine's rules are tested without Redis.
type fakeBackend struct {
	mu       sync.Mutex
	queue    []Delivery
	charges  []string // "key+" for a charge, "key-" for a taken-back one
	finished []string
	moves    []move
	dead     []dead
	abandon  []string
	lost     map[string]bool // keys Touch reports lost
	notHeld  map[string]bool // keys Charge reports not held
	fetchErr error
	failures []error       // the next settlements (finish, move, dead letter) fail with these, in turn
	tries    int           // settlement calls made
	changed  chan struct{} // a settlement happened
	loops    []Loop
}

type move struct {
	key    string
	fields map[string]any
	delay  time.Duration
}

type dead struct {
	key    string
	fields map[string]any
}

func newFake(ds ...Delivery) *fakeBackend {
	return &fakeBackend{queue: ds, lost: map[string]bool{}, notHeld: map[string]bool{}, changed: make(chan struct{}, 1000)}
}

func (f *fakeBackend) note() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// failing counts a settlement call and returns the error it must fail
// with, if any. f.mu is held.
func (f *fakeBackend) failing() error {
	f.tries++
	if len(f.failures) == 0 {
		return nil
	}
	err := f.failures[0]
	f.failures = f.failures[1:]
	return err
}

func (f *fakeBackend) Start(context.Context) error { return nil }

func (f *fakeBackend) Fetch(ctx context.Context, n int, wait time.Duration, _ func(string) bool) ([]Delivery, error) {
	f.mu.Lock()
	if f.fetchErr != nil {
		err := f.fetchErr
		f.mu.Unlock()
		return nil, err
	}
	take := min(n, len(f.queue))
	ds := append([]Delivery(nil), f.queue[:take]...)
	f.queue = f.queue[take:]
	f.mu.Unlock()
	if len(ds) == 0 {
		t := time.NewTimer(min(wait, 5*time.Millisecond))
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return ds, nil
}

func (f *fakeBackend) Charge(_ context.Context, d *Delivery, charge bool) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.notHeld[d.Key] {
		return false, nil
	}
	sign := "-"
	if charge {
		sign = "+"
	}
	f.charges = append(f.charges, d.Key+sign)
	return true, nil
}

func (f *fakeBackend) Touch(_ context.Context, keys []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var lost []string
	for _, k := range keys {
		if f.lost[k] {
			lost = append(lost, k)
		}
	}
	return lost, nil
}

func (f *fakeBackend) Finish(_ context.Context, done []Finished) error {
	f.mu.Lock()
	if err := f.failing(); err != nil {
		f.mu.Unlock()
		return err
	}
	for _, d := range done {
		f.finished = append(f.finished, d.Key)
	}
	f.mu.Unlock()
	f.note()
	return nil
}

func (f *fakeBackend) Move(_ context.Context, d *Delivery, fields []any, delay time.Duration, _ rdb.Settle) (bool, error) {
	f.mu.Lock()
	if err := f.failing(); err != nil {
		f.mu.Unlock()
		return false, err
	}
	f.moves = append(f.moves, move{d.Key, toMap(fields), delay})
	f.mu.Unlock()
	f.note()
	return true, nil
}

func (f *fakeBackend) DropCancels(context.Context, []string) error { return nil }

func (f *fakeBackend) DeadLetter(_ context.Context, d *Delivery, _, _ string, _ rdb.Settle, fields []any) (string, error) {
	f.mu.Lock()
	if err := f.failing(); err != nil {
		f.mu.Unlock()
		return "", err
	}
	f.dead = append(f.dead, dead{d.Key, toMap(fields)})
	f.mu.Unlock()
	f.note()
	return "dl-" + d.Key, nil
}

func (f *fakeBackend) Abandon(key string) {
	f.mu.Lock()
	f.abandon = append(f.abandon, key)
	f.mu.Unlock()
}

func (f *fakeBackend) Loops() []Loop { return f.loops }
func (f *fakeBackend) Wake()         {}

// settled waits until n jobs were settled (finished, moved or dead).
func (f *fakeBackend) settled(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(wait)
	for {
		f.mu.Lock()
		got := len(f.finished) + len(f.moves) + len(f.dead)
		f.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-f.changed:
		case <-deadline:
			t.Fatalf("%d jobs settled, want %d", got, n)
		}
	}
}

func toMap(fields []any) map[string]any {
	m := make(map[string]any, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		switch v := fields[i+1].(type) {
		case []byte:
			m[k] = string(v)
		default:
			m[k] = v
		}
	}
	return m
}

// job returns a fresh read of a job: charged by the fetch, never run.
func job(key string, extra ...string) Delivery {
	wj := wire.Job{Payload: []byte("p-" + key), EnqMillis: 1}
	fields := toMap(wj.Args())
	for i := 0; i+1 < len(extra); i += 2 {
		fields[extra[i]] = extra[i+1]
	}
	return Delivery{Key: key, ID: key, Fields: fields, Charged: true, Suspect: wire.Crashed(fields)}
}

// testExec runs handle and classifies the test's sentinel errors.
type testExec struct {
	handle func(ctx context.Context, r *Run) error
}

type noState struct{}

func (x testExec) Call(ctx context.Context, r Run, _ *noState) error { return x.handle(ctx, &r) }

func (testExec) Classify(err error) Outcome {
	switch {
	case errors.Is(err, errPermanent):
		return Outcome{Kind: Permanent}
	case errors.Is(err, errPostpone):
		return Outcome{Kind: Postpone, Delay: time.Second}
	}
	return Outcome{Kind: Fail}
}

type runner struct {
	eng    *Engine[noState]
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, b Backend, cfg Config, handle func(ctx context.Context, r *Run) error) *runner {
	t.Helper()
	return startWith(t, context.Background(), b, cfg, handle)
}

// startWith is start with the run's context made from ctx (which may ask
// for test signals).
func startWith(t *testing.T, ctx context.Context, b Backend, cfg Config, handle func(ctx context.Context, r *Run) error) *runner {
	t.Helper()
	def := Config{
		Queue:           "q",
		Concurrency:     4,
		Block:           10 * time.Millisecond,
		ShutdownTimeout: wait,
		TouchEvery:      5 * time.Millisecond,
		TouchTimeout:    time.Second,
		MaxDeliveries:   3,
		Backoff:         func(n int) time.Duration { return time.Duration(n) * time.Minute },
		FinishBatch:     16,
		ShutdownCause:   errShutdown,
		LostCause:       errLost,
		TimeoutCause:    errTimeout,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, set := range []struct {
		v   *time.Duration
		cfg time.Duration
	}{{&def.ShutdownTimeout, cfg.ShutdownTimeout}, {&def.JobTimeout, cfg.JobTimeout}} {
		if set.cfg != 0 {
			*set.v = set.cfg
		}
	}
	if cfg.Concurrency != 0 {
		def.Concurrency = cfg.Concurrency
	}
	if cfg.MaxDeliveries != 0 {
		def.MaxDeliveries = cfg.MaxDeliveries
	}
	def.OnEvent = cfg.OnEvent
	def.Gate = cfg.Gate
	e := New[noState](def, testExec{handle})
	ctx, cancel := context.WithCancel(ctx)
	r := &runner{eng: e, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- e.Run(ctx, b) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *runner) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(2 * wait):
		t.Fatal("Run did not return")
		return nil
	}
}

func TestEngine_Outcomes(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name        string
		d           Delivery
		err         error
		wantAttempt int // the handler's Attempt; 0: it must not run
		check       func(t *testing.T, f *fakeBackend)
	}{
		{"success acknowledges", job("ok"), nil, 1, func(t *testing.T, f *fakeBackend) {
			if len(f.finished) != 1 || f.finished[0] != "ok" {
				t.Errorf("finished %v", f.finished)
			}
		}},
		{"a failure retries with backoff, charged", job("f"), boom, 1, func(t *testing.T, f *fakeBackend) {
			m := f.moves[0]
			if m.delay != time.Minute || m.fields["attempt"] != "1" || m.fields["err"] != "boom" || m.fields["ff"] == nil || m.fields["crashed"] != nil {
				t.Errorf("move %+v", m)
			}
		}},
		{"the last attempt dead-letters", job("last", "attempt", "2"), boom, 3, func(t *testing.T, f *fakeBackend) {
			d := f.dead[0].fields
			if d["dl_reason"] != ReasonMaxDeliveries || d["dl_attempts"] != "3" || d["dl_error"] != "boom" || d["payload"] != "p-last" {
				t.Errorf("dead letter %v", d)
			}
		}},
		{"permanent dead-letters at once", job("perm"), errPermanent, 1, func(t *testing.T, f *fakeBackend) {
			if d := f.dead[0].fields; d["dl_reason"] != ReasonPermanent || d["dl_attempts"] != "1" {
				t.Errorf("dead letter %v", d)
			}
		}},
		{"postpone is not charged", job("pp", "attempt", "2"), errPostpone, 3, func(t *testing.T, f *fakeBackend) {
			m := f.moves[0]
			if m.delay != time.Second || m.fields["attempt"] != "2" || m.fields["err"] != nil {
				t.Errorf("move %+v, want the job again at attempt 2 (this run not charged), after 1s", m)
			}
		}},
		{"malformed dead-letters with its raw fields", Delivery{Key: "bad", ID: "bad", Fields: map[string]any{"v": "9", "x": "y"}, Charged: true}, nil, 0,
			func(t *testing.T, f *fakeBackend) {
				if d := f.dead[0].fields; d["dl_reason"] != ReasonMalformed || d["dl_attempts"] != "0" || d["x"] != "y" || d["v"] != "9" {
					t.Errorf("dead letter %v", d)
				}
			}},
		{"exhausted by crashes dead-letters without running", Delivery{Key: "ex", ID: "ex", Fields: job("ex", "err", "disk full").Fields, Prior: 3, Suspect: true}, nil, 0,
			func(t *testing.T, f *fakeBackend) {
				d := f.dead[0].fields
				if d["dl_reason"] != ReasonMaxDeliveries || d["dl_attempts"] != "3" || len(f.charges) != 0 {
					t.Errorf("dead letter %v, charges %v; want 3 attempts and no charge", d, f.charges)
				}
			}},
		{"a takeover is charged right before it runs", Delivery{Key: "to", ID: "to", Fields: job("to").Fields, Prior: 1, Suspect: true}, nil, 2,
			func(t *testing.T, f *fakeBackend) {
				if len(f.charges) != 1 || f.charges[0] != "to+" || len(f.finished) != 1 {
					t.Errorf("charges %v finished %v", f.charges, f.finished)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(tt.d)
			var attempts []int
			var mu sync.Mutex
			start(t, f, Config{}, func(_ context.Context, r *Run) error {
				mu.Lock()
				attempts = append(attempts, r.Attempt)
				mu.Unlock()
				return tt.err
			})
			f.settled(t, 1)
			mu.Lock()
			ran := append([]int(nil), attempts...)
			mu.Unlock()
			switch {
			case tt.wantAttempt == 0 && len(ran) != 0:
				t.Errorf("the handler ran (attempts %v), want it not to", ran)
			case tt.wantAttempt != 0 && (len(ran) != 1 || ran[0] != tt.wantAttempt):
				t.Errorf("handler attempts %v, want [%d]", ran, tt.wantAttempt)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			tt.check(t, f)
		})
	}
}

// TestEngine_NotHeld checks that a job whose charge finds it held by
// another worker does not run and is not settled.
func TestEngine_NotHeld(t *testing.T) {
	t.Parallel()
	f := newFake(Delivery{Key: "gone", ID: "gone", Fields: job("gone").Fields, Prior: 1}, job("next"))
	f.notHeld["gone"] = true
	var ran atomic.Int64
	start(t, f, Config{Concurrency: 1}, func(context.Context, *Run) error { ran.Add(1); return nil })
	f.settled(t, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if ran.Load() != 1 || len(f.finished) != 1 || f.finished[0] != "next" || len(f.moves)+len(f.dead) != 0 {
		t.Errorf("ran %d, finished %v, moves %v, dead %v; want only next", ran.Load(), f.finished, f.moves, f.dead)
	}
}

// TestEngine_LastAttemptRunsAlone gives a job whose latest runs crashed its
// last attempt (a fresh read of a copy handed back after crashes, and a
// takeover): its read's charge is taken back while it waits, it starts only
// once nothing else runs or is unsettled, is charged then, and nothing
// starts beside it.
func TestEngine_LastAttemptRunsAlone(t *testing.T) {
	t.Parallel()
	handedBack := job("copy", "attempt", "2", "crashed", "1")
	takenOver := Delivery{Key: "took", ID: "took", Fields: job("took", "attempt", "1").Fields, Prior: 1, Suspect: true}
	f := newFake(job("n1"), handedBack, job("n2"), takenOver, job("n3"))
	var running, maxAlone atomic.Int64
	var order []string
	var mu sync.Mutex
	start(t, f, Config{Concurrency: 4}, func(_ context.Context, r *Run) error {
		n := running.Add(1)
		defer running.Add(-1)
		mu.Lock()
		order = append(order, r.ID+"@"+strconv.Itoa(r.Attempt))
		mu.Unlock()
		if r.ID == "copy" || r.ID == "took" {
			maxAlone.Store(max(maxAlone.Load(), n))
		}
		time.Sleep(2 * time.Millisecond) // long enough for a neighbour to overlap if one could
		if r.ID == "copy" || r.ID == "took" {
			maxAlone.Store(max(maxAlone.Load(), running.Load()))
		}
		return nil
	})
	f.settled(t, 5)
	mu.Lock()
	defer mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if maxAlone.Load() != 1 {
		t.Errorf("%d jobs ran while a last attempt ran, want it alone", maxAlone.Load())
	}
	want := map[string]bool{"copy@3": true, "took@3": true, "n1@1": true, "n2@1": true, "n3@1": true}
	for _, o := range order {
		delete(want, o)
	}
	if len(want) != 0 {
		t.Errorf("runs %v, missing %v", order, want)
	}
	// The handed-back copy's read charge is taken back, and both are charged
	// at their start.
	wantCharges := map[string]bool{"copy-": true, "copy+": true, "took+": true}
	for _, c := range f.charges {
		delete(wantCharges, c)
	}
	if len(wantCharges) != 0 || len(f.charges) != 3 {
		t.Errorf("charges %v, want copy-, copy+, took+", f.charges)
	}
}

// TestEngine_Shutdown checks the drain: a handler that outlives
// ShutdownTimeout is cancelled with the shutdown cause and its job handed
// back uncharged; a job waiting to run alone is handed back uncharged with
// its crashed mark.
func TestEngine_Shutdown(t *testing.T) {
	t.Parallel()
	waiting := Delivery{Key: "w", ID: "w", Fields: job("w", "attempt", "1").Fields, Prior: 1, Suspect: true}
	f := newFake(job("slow"), waiting)
	started := make(chan struct{})
	var cause atomic.Value
	r := start(t, f, Config{Concurrency: 2, ShutdownTimeout: 20 * time.Millisecond}, func(ctx context.Context, _ *Run) error {
		close(started)
		<-ctx.Done()
		cause.Store(context.Cause(ctx))
		return ctx.Err()
	})
	<-started
	deadline := time.Now().Add(wait)
	for r.eng.Monitor().Health().Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the job did not wait to run alone")
		}
		time.Sleep(time.Millisecond)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if c, _ := cause.Load().(error); !errors.Is(c, errShutdown) {
		t.Errorf("cause %v, want the shutdown cause", c)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	got := map[string]move{}
	for _, m := range f.moves {
		got[m.key] = m
	}
	if m := got["slow"]; m.fields["attempt"] != nil || m.fields["crashed"] != nil || m.delay != 0 {
		t.Errorf("slow handed back as %+v, want uncharged, at once, no crashed mark", m)
	}
	if m := got["w"]; m.fields["attempt"] != "2" || m.fields["crashed"] != "1" || m.delay != 0 {
		t.Errorf("waiting job handed back as %+v, want attempt 2 (its crashed run counted, the waiting one not), crashed mark", m)
	}
	if h := r.eng.Monitor().Health(); h.Running || h.Fetching || h.Waiting != 0 {
		t.Errorf("health after Run: %+v", h)
	}
}

// TestEngine_ClaimLost checks that a running job whose claim is lost is
// cancelled with the lost cause and left to its new holder.
func TestEngine_ClaimLost(t *testing.T) {
	t.Parallel()
	f := newFake(job("j"))
	var events atomic.Int64
	got := make(chan error, 1)
	start(t, f, Config{OnEvent: func(_ context.Context, e Event) {
		if e.Kind == EventClaimLost {
			events.Add(1)
		}
	}}, func(ctx context.Context, _ *Run) error {
		// The claim is lost once the job runs: lost before it starts, it
		// would not run at all.
		f.mu.Lock()
		f.lost["j"] = true
		f.mu.Unlock()
		<-ctx.Done()
		got <- context.Cause(ctx)
		return ctx.Err()
	})
	select {
	case c := <-got:
		if !errors.Is(c, errLost) {
			t.Errorf("cause %v, want the lost cause", c)
		}
	case <-time.After(wait):
		t.Fatal("the job was not cancelled")
	}
	deadline := time.Now().Add(wait)
	for events.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no claim-lost event")
		}
		time.Sleep(time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.finished)+len(f.moves)+len(f.dead) != 0 {
		t.Errorf("a lost job was settled: %v %v %v", f.finished, f.moves, f.dead)
	}
}

// TestEngine_JobTimeout checks the deadline, the cause and that a timed-out
// attempt is charged.
func TestEngine_JobTimeout(t *testing.T) {
	t.Parallel()
	f := newFake(job("t"))
	type seen struct {
		err, cause error
		hasDL      bool
	}
	got := make(chan seen, 1)
	start(t, f, Config{JobTimeout: 20 * time.Millisecond}, func(ctx context.Context, _ *Run) error {
		_, ok := ctx.Deadline()
		<-ctx.Done()
		got <- seen{ctx.Err(), context.Cause(ctx), ok}
		return ctx.Err()
	})
	s := <-got
	if !s.hasDL || !errors.Is(s.err, context.DeadlineExceeded) || !errors.Is(s.cause, errTimeout) {
		t.Errorf("deadline %v, err %v, cause %v", s.hasDL, s.err, s.cause)
	}
	f.settled(t, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.moves[0]; m.fields["attempt"] != "1" {
		t.Errorf("move %+v, want the timed-out attempt charged", m)
	}
}

// TestEngine_FatalFetch checks that Run returns an error Redis cannot
// recover from.
func TestEngine_FatalFetch(t *testing.T) {
	t.Parallel()
	f := newFake()
	f.fetchErr = fatalErr("NOPERM this user has no permissions to run the 'xreadgroup' command")
	r := start(t, f, Config{}, func(context.Context, *Run) error { return nil })
	select {
	case err := <-r.done:
		close(r.done)
		if !errors.Is(err, f.fetchErr) {
			t.Errorf("Run = %v, want the NOPERM error", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not stop on a fatal error")
	}
}

type fatalErr string

func (e fatalErr) Error() string { return string(e) }
func (fatalErr) RedisError()     {}

// TestEngine_LoopDoneSignal: a backend's loop signals the end of each tick
// once the tick's work is done (here three calls, the first two of which
// report more work).
func TestEngine_LoopDoneSignal(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	f := newFake()
	f.loops = []Loop{{Name: "tidy", Every: time.Millisecond, Do: func(context.Context) (bool, error) {
		return calls.Add(1)%3 != 0, nil
	}}}
	sig := &testsignal.Signals{LoopDone: testsignal.New[string]()}
	startWith(t, testsignal.With(context.Background(), sig), f, Config{}, func(context.Context, *Run) error { return nil })
	if name := sig.LoopDone.Wait(t, wait, "the first tick"); name != "tidy" {
		t.Errorf("LoopDone fired with %q, want the loop's name", name)
	}
	if n := calls.Load(); n < 3 {
		t.Errorf("LoopDone fired after %d calls, want the tick's 3", n)
	}
	sig.LoopDone.Wait(t, wait, "the second tick")
	if n := calls.Load(); n < 6 {
		t.Errorf("second LoopDone after %d calls, want 6", n)
	}
}

// TestEngine_SettleWaitsOutTransientErrors: a settlement that Redis
// refuses for a while (TRYAGAIN while the slot migrates, CLUSTERDOWN,
// LOADING) is tried again, the job held, and lands; one that fails with an
// error that does not clear by itself is left to the reaper at once.
func TestEngine_SettleWaitsOutTransientErrors(t *testing.T) {
	t.Parallel()
	tryAgain := redisErr("TRYAGAIN Multiple keys request during rehashing of slot")
	down := redisErr("CLUSTERDOWN The cluster is down")
	tests := []struct {
		name      string
		err       error // the handler's
		failures  []error
		wantTries int
		abandoned bool
	}{
		{"ack", nil, []error{tryAgain, tryAgain, down, tryAgain}, 5, false},
		{"retry", errors.New("boom"), []error{tryAgain, down, tryAgain}, 4, false},
		{"dead letter", errPermanent, []error{tryAgain, tryAgain}, 3, false},
		{"retry refused for good", errors.New("boom"), []error{redisErr("ERR Error running script")}, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(job("j"))
			f.failures = tt.failures
			start(t, f, Config{}, func(context.Context, *Run) error { return tt.err })
			if tt.abandoned {
				waitUntil(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.abandon) == 1 })
			} else {
				f.settled(t, 1)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.tries != tt.wantTries || (len(f.abandon) == 1) != tt.abandoned {
				t.Fatalf("%d settlement calls, abandoned %q; want %d calls, abandoned %v", f.tries, f.abandon, tt.wantTries, tt.abandoned)
			}
		})
	}
}

// redisErr is an error reply of Redis, as go-redis returns it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// waitUntil polls cond every millisecond until it holds, failing the
// test after wait.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(time.Millisecond) // poll, bounded by deadline
	}
}
