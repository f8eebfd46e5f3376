package inspect_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// flowRead reads for consumer "c" under flow control, as a consumer does.
func (e *env) flowRead(t *testing.T) []rdb.FlowEntry {
	t.Helper()
	got, err := core.Of(e.q).DB.FlowRead(context.Background(), rdb.FlowReadParams{Consumer: "c", N: 10})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func reasonsOf(w *inspect.Why) []string {
	var out []string
	for _, r := range w.Reasons {
		out = append(out, r.Reason)
	}
	return out
}

func TestQueue_Explain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// make creates the situation and returns the job to explain.
		make  func(t *testing.T, e *env) string
		want  []string
		check func(t *testing.T, w *inspect.Why)
	}{
		{"no consumer", func(t *testing.T, e *env) string { return e.enqueue(t, "a") },
			[]string{inspect.WaitBehind, inspect.WaitNoConsumer}, func(t *testing.T, w *inspect.Why) {
				if w.Reasons[0].Ahead != 0 {
					t.Errorf("ahead %d, want 0", w.Reasons[0].Ahead)
				}
			}},
		{"behind", func(t *testing.T, e *env) string {
			e.enqueue(t, "a")
			e.take(t, "c") // a live consumer, running a
			e.enqueue(t, "b")
			e.enqueue(t, "c")
			return e.enqueue(t, "d")
		}, []string{inspect.WaitBehind}, func(t *testing.T, w *inspect.Why) {
			if r := w.Reasons[0]; r.Ahead != 2 || !strings.Contains(r.Detail, "behind 2 jobs") {
				t.Errorf("reason %+v, want behind 2", r)
			}
		}},
		{"paused", func(t *testing.T, e *env) string {
			e.enqueue(t, "a")
			e.take(t, "c")
			id := e.enqueue(t, "b")
			if err := e.iq.Pause(ctx); err != nil {
				t.Fatal(err)
			}
			return id
		}, []string{inspect.WaitPaused, inspect.WaitBehind}, nil},
		{"delayed", func(t *testing.T, e *env) string {
			e.enqueue(t, "a")
			e.take(t, "c")
			return e.enqueue(t, "b", streamq.ProcessIn(time.Hour))
		}, []string{inspect.WaitDelayed}, func(t *testing.T, w *inspect.Why) {
			if u := w.Reasons[0].Until; u.Before(time.Now().Add(59 * time.Minute)) {
				t.Errorf("until %v, want in an hour", u)
			}
		}},
		{"retry backoff", func(t *testing.T, e *env) string {
			e.enqueue(t, "a")
			id := e.take(t, "c")
			f := (&wire.Job{Payload: []byte("a"), Attempt: 1, LastError: "boom", JobID: id}).Args()
			if ok, err := core.Of(e.q).DB.Move(ctx, rdb.MoveParams{Consumer: "c", ID: id, Delay: time.Hour, Settle: rdb.Settle{JobID: id, Failed: true}, Fields: f}); !ok || err != nil {
				t.Fatalf("move: %v %v", ok, err)
			}
			e.enqueue(t, "b")
			e.take(t, "c") // a live consumer
			return id
		}, []string{inspect.WaitRetryBackoff}, func(t *testing.T, w *inspect.Why) {
			if !strings.Contains(w.Reasons[0].Detail, "boom") {
				t.Errorf("detail %q names no error", w.Reasons[0].Detail)
			}
		}},
		{"key cap", func(t *testing.T, e *env) string {
			if err := e.q.SetFlowLimits(ctx, streamq.FlowLimits{PerKey: 1}); err != nil {
				t.Fatal(err)
			}
			e.enqueue(t, "a", streamq.FlowKey("k"))
			e.enqueue(t, "b", streamq.FlowKey("k"))
			id := e.enqueue(t, "c", streamq.FlowKey("k"))
			if got := e.flowRead(t); len(got) != 1 {
				t.Fatalf("admitted %d", len(got))
			}
			return id
		}, []string{inspect.WaitKeyCap, inspect.WaitBehind}, func(t *testing.T, w *inspect.Why) {
			if r := w.Reasons[0]; r.Key != "k" || r.Running != 1 || r.Cap != 1 {
				t.Errorf("reason %+v, want key k at 1 of 1", r)
			}
			if r := w.Reasons[1]; r.Ahead != 1 {
				t.Errorf("reason %+v, want behind 1 of its key", r)
			}
			if w.Job.FlowKey != "k" || string(w.Job.Payload) != "c" || w.Job.State != inspect.StateWaiting {
				t.Errorf("job %+v", w.Job)
			}
		}},
		{"rate limited", func(t *testing.T, e *env) string {
			if err := e.q.SetFlowLimits(ctx, streamq.FlowLimits{Rate: 0.5}); err != nil {
				t.Fatal(err)
			}
			e.enqueue(t, "a", streamq.FlowKey("k"))
			id := e.enqueue(t, "b", streamq.FlowKey("k"))
			if got := e.flowRead(t); len(got) != 1 {
				t.Fatalf("admitted %d", len(got))
			}
			return id
		}, []string{inspect.WaitRateLimited}, func(t *testing.T, w *inspect.Why) {
			if r := w.Reasons[0]; r.Key != "k" || r.Until.Before(time.Now().Add(time.Second)) {
				t.Errorf("reason %+v, want key k until about 2 s from now", r)
			}
		}},
		{"global cap", func(t *testing.T, e *env) string {
			if err := e.q.SetFlowLimits(ctx, streamq.FlowLimits{Global: 1}); err != nil {
				t.Fatal(err)
			}
			e.enqueue(t, "a")
			id := e.enqueue(t, "b")
			if got := e.flowRead(t); len(got) != 1 {
				t.Fatalf("admitted %d", len(got))
			}
			return id
		}, []string{inspect.WaitGlobalCap}, func(t *testing.T, w *inspect.Why) {
			if r := w.Reasons[0]; r.Running != 1 || r.Cap != 1 {
				t.Errorf("reason %+v, want 1 of 1", r)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, nil)
			id := tc.make(t, e)
			w, err := e.iq.Explain(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got := reasonsOf(w); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("reasons %v (%+v), want %v", got, w.Reasons, tc.want)
			}
			if tc.check != nil {
				tc.check(t, w)
			}
		})
	}
}

func TestQueue_WaitSummary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, nil)
	if err := e.iq.SetFlowLimits(ctx, inspect.FlowLimits{PerKey: 1, Global: 3}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.enqueue(t, "a", streamq.FlowKey("k"))
	}
	e.enqueue(t, "x")
	e.enqueue(t, "y")
	e.enqueue(t, "z")
	if got := e.flowRead(t); len(got) != 3 { // one of k, x and y; then the cap
		t.Fatalf("admitted %d", len(got))
	}
	e.enqueue(t, "later", streamq.ProcessIn(time.Hour))
	e.enqueue(t, "unread")
	sum, err := e.iq.WaitSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{inspect.WaitKeyCap: 2, inspect.WaitGlobalCap: 1, inspect.WaitDelayed: 1, inspect.WaitBehind: 1}
	if len(sum) != len(want) {
		t.Fatalf("summary %v, want %v", sum, want)
	}
	for r, n := range want {
		if sum[r] != n {
			t.Errorf("summary %v, want %v", sum, want)
		}
	}
	st, err := e.iq.Flow(ctx)
	if err != nil || st.Running != 3 || st.Waiting["k"] != 2 || st.Waiting[""] != 1 {
		t.Fatalf("flow state %+v, %v", st, err)
	}
	if err := e.iq.SetFlowLimits(ctx, inspect.FlowLimits{Global: -1}); err == nil {
		t.Error("a negative cap was accepted")
	}
}

func TestQueue_DeleteWaitingAside(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, nil)
	if err := e.q.SetFlowLimits(ctx, streamq.FlowLimits{PerKey: 1}); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, "a", streamq.FlowKey("k"))
	id := e.enqueue(t, "b", streamq.FlowKey("k"))
	e.flowRead(t)
	if err := e.iq.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.iq.Job(ctx, id); !errors.Is(err, inspect.ErrJobNotFound) {
		t.Fatalf("after delete: %v, want not found", err)
	}
	if st, err := e.iq.Flow(ctx); err != nil || len(st.Waiting) != 0 {
		t.Fatalf("flow state %+v, %v", st, err)
	}
}
