package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/middleware"
)

func newLimiter(t testing.TB, q *streamq.Queue, cfg middleware.RateLimitConfig) *middleware.RateLimiter {
	t.Helper()
	l, err := middleware.NewRateLimiter(q, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestRateLimit_SharedByWorkers(t *testing.T) {
	t.Parallel()
	const (
		rate      = 100
		burst     = 10
		window    = 2 * time.Second
		consumers = 4
		jobs      = 300 // more than may start in the window
		tolerance = 5   // scheduling and rounding slack (5 tokens = 50ms)
	)
	q := setup(t)
	p := newProducer(t, q)
	batch := make([]streamq.Job, jobs)
	for i := range batch {
		batch[i].Payload = []byte("x")
	}
	if _, err := p.EnqueueBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}

	var (
		mu     sync.Mutex
		starts []time.Time
	)
	h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		now := time.Now()
		mu.Lock()
		starts = append(starts, now)
		mu.Unlock()
		return nil
	})
	// The window opens when the first job asks for a token, which is no
	// later than the first token is taken (Redis runs on this machine, so
	// its TIME and time.Now read the same clock).
	first := make(chan time.Time, 1)
	var once sync.Once
	entered := func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
			once.Do(func() { first <- time.Now() })
			return next.Handle(ctx, msg)
		})
	}
	for range consumers {
		// One limiter per consumer, as in separate processes: they share the
		// bucket through Redis only.
		l := newLimiter(t, q, middleware.RateLimitConfig{Rate: rate, Burst: burst})
		cfg := consumerConfig(entered, l.Middleware())
		cfg.Concurrency = 4
		runConsumer(t, q, h, cfg)
	}

	var t0 time.Time
	select {
	case t0 = <-first:
	case <-time.After(waitTimeout):
		t.Fatal("no job started")
	}
	end := t0.Add(window)
	<-time.After(time.Until(end)) // the measurement window, not a synchronisation
	mu.Lock()
	var n int
	for _, s := range starts {
		if !s.After(end) {
			n++
		}
	}
	mu.Unlock()
	maxStarts := burst + int(rate*window.Seconds()) + tolerance
	t.Logf("%d jobs started in %s (limit %d/s, burst %d)", n, window, rate, burst)
	if n > maxStarts {
		t.Errorf("%d jobs started in %s, want at most %d", n, window, maxStarts)
	}
	// The limit delays jobs but must not stop them: every job starts in the
	// end. This bounds no throughput (a slow machine only takes longer), so
	// it cannot flake, yet fails if the limiter blocks or loses tokens.
	redistest.WaitFor(t, waitTimeout, "every job started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) >= jobs
	})
}

func TestRateLimiter_Wait(t *testing.T) {
	t.Parallel()
	q := setup(t)
	ctx := context.Background()

	t.Run("takes a token, then refuses beyond MaxWait", func(t *testing.T) {
		t.Parallel()
		l := newLimiter(t, q, middleware.RateLimitConfig{Rate: 1, Key: core.Of(q).Keys.Part("rl-maxwait"), MaxWait: 100 * time.Millisecond})
		if err := l.Wait(ctx); err != nil {
			t.Fatalf("first Wait: %v", err)
		}
		err := l.Wait(ctx)
		var pe *streamq.PostponeError
		if !errors.As(err, &pe) || !errors.Is(err, middleware.ErrRateLimited) {
			t.Fatalf("second Wait: %v, want a PostponeError wrapping ErrRateLimited", err)
		}
		if pe.Delay <= 100*time.Millisecond || pe.Delay > 1500*time.Millisecond {
			t.Errorf("postpone delay %s, want the time until the next token (100ms, 1s] plus up to half of it", pe.Delay)
		}
	})
	t.Run("never waits past the deadline", func(t *testing.T) {
		t.Parallel()
		l := newLimiter(t, q, middleware.RateLimitConfig{Rate: 1, Key: core.Of(q).Keys.Part("rl-deadline"), MaxWait: time.Minute})
		if err := l.Wait(ctx); err != nil {
			t.Fatalf("first Wait: %v", err)
		}
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := l.Wait(dctx); !errors.Is(err, middleware.ErrRateLimited) {
			t.Fatalf("Wait with a 50ms deadline: %v, want ErrRateLimited", err)
		}
	})
	t.Run("waits for a reserved token", func(t *testing.T) {
		t.Parallel()
		const interval = 200 * time.Millisecond // 1/rate
		l := newLimiter(t, q, middleware.RateLimitConfig{Rate: 5, Key: core.Of(q).Keys.Part("rl-reserve")})
		first := time.Now()
		if err := l.Wait(ctx); err != nil {
			t.Fatalf("first Wait: %v", err)
		}
		second := time.Now()
		if err := l.Wait(ctx); err != nil {
			t.Fatalf("second Wait: %v", err)
		}
		// The first token was taken after first, so the second is due no
		// earlier than first+interval (Redis shares this machine's clock).
		if got, want := time.Since(second), interval-second.Sub(first); got < want {
			t.Errorf("second Wait returned after %s, want at least %s", got, want)
		}
	})
	t.Run("returns the context's cause", func(t *testing.T) {
		t.Parallel()
		l := newLimiter(t, q, middleware.RateLimitConfig{Rate: 1, Key: core.Of(q).Keys.Part("rl-cancel")})
		if err := l.Wait(ctx); err != nil {
			t.Fatalf("first Wait: %v", err)
		}
		cctx, cancel := context.WithCancelCause(ctx)
		// Cancel while the second Wait is in the script call or waiting for
		// its token; either way it must return the cause.
		timer := time.AfterFunc(20*time.Millisecond, func() { cancel(streamq.ErrShutdown) })
		defer timer.Stop()
		if err := l.Wait(cctx); !errors.Is(err, streamq.ErrShutdown) {
			t.Fatalf("Wait: %v, want the cause ErrShutdown", err)
		}
	})
}

func TestRateLimit_PostponesInsteadOfFailing(t *testing.T) {
	t.Parallel()
	q := setup(t)
	p := newProducer(t, q)
	const jobs = 3
	for range jobs {
		enqueue(t, context.Background(), p, "x")
	}
	var runs atomic.Int64
	h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		runs.Add(1)
		return nil
	})
	l := newLimiter(t, q, middleware.RateLimitConfig{Rate: 2, MaxWait: time.Millisecond})
	c := runConsumer(t, q, h, consumerConfig(l.Middleware()))
	redistest.WaitFor(t, waitTimeout, "all jobs processed", func() bool { return c.Stats().Processed == jobs })
	st := c.Stats()
	if st.Postponed == 0 || st.Failed != 0 || st.Retried != 0 || st.DeadLettered != 0 || runs.Load() != jobs {
		t.Errorf("stats %+v, handler runs %d: want rate-limited jobs postponed (not failed, not retried) and each run once", st, runs.Load())
	}
}

// hogLimit keeps the bucket of l's key empty until the test ends or the
// returned stop is called: n goroutines, like busy workers of other
// processes, take every token as soon as it is due (each reserves the next
// one and waits for it), so a job with a short MaxWait finds no token. It
// returns once the hogs have taken n tokens: before that, on a busy
// machine, a job could find one they had not reached yet. stop waits for
// them to return.
func hogLimit(t *testing.T, q *streamq.Queue, cfg middleware.RateLimitConfig, n int) (stop func()) {
	t.Helper()
	cfg.MaxWait = time.Minute
	hog := newLimiter(t, q, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var taken atomic.Int64
	for range n {
		wg.Go(func() {
			for {
				if err := hog.Wait(ctx); err != nil {
					if ctx.Err() == nil {
						t.Errorf("a hog of the rate limit stopped: %v", err)
					}
					return
				}
				taken.Add(1)
			}
		})
	}
	stop = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
	})
	t.Cleanup(stop)
	redistest.WaitFor(t, waitTimeout, fmt.Sprintf("the hogs to take %d tokens", n), func() bool { return taken.Load() >= int64(n) })
	return stop
}

// TestRateLimit_NeverDeadLetters runs a job that the rate limit turns away
// more times than MaxDeliveries allows attempts, through the whole Default
// chain: it must be postponed each time, never retried, failed or
// dead-lettered, and the metrics, logs and spans must say so.
func TestRateLimit_NeverDeadLetters(t *testing.T) {
	t.Parallel()
	const (
		maxDeliveries = 2
		wantPostponed = maxDeliveries + 2 // turned away more often than MaxDeliveries
		rate          = 20
		hogs          = 4 // the bucket is reserved hogs/rate = 200ms ahead
	)
	q := setup(t)
	sr, _, tcfg := tracingSetup(t)
	reader, m := metricsSetup(t)
	logs := &syncBuffer{}
	limitCfg := middleware.RateLimitConfig{Rate: rate, MaxWait: time.Millisecond}
	stopHogs := hogLimit(t, q, limitCfg, hogs)

	var runs atomic.Int64
	h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		runs.Add(1)
		return nil
	})
	cfg := consumerConfig(middleware.Default(&middleware.DefaultConfig{
		Logger:      jsonLogger(logs),
		Tracing:     tcfg,
		Metrics:     m,
		RateLimiter: newLimiter(t, q, limitCfg),
	})...)
	cfg.OnEvent = m.OnEvent
	cfg.MaxDeliveries = maxDeliveries
	c := runConsumer(t, q, h, cfg)
	id := enqueue(t, context.Background(), newProducer(t, q), "x")

	redistest.WaitFor(t, waitTimeout, fmt.Sprintf("job postponed %d times, or settled", wantPostponed), func() bool {
		st := c.Stats()
		return st.Postponed >= wantPostponed || st.Processed+st.Failed+st.DeadLettered > 0
	})
	if st := c.Stats(); st.Postponed < wantPostponed {
		t.Fatalf("stats %+v: want the job postponed %d times while the limit has no token, and not failed or run", st, wantPostponed)
	}
	stopHogs()
	redistest.WaitFor(t, waitTimeout, "job processed once the limit has tokens again", func() bool {
		return c.Stats().Processed == 1
	})

	st := c.Stats()
	if st.Failed != 0 || st.Retried != 0 || st.DeadLettered != 0 || runs.Load() != 1 {
		t.Errorf("stats %+v, handler runs %d: want the job postponed %d+ times, then run once, never failed or dead-lettered",
			st, runs.Load(), wantPostponed)
	}
	// Processed counts the handler's return; its acknowledgement is batched
	// and lands a moment later.
	var qs streamq.QueueStats
	redistest.WaitFor(t, waitTimeout, "the job acknowledged", func() bool {
		var err error
		qs, err = q.Stats(context.Background())
		return err == nil && qs.Pending == 0
	})
	if qs.DeadLetters != 0 || qs.Delayed != 0 || qs.Pending != 0 {
		t.Errorf("queue stats %+v, want no dead letters and nothing left", qs)
	}

	// Metrics: postponed, not failed.
	queue := attribute.String("messaging.destination.name", q.Name())
	s := collect(t, reader)
	for name, want := range map[string]int64{
		middleware.MetricPostponed:    st.Postponed,
		middleware.MetricProcessed:    1,
		middleware.MetricFailed:       0,
		middleware.MetricRetried:      0,
		middleware.MetricDeadLettered: 0,
	} {
		if got := s.value(name, queue); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if got := s.count(middleware.MetricDuration, queue); got != 1 {
		t.Errorf("duration count = %d, want 1: postponed attempts have none", got)
	}
	if got := s.count(middleware.MetricLatency, queue); got != 1 {
		t.Errorf("latency count = %d, want 1: the job counts once however often it was postponed", got)
	}

	// Logs: one debug record per postponement, no failure.
	var postponedLogs int64
	for _, r := range records(t, logs) {
		switch r["msg"] {
		case middleware.LogMsgFailed:
			t.Errorf("failure logged for a postponed job: %v", r)
		case middleware.LogMsgPostponed:
			postponedLogs++
			if r["level"] != "DEBUG" || r["reason"] == nil || r["retry_in"] == nil {
				t.Errorf("postponed record = %v, want DEBUG with reason and retry_in", r)
			}
		}
	}
	if postponedLogs != st.Postponed {
		t.Errorf("%d postponed records, want %d", postponedLogs, st.Postponed)
	}

	// Spans: no Error status; an event for each postponement.
	var spans, events int64
	for _, sp := range sr.Ended() {
		if sp.SpanKind() != trace.SpanKindConsumer {
			continue
		}
		spans++
		if sp.Status().Code == codes.Error {
			t.Errorf("span with status %+v for a postponed job", sp.Status())
		}
		for _, ev := range sp.Events() {
			if ev.Name != middleware.SpanEventPostponed {
				t.Errorf("span event %q, want only %s", ev.Name, middleware.SpanEventPostponed)
				continue
			}
			events++
			a := attrMap(ev.Attributes)
			if !strings.Contains(a[middleware.AttrPostponeReason].AsString(), middleware.ErrRateLimited.Error()) ||
				a[middleware.AttrPostponeDelay].AsFloat64() <= 0 {
				t.Errorf("postponed event attributes %v, want the rate limit as reason and a delay", ev.Attributes)
			}
		}
	}
	if spans != st.Postponed+1 || events != st.Postponed {
		t.Errorf("%d consumer spans with %d postponed events, want %d and %d (job %s)", spans, events, st.Postponed+1, st.Postponed, id)
	}
}

func TestNewRateLimiter_Validation(t *testing.T) {
	t.Parallel()
	q, err := streamq.NewQueue(redistest.NewClient(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		q     *streamq.Queue
		cfg   middleware.RateLimitConfig
		field string
	}{
		{"nil queue", nil, middleware.RateLimitConfig{Rate: 1}, "queue"},
		{"zero rate", q, middleware.RateLimitConfig{}, "RateLimitConfig.Rate"},
		{"negative rate", q, middleware.RateLimitConfig{Rate: -1}, "RateLimitConfig.Rate"},
		{"NaN rate", q, middleware.RateLimitConfig{Rate: math.NaN()}, "RateLimitConfig.Rate"},
		{"infinite rate", q, middleware.RateLimitConfig{Rate: math.Inf(1)}, "RateLimitConfig.Rate"},
		{"negative burst", q, middleware.RateLimitConfig{Rate: 1, Burst: -1}, "RateLimitConfig.Burst"},
		{"negative max wait", q, middleware.RateLimitConfig{Rate: 1, MaxWait: -time.Second}, "RateLimitConfig.MaxWait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := middleware.NewRateLimiter(tt.q, tt.cfg)
			var ce *streamq.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("err = %v, want ConfigError for %s", err, tt.field)
			}
		})
	}
	l, err := middleware.NewRateLimiter(q, middleware.RateLimitConfig{Rate: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Key(), core.Of(q).Keys.Part("ratelimit"); got != want {
		t.Errorf("Key() = %q, want %q", got, want)
	}
}

// TestRateLimit_RedisErrorNeverCharges: a Redis error in the limiter (here
// a bucket key of the wrong type; with TIME denied by an ACL it is the same)
// must never count as an attempt of the job: it was dead-lettered without
// ever running. The job is postponed until the limiter works again, then
// runs as its first attempt.
func TestRateLimit_RedisErrorNeverCharges(t *testing.T) {
	t.Parallel()
	q := setup(t)
	ctx := context.Background()
	rdb := core.Of(q).RDB
	key := core.Of(q).Keys.Part("ratelimit")
	if err := rdb.Set(ctx, key, "not a bucket", 0).Err(); err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, q, middleware.RateLimitConfig{Rate: 100, MaxWait: 20 * time.Millisecond})
	err := l.Wait(ctx)
	var pe *streamq.PostponeError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "WRONGTYPE") || pe.Delay <= 0 {
		t.Errorf("Wait on a broken bucket: %v, want a PostponeError wrapping the Redis error", err)
	}

	attempts := make(chan int, 1)
	h := streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
		attempts <- m.Attempt
		return nil
	})
	cfg := consumerConfig(l.Middleware())
	cfg.MaxDeliveries = 1
	c := runConsumer(t, q, h, cfg)
	enqueue(t, ctx, newProducer(t, q), "x")
	redistest.WaitFor(t, waitTimeout, "the job postponed twice", func() bool { return c.Stats().Postponed >= 2 })
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-attempts:
		if a != 1 {
			t.Errorf("the job ran as attempt %d, want 1", a)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("the job did not run once the limiter worked again; stats %+v", c.Stats())
	}
	if st := c.Stats(); st.Failed != 0 || st.DeadLettered != 0 || st.Retried != 0 {
		t.Errorf("stats %+v: a limiter error must not fail, retry or dead-letter the job", st)
	}
}
