package streamqtest_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/streamqtest"
)

var errBoom = errors.New("boom")

// quiet keeps the engine's logs (a dead letter is a warning) out of the
// test output.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// linear is a deterministic backoff: attempt n waits n seconds.
func linear(n int) time.Duration { return time.Duration(n) * time.Second }

func TestWorker_Work(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handle  func(ctx context.Context, msg *streamq.Message) error
		attempt int
		want    streamqtest.Outcome
		retryIn time.Duration
		reason  string
		errIs   error // the Result's Err must wrap it
	}{
		{name: "nil acks", handle: func(context.Context, *streamq.Message) error { return nil }, want: streamqtest.Acked},
		{name: "error retries with the backoff", handle: fail(errBoom), attempt: 2,
			want: streamqtest.Retried, retryIn: 2 * time.Second, errIs: errBoom},
		{name: "error at the last attempt dead-letters", handle: fail(errBoom), attempt: 3,
			want: streamqtest.DeadLettered, reason: streamq.ReasonMaxDeliveries, errIs: errBoom},
		{name: "permanent dead-letters at once", handle: fail(streamq.Permanent(errBoom)),
			want: streamqtest.DeadLettered, reason: streamq.ReasonPermanent, errIs: errBoom},
		{name: "retry after its own delay", handle: fail(streamq.RetryAfter(42*time.Second, errBoom)),
			want: streamqtest.Retried, retryIn: 42 * time.Second, errIs: errBoom},
		{name: "retry after at the last attempt dead-letters", handle: fail(streamq.RetryAfter(time.Second, errBoom)), attempt: 3,
			want: streamqtest.DeadLettered, reason: streamq.ReasonMaxDeliveries, errIs: errBoom},
		{name: "postpone is not charged, even at the last attempt", handle: fail(streamq.Postpone(7*time.Second, errBoom)), attempt: 3,
			want: streamqtest.Postponed, retryIn: 7 * time.Second, errIs: errBoom},
		{name: "panic retries", handle: func(context.Context, *streamq.Message) error { panic(errBoom) },
			want: streamqtest.Retried, retryIn: time.Second, errIs: errBoom},
		{name: "attempts used up: dead-lettered without running", handle: func(context.Context, *streamq.Message) error {
			panic("must not run")
		}, attempt: 4, want: streamqtest.DeadLettered, reason: streamq.ReasonMaxDeliveries},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := streamqtest.NewWorker(t, streamq.HandlerFunc(tc.handle), &streamq.ConsumerConfig{
				MaxDeliveries: 3, Backoff: linear, Logger: quiet,
			})
			res, err := w.Work(t.Context(), &streamqtest.Job{Payload: []byte("p"), Attempt: tc.attempt})
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tc.want || res.RetryIn != tc.retryIn || res.Reason != tc.reason {
				t.Errorf("result = %+v, want outcome %v, retry in %v, reason %q", res, tc.want, tc.retryIn, tc.reason)
			}
			if tc.errIs != nil && !errors.Is(res.Err, tc.errIs) {
				t.Errorf("Err = %v, want one wrapping %v", res.Err, tc.errIs)
			}
			if tc.want == streamqtest.Acked && res.Err != nil {
				t.Errorf("Err = %v for an acked job", res.Err)
			}
		})
	}
}

func fail(err error) func(context.Context, *streamq.Message) error {
	return func(context.Context, *streamq.Message) error { return err }
}

func TestWorker_Work_Panic(t *testing.T) {
	t.Parallel()
	w := streamqtest.NewWorker(t, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		panic("nil map")
	}), &streamq.ConsumerConfig{MaxDeliveries: 1, Logger: quiet})
	res, err := w.Work(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pe, ok := errors.AsType[*streamq.PanicError](res.Err)
	if res.Outcome != streamqtest.DeadLettered || res.Reason != streamq.ReasonMaxDeliveries || !ok {
		t.Fatalf("result = %+v, want dead-lettered for max deliveries with a *PanicError", res)
	}
	if pe.Value != "nil map" || !strings.Contains(string(pe.Stack), "worker_test.go") {
		t.Errorf("PanicError = %v with stack\n%s", pe.Value, pe.Stack)
	}
}

// TestWorker_Work_Message checks what the handler sees, through the
// consumer's middleware (outermost first), and that the consumer's OnEvent
// still hears the events.
func TestWorker_Work_Message(t *testing.T) {
	t.Parallel()
	enq := time.UnixMilli(1_700_000_000_000)
	ff := enq.Add(time.Minute)
	var got streamq.Message
	var order []string
	mw := func(name string) streamq.Middleware {
		return func(next streamq.Handler) streamq.Handler {
			return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
				order = append(order, name)
				return next.Handle(ctx, msg)
			})
		}
	}
	var events atomic.Int32
	w := streamqtest.NewWorker(t, streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		got = *msg
		return errBoom
	}), &streamq.ConsumerConfig{
		Middleware: []streamq.Middleware{mw("a"), mw("b")},
		Backoff:    linear,
		Logger:     quiet,
		OnEvent: func(_ context.Context, e streamq.Event) {
			if e.Kind == streamq.EventRetried && e.Message.Payload != nil {
				events.Add(1)
			}
		},
	})
	res, err := w.Work(t.Context(), &streamqtest.Job{
		Payload: []byte("hello"), Headers: map[string]string{"k": "v"}, Attempt: 5, Key: "invoice:1",
		EnqueuedAt: enq, FirstFailedAt: ff, LastError: "earlier", ID: "17-3", Queue: "emails",
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != streamqtest.Retried || res.RetryIn != 5*time.Second {
		t.Errorf("result = %+v, want retried in 5s", res)
	}
	if string(got.Payload) != "hello" || got.Headers["k"] != "v" || got.Attempt != 5 || got.Key != "invoice:1" ||
		!got.EnqueuedAt.Equal(enq) || !got.FirstFailedAt.Equal(ff) || got.LastError != "earlier" ||
		got.ID != "17-3" || got.Queue != "emails" || got.Group != streamq.DefaultGroup {
		t.Errorf("handler saw %+v", got)
	}
	if strings.Join(order, "") != "ab" {
		t.Errorf("middleware ran in order %v, want a then b", order)
	}
	if events.Load() != 1 {
		t.Errorf("OnEvent heard %d retries, want 1", events.Load())
	}
}

func TestWorker_Work_DefaultBackoff(t *testing.T) {
	t.Parallel()
	w := streamqtest.NewWorker(t, streamq.HandlerFunc(fail(errBoom)), &streamq.ConsumerConfig{Logger: quiet})
	for attempt := 1; attempt <= 4; attempt++ {
		res, err := w.Work(t.Context(), &streamqtest.Job{Attempt: attempt})
		if err != nil {
			t.Fatal(err)
		}
		ceil := streamq.DefaultBackoffBase << (attempt - 1)
		if res.Outcome != streamqtest.Retried || res.RetryIn < 0 || res.RetryIn > ceil {
			t.Errorf("attempt %d: %+v, want retried within [0, %v] (full jitter)", attempt, res, ceil)
		}
	}
}

func TestWorker_Work_JobTimeout(t *testing.T) {
	t.Parallel()
	w := streamqtest.NewWorker(t, streamq.HandlerFunc(func(ctx context.Context, _ *streamq.Message) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}), &streamq.ConsumerConfig{JobTimeout: 20 * time.Millisecond, Backoff: linear, Logger: quiet})
	res, err := w.Work(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != streamqtest.Retried || !errors.Is(res.Err, streamq.ErrJobTimeout) {
		t.Errorf("result = %+v, want retried with ErrJobTimeout", res)
	}
}

func TestWorker_Work_Malformed(t *testing.T) {
	t.Parallel()
	w := streamqtest.NewWorker(t, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		panic("must not run")
	}), &streamq.ConsumerConfig{Logger: quiet})
	res, err := w.Work(t.Context(), &streamqtest.Job{Fields: map[string]string{"v": "1"}}) // no payload
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != streamqtest.DeadLettered || res.Reason != streamq.ReasonMalformed || !errors.Is(res.Err, streamq.ErrMalformed) {
		t.Errorf("result = %+v, want dead-lettered as malformed", res)
	}
	// Raw fields as another language's producer writes them.
	w = streamqtest.NewWorker(t, streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		if string(msg.Payload) != "raw" || msg.Headers["a"] != "b" {
			return streamq.Permanent(errors.New("wrong message"))
		}
		return nil
	}), nil)
	res, err = w.Work(t.Context(), &streamqtest.Job{Fields: map[string]string{"v": "1", "payload": "raw", "headers": `{"a":"b"}`}})
	if err != nil || res.Outcome != streamqtest.Acked {
		t.Errorf("raw fields: %+v, %v; want acked", res, err)
	}
	// Raw fields of a job retried once: its attempt is the field plus one.
	w = streamqtest.NewWorker(t, streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		if msg.Attempt != 2 {
			return streamq.Permanent(errors.New("wrong attempt"))
		}
		return errBoom
	}), &streamq.ConsumerConfig{Backoff: linear, Logger: quiet})
	res, err = w.Work(t.Context(), &streamqtest.Job{Fields: map[string]string{"v": "1", "payload": "p", "attempt": "1"}})
	if err != nil || res.Outcome != streamqtest.Retried || res.RetryIn != 2*time.Second {
		t.Errorf("raw fields at attempt 2: %+v, %v; want retried in 2s", res, err)
	}
}

// TestWorker_Work_ContextEnds: a handler still running when Work's ctx ends
// gets ShutdownTimeout, then is cancelled with ErrShutdown; the job is
// handed back, not settled, and Work says so.
func TestWorker_Work_ContextEnds(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	w := streamqtest.NewWorker(t, streamq.HandlerFunc(func(ctx context.Context, _ *streamq.Message) error {
		close(started)
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), streamq.ErrShutdown) {
			return streamq.Permanent(context.Cause(ctx))
		}
		return ctx.Err()
	}), &streamq.ConsumerConfig{ShutdownTimeout: 10 * time.Millisecond, Logger: quiet})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	res, err := w.Work(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "not settled") || res != nil {
		t.Errorf("Work = %+v, %v; want an error saying the job was not settled", res, err)
	}

	// A ctx that ended before Work: the handler never runs.
	w = streamqtest.NewWorker(t, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		panic("must not run")
	}), nil)
	res, err = w.Work(ctx, nil)
	if err == nil || !errors.Is(err, context.Canceled) || res != nil {
		t.Errorf("Work with an ended ctx = %+v, %v; want context.Canceled", res, err)
	}
}

func TestWorker_Work_InvalidJob(t *testing.T) {
	t.Parallel()
	w := streamqtest.NewWorker(t, streamq.HandlerFunc(fail(nil)), nil)
	if _, err := w.Work(t.Context(), &streamqtest.Job{Attempt: -1}); err == nil || !strings.Contains(err.Error(), "Attempt") {
		t.Errorf("negative attempt: %v", err)
	}
	if _, err := w.Work(t.Context(), &streamqtest.Job{Queue: "bad{name}"}); err == nil || !strings.Contains(err.Error(), "queue name") {
		t.Errorf("invalid queue name: %v", err)
	}
}

func TestNewWorker_InvalidConfig(t *testing.T) {
	t.Parallel()
	f := runFake(t, func(tb testing.TB) {
		streamqtest.NewWorker(tb, streamq.HandlerFunc(fail(nil)), &streamq.ConsumerConfig{Concurrency: -1})
	})
	if msg := f.message(); !strings.Contains(msg, "ConsumerConfig.Concurrency") {
		t.Errorf("fatal message = %q, want the config error", msg)
	}
}

func TestOutcome_String(t *testing.T) {
	t.Parallel()
	for o, want := range map[streamqtest.Outcome]string{
		streamqtest.Acked: "acked", streamqtest.Retried: "retried", streamqtest.Postponed: "postponed",
		streamqtest.DeadLettered: "dead_lettered", 0: "Outcome(0)",
	} {
		if got := o.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(o), got, want)
		}
	}
}

func TestWorker_Work_Concurrent(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	w := streamqtest.NewWorker(t, streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		ran.Add(1)
		if string(msg.Payload) == "odd" {
			return errBoom
		}
		return nil
	}), &streamq.ConsumerConfig{Backoff: linear, Logger: quiet})
	const n = 20
	errs := make(chan error, n)
	for i := range n {
		go func() {
			payload, want := "even", streamqtest.Acked
			if i%2 == 1 {
				payload, want = "odd", streamqtest.Retried
			}
			res, err := w.Work(t.Context(), &streamqtest.Job{Payload: []byte(payload)})
			switch {
			case err != nil:
				errs <- err
			case res.Outcome != want:
				errs <- errors.New(payload + ": " + res.Outcome.String())
			default:
				errs <- nil
			}
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if ran.Load() != n {
		t.Errorf("handler ran %d times, want %d", ran.Load(), n)
	}
}

// BenchmarkWorker_Work measures one verdict: a consumer built, its engine
// started on one in-memory job and stopped.
func BenchmarkWorker_Work(b *testing.B) {
	w := streamqtest.NewWorker(b, streamq.HandlerFunc(fail(errBoom)), &streamq.ConsumerConfig{Backoff: linear, Logger: quiet})
	job := &streamqtest.Job{Payload: []byte("p")}
	for b.Loop() {
		if res, err := w.Work(b.Context(), job); err != nil || res.Outcome != streamqtest.Retried {
			b.Fatal(res, err)
		}
	}
}
