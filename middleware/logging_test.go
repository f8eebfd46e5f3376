package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/middleware"
)

// records parses the JSON lines in buf.
func records(t testing.TB, buf *syncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(buf.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// recordFor returns the record with message msg about job id, or nil.
func recordFor(recs []map[string]any, msg, id string) map[string]any {
	for _, r := range recs {
		if r["msg"] == msg && r["msg_id"] == id {
			return r
		}
	}
	return nil
}

func jsonLogger(buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestLogging_EndToEnd(t *testing.T) {
	t.Parallel()
	q := setup(t)
	buf := &syncBuffer{}
	p := newProducer(t, q)
	failID := enqueue(t, context.Background(), p, "secret-payload-fail")
	okID := enqueue(t, context.Background(), p, "secret-payload-ok")
	h := streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		if strings.HasSuffix(string(msg.Payload), "fail") {
			return streamq.Permanent(errors.New("boom"))
		}
		return nil
	})
	mw := middleware.Logging(jsonLogger(buf), &middleware.LoggingConfig{Successes: true})
	c := runConsumer(t, q, h, consumerConfig(mw))
	redistest.WaitFor(t, waitTimeout, "one job done and one dead-lettered", func() bool {
		st := c.Stats()
		return st.Processed == 1 && st.DeadLettered == 1
	})

	recs := records(t, buf)
	fail := recordFor(recs, middleware.LogMsgFailed, failID)
	if fail == nil {
		t.Fatalf("no failure record for %s in:\n%s", failID, buf)
	}
	for _, k := range []string{"queue", "msg_id", "attempt", "duration", "error", "error_type"} {
		if _, ok := fail[k]; !ok {
			t.Errorf("failure record lacks %q: %v", k, fail)
		}
	}
	if fail["level"] != "ERROR" || fail["queue"] != q.Name() || fail["attempt"] != 1.0 ||
		fail["error"] != "permanent: boom" || fail["error_type"] != "permanent" {
		t.Errorf("failure record = %v", fail)
	}
	done := recordFor(recs, middleware.LogMsgDone, okID)
	if done == nil || done["level"] != "DEBUG" {
		t.Errorf("success record = %v, want one at DEBUG", done)
	}
	if recordFor(recs, middleware.LogMsgFailed, okID) != nil || recordFor(recs, middleware.LogMsgDone, failID) != nil {
		t.Errorf("records for the wrong outcome:\n%s", buf)
	}
	if strings.Contains(buf.String(), "secret-payload") {
		t.Errorf("payload logged without being asked to:\n%s", buf)
	}
}

func TestLogging_Options(t *testing.T) {
	t.Parallel()
	ok := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
	msg := &streamq.Message{ID: "7-0", Queue: "orders", Payload: []byte("abcdefgh"),
		Headers: map[string]string{"tenant": "acme", "secret": "s3cr3t"}, Attempt: 1}

	t.Run("successes off by default", func(t *testing.T) {
		t.Parallel()
		buf := &syncBuffer{}
		if err := streamq.Chain(ok, middleware.Logging(jsonLogger(buf), nil)).Handle(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		if buf.String() != "" {
			t.Errorf("logged a success without LoggingConfig.Successes:\n%s", buf)
		}
	})
	t.Run("payload and headers on request", func(t *testing.T) {
		t.Parallel()
		buf := &syncBuffer{}
		cfg := &middleware.LoggingConfig{Successes: true, PayloadBytes: 4, Headers: []string{"tenant", "missing"}}
		if err := streamq.Chain(ok, middleware.Logging(jsonLogger(buf), cfg)).Handle(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		r := recordFor(records(t, buf), middleware.LogMsgDone, "7-0")
		if r == nil || r["payload"] != "abcd" {
			t.Fatalf("record = %v, want payload abcd", r)
		}
		if h, _ := r["headers"].(map[string]any); len(h) != 1 || h["tenant"] != "acme" {
			t.Errorf("headers = %v, want only tenant", r["headers"])
		}
	})
	t.Run("failure level", func(t *testing.T) {
		t.Parallel()
		buf := &syncBuffer{}
		cfg := &middleware.LoggingConfig{FailureLevel: slog.LevelWarn}
		fail := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return errors.New("x") })
		_ = streamq.Chain(fail, middleware.Logging(jsonLogger(buf), cfg)).Handle(context.Background(), msg)
		if r := recordFor(records(t, buf), middleware.LogMsgFailed, "7-0"); r == nil || r["level"] != "WARN" {
			t.Errorf("record = %v, want one at WARN", r)
		}
	})
	t.Run("postponed", func(t *testing.T) {
		t.Parallel()
		postpone := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
			return streamq.Postpone(2*time.Second, errors.New("busy"))
		})
		buf := &syncBuffer{}
		var pe *streamq.PostponeError
		if err := streamq.Chain(postpone, middleware.Logging(jsonLogger(buf), nil)).Handle(context.Background(), msg); !errors.As(err, &pe) {
			t.Fatalf("err = %v, want the PostponeError unchanged", err)
		}
		recs := records(t, buf)
		if r := recordFor(recs, middleware.LogMsgFailed, "7-0"); r != nil {
			t.Errorf("postponed job logged as a failure: %v", r)
		}
		r := recordFor(recs, middleware.LogMsgPostponed, "7-0")
		if r == nil || r["level"] != "DEBUG" || r["reason"] != "busy" || r["retry_in"] != float64(2*time.Second) {
			t.Errorf("record = %v, want one at DEBUG with reason busy and retry_in 2s", r)
		}
		if _, ok := r["error"]; ok {
			t.Errorf("record = %v, want no error key", r)
		}

		// At the default level (Info) nothing is written.
		buf = &syncBuffer{}
		info := slog.New(slog.NewJSONHandler(buf, nil))
		_ = streamq.Chain(postpone, middleware.Logging(info, nil)).Handle(context.Background(), msg)
		if buf.String() != "" {
			t.Errorf("postponed job logged above Debug:\n%s", buf)
		}
	})
	t.Run("panic", func(t *testing.T) {
		t.Parallel()
		buf := &syncBuffer{}
		h := streamq.Chain(panicky("kaput"), middleware.Recover(), middleware.Logging(jsonLogger(buf), nil))
		var pe *streamq.PanicError
		if err := h.Handle(context.Background(), msg); !errors.As(err, &pe) {
			t.Fatalf("err = %v, want the panic to continue to Recover", err)
		}
		r := recordFor(records(t, buf), middleware.LogMsgFailed, "7-0")
		if r == nil || r["error_type"] != "panic" || !strings.Contains(r["stack"].(string), "panicky") {
			t.Errorf("record = %v, want error_type panic with the stack", r)
		}
	})
	t.Run("trace ids", func(t *testing.T) {
		t.Parallel()
		buf := &syncBuffer{}
		_, _, tcfg := tracingSetup(t)
		h := streamq.Chain(ok, middleware.Tracing(tcfg), middleware.Logging(jsonLogger(buf), &middleware.LoggingConfig{Successes: true}))
		if err := h.Handle(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		r := recordFor(records(t, buf), middleware.LogMsgDone, "7-0")
		if id, _ := r["trace_id"].(string); len(id) != 32 {
			t.Errorf("record = %v, want a trace_id", r)
		}
	})
}
