package inspect_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

// rankQuantile is the q-quantile of ds as inspect reads it from a
// histogram: the value of rank ceil(q·n).
func rankQuantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	r := int(q*float64(len(s)) + 0.999999)
	return s[min(max(r, 1), len(s))-1]
}

// near checks got against the value the handlers measured: within the
// histogram's 1/16 plus slack for what the handler cannot see (the
// millisecond of the entry's time, the engine's own steps around it).
func near(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	slack := want/16 + 5*time.Millisecond
	if got < want-slack || got > want+slack {
		t.Errorf("%s = %v, want %v ± %v", what, got, want, slack)
	}
}

// TestQueue_HistoryLatency runs jobs of two kinds whose handlers sleep known
// times, one at a time so that they wait known times, and checks the
// queue's and each kind's percentiles, per minute and, after RollUp, per
// hour (twice: rolling up is idempotent).
func TestQueue_HistoryLatency(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	sleeps := map[string]time.Duration{"fast": 10 * time.Millisecond, "slow": 150 * time.Millisecond}
	jobs := []string{"fast", "fast", "fast", "slow", "fast", "fast", "fast", "slow", "fast", "fast", "fast", "fast"}
	// The jobs take about half a second: start them early in a minute so
	// that they all fall in one point (a time to align to, not a wait for
	// a condition).
	if s := time.Now().Second(); s >= 45 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	for _, k := range jobs {
		if _, err := e.p.Enqueue(ctx, []byte(k), streamq.WithKind(k)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	waits, runs := map[string][]time.Duration{}, map[string][]time.Duration{}
	done := make(chan struct{}, len(jobs))
	h := streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
		start := time.Now()
		k := string(m.Payload)
		time.Sleep(sleeps[k]) // the run time under test
		mu.Lock()
		waits[k] = append(waits[k], start.Sub(m.EnqueuedAt))
		runs[k] = append(runs[k], time.Since(start))
		mu.Unlock()
		done <- struct{}{}
		return nil
	})
	c, err := streamq.NewConsumer(e.q, h, &streamq.ConsumerConfig{Concurrency: 1, Block: 10 * time.Millisecond, ControlInterval: control})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "consumer", 20*time.Second, c.Run)
	for range jobs {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("jobs not run within 20 s")
		}
	}
	total := func(h *inspect.History) (n int64) {
		for _, k := range h.Kinds {
			for _, p := range k.Points {
				n += p.Processed
			}
		}
		return n
	}
	var hist *inspect.History
	redistest.WaitFor(t, 10*time.Second, "the histograms of every job", func() bool {
		hist, err = e.iq.History(ctx, 2*time.Minute)
		return err == nil && total(hist) == int64(len(jobs))
	})
	var all, allRuns []time.Duration
	for _, k := range []string{"fast", "slow"} {
		all = append(all, waits[k]...)
		allRuns = append(allRuns, runs[k]...)
	}
	check := func(h *inspect.History) {
		t.Helper()
		var p inspect.Point // the one point holding the jobs
		n := 0
		for _, pt := range h.Points {
			if pt.RunP50 > 0 {
				p, n = pt, n+1
			}
		}
		if n != 1 {
			t.Fatalf("the jobs ran in %d minutes or hours, want 1", n)
		}
		near(t, "queue WaitP50", p.WaitP50, rankQuantile(all, 0.5))
		near(t, "queue WaitP95", p.WaitP95, rankQuantile(all, 0.95))
		near(t, "queue RunP50", p.RunP50, rankQuantile(allRuns, 0.5))
		near(t, "queue RunP95", p.RunP95, rankQuantile(allRuns, 0.95))
		if len(h.Kinds) != 2 || h.Kinds[0].Kind != "fast" || h.Kinds[1].Kind != "slow" || h.Untracked != 0 {
			t.Fatalf("kinds %+v, untracked %d", h.Kinds, h.Untracked)
		}
		for _, kh := range h.Kinds {
			for _, kp := range kh.Points {
				if kp.Processed == 0 {
					continue
				}
				if kp.Processed != int64(len(runs[kh.Kind])) || kp.Failed != 0 {
					t.Errorf("%s: %d processed, %d failed; want %d, 0", kh.Kind, kp.Processed, kp.Failed, len(runs[kh.Kind]))
				}
				near(t, kh.Kind+" RunP50", kp.RunP50, rankQuantile(runs[kh.Kind], 0.5))
				near(t, kh.Kind+" RunP95", kp.RunP95, rankQuantile(runs[kh.Kind], 0.95))
				near(t, kh.Kind+" WaitP95", kp.WaitP95, rankQuantile(waits[kh.Kind], 0.95))
			}
		}
	}
	check(hist)
	for range 2 { // idempotent
		if err := e.iq.RollUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The minutes expire: the hours hold the same histograms.
	now := time.Now().Unix() / 60
	for m := now - 3; m <= now; m++ {
		e.c.Del(ctx, e.key("stats:lat:"+itoa(m)))
	}
	if hist, err = e.iq.History(ctx, 3*time.Hour); err != nil || hist.Step != time.Hour {
		t.Fatalf("History(3h) = %+v, %v", hist, err)
	}
	if n := total(hist); n != int64(len(jobs)) {
		t.Errorf("hours hold %d runs of the kinds, want %d", n, len(jobs))
	}
	check(hist)
}
