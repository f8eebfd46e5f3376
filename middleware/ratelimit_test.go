package middleware_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
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
		jobs      = 600 // more than can start in the window
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
	minStarts := int(0.7 * rate * window.Seconds())
	t.Logf("%d jobs started in %s (limit %d/s, burst %d)", n, window, rate, burst)
	if n > maxStarts {
		t.Errorf("%d jobs started in %s, want at most %d", n, window, maxStarts)
	}
	if n < minStarts {
		t.Errorf("%d jobs started in %s, want at least %d", n, window, minStarts)
	}
}

func TestRateLimiter_Wait(t *testing.T) {
	t.Parallel()
	q := setup(t)
	ctx := context.Background()

	t.Run("takes a token, then refuses beyond MaxWait", func(t *testing.T) {
		t.Parallel()
		l := newLimiter(t, q, middleware.RateLimitConfig{Rate: 1, Key: q.Key("rl-maxwait"), MaxWait: 100 * time.Millisecond})
		if err := l.Wait(ctx); err != nil {
			t.Fatalf("first Wait: %v", err)
		}
		err := l.Wait(ctx)
		var ra *streamq.RetryAfterError
		if !errors.As(err, &ra) || !errors.Is(err, middleware.ErrRateLimited) {
			t.Fatalf("second Wait: %v, want a RetryAfterError wrapping ErrRateLimited", err)
		}
		if ra.Delay <= 100*time.Millisecond || ra.Delay > time.Second {
			t.Errorf("retry delay %s, want the time until the next token (100ms, 1s]", ra.Delay)
		}
	})
	t.Run("never waits past the deadline", func(t *testing.T) {
		t.Parallel()
		l := newLimiter(t, q, middleware.RateLimitConfig{Rate: 1, Key: q.Key("rl-deadline"), MaxWait: time.Minute})
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
		l := newLimiter(t, q, middleware.RateLimitConfig{Rate: 5, Key: q.Key("rl-reserve")})
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
		l := newLimiter(t, q, middleware.RateLimitConfig{Rate: 1, Key: q.Key("rl-cancel")})
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

func TestRateLimit_RetriesInsteadOfFailing(t *testing.T) {
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
	if st.Retried == 0 || st.DeadLettered != 0 || runs.Load() != jobs {
		t.Errorf("stats %+v, handler runs %d: want rate-limited jobs retried (not failed for good) and each run once", st, runs.Load())
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
	if got, want := l.Key(), q.Key("ratelimit"); got != want {
		t.Errorf("Key() = %q, want %q", got, want)
	}
}
