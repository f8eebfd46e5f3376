package workflow_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/workflow"
)

// TestClient_Faults runs a fan-out/fan-in with a batch through a loopback
// proxy that drops the replies of workflow scripts after Redis ran them
// (go-redis sends them again: re-sends must change nothing) and cuts every
// connection at intervals. Every node must succeed, none start before its
// parents, each (callbacks included) run once.
func TestClient_Faults(t *testing.T) {
	t.Parallel()
	proxy, c := redistest.NewProxiedClient(t)
	e := setup(t, c, &workflow.Config{RedriveAfter: 500 * time.Millisecond, RedriveInterval: 100 * time.Millisecond})
	redistest.Background(t, "re-drive", 10*time.Second, e.wc.Run)
	// script matches a call of the named script whose arguments were not
	// dropped before: the re-send of a dropped call goes through.
	var mu sync.Mutex
	seen := map[string]bool{}
	script := func(name string) func(args [][]byte) bool {
		sha := rdb.Scripts()[name].Hash()
		return func(args [][]byte) bool {
			if len(args) < 2 || !strings.EqualFold(string(args[0]), "evalsha") || string(args[1]) != sha {
				return false
			}
			k := string(bytes.Join(args, []byte{0}))
			mu.Lock()
			defer mu.Unlock()
			if seen[k] {
				return false
			}
			seen[k] = true
			return true
		}
	}
	// One drop armed at a time per script (an armed drop would also catch
	// the re-send of the previous one), five times each.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	armed := make(chan struct{}, 3)
	for _, name := range []string{"workflow_create", "workflow_complete", "workflow_released"} {
		go func() {
			defer func() { armed <- struct{}{} }()
			for range 5 {
				select {
				case <-proxy.DropReply(script(name)):
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	e.consume(nil)
	w, deps := fanOut(e, "faults", 200)
	cbs := names("m", 20)
	for i, m := range cbs {
		w.Add(m, e.qs[i%2], step{m})
	}
	w.Add("ok", e.qs[0], step{"ok"}).Add("all", e.qs[1], step{"all"}).Batch("b", cbs, "ok", "all")
	deps["ok"], deps["all"] = cbs, cbs
	if err := e.wc.Enqueue(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	cutsDone := make(chan struct{})
	go func() {
		defer close(cutsDone)
		tick := time.NewTicker(150 * time.Millisecond)
		defer tick.Stop()
		for range 10 {
			<-tick.C
			proxy.CutAll()
		}
	}()
	info := e.waitEnded("faults", 60*time.Second)
	<-cutsDone
	if want := 200 + 2 + 20 + 2; info.Progress.Succeeded != want {
		t.Fatalf("progress %+v, want %d succeeded", info.Progress, want)
	}
	e.checkOrder(deps, nil)
	e.mu.Lock()
	defer e.mu.Unlock()
	for n, r := range e.runs {
		if r != 1 {
			t.Errorf("node %s ran %d times, want once", n, r)
		}
	}
	stop()
	for range 3 {
		<-armed
	}
	if proxy.Dropped() < 5 {
		t.Errorf("%d replies dropped, want at least 5", proxy.Dropped())
	}
	t.Logf("%d replies dropped, %d cuts", proxy.Dropped(), proxy.Cuts())
}

// TestMiddleware_RecordFails makes the record of node x's success fail:
// "lost reply" runs it in Redis but loses every reply of its first record
// (all its tries), as a connection cut that outlasts the client's retries
// does; "refused" fails its first two calls before they reach Redis. Either
// way x's handler runs once, its child runs once after it, and the
// workflow completes: the record is tried again, and a job handed back
// after a success that was recorded does not run its handler again.
func TestMiddleware_RecordFails(t *testing.T) {
	t.Parallel()
	errCut := errors.New("test: connection cut")
	tests := []struct {
		name      string
		hook      func(n int, call func() error) error
		wantCalls func(n int) bool
		want      string
	}{
		{"lost reply", func(n int, call func() error) error {
			err := call()
			if n <= workflow.RecordTries {
				return errCut
			}
			return err
		}, func(n int) bool { return n > workflow.RecordTries }, "more than the tries of one record (the job was handed back)"},
		{"refused", func(n int, call func() error) error {
			if n <= 2 {
				return errCut
			}
			return call()
		}, func(n int) bool { return n == 3 }, "3 (two refused, then recorded)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, redistest.NewClient(t), nil)
			var mu sync.Mutex
			calls := 0
			workflow.SetCompleteHook(e.wc, func(nodes []string, call func() error) error {
				if !slices.Contains(nodes, "x") {
					return call()
				}
				mu.Lock()
				calls++
				n := calls
				mu.Unlock()
				return tt.hook(n, call)
			})
			e.consume(nil)
			w := workflow.New("rec").Add("x", e.qs[0], step{"x"}).Add("y", e.qs[1], step{"y"}, workflow.After("x"))
			if err := e.wc.Enqueue(context.Background(), w); err != nil {
				t.Fatal(err)
			}
			info := e.waitEnded("rec", 30*time.Second)
			if info.State != workflow.StateFinished || info.Progress.Succeeded != 2 {
				t.Fatalf("workflow %s with %+v, want finished with 2 succeeded", info.State, info.Progress)
			}
			e.checkOrder(map[string][]string{"y": {"x"}}, nil)
			e.checkRunsOnce()
			mu.Lock()
			defer mu.Unlock()
			if !tt.wantCalls(calls) {
				t.Errorf("x's record called the script %d times, want %s", calls, tt.want)
			}
		})
	}
}
