package workflow_test

import (
	"bytes"
	"context"
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
// parents, each callback run once.
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
	for _, cb := range []string{"ok", "all", "sink"} {
		if e.runs[cb] != 1 {
			t.Errorf("callback %s ran %d times, want once", cb, e.runs[cb])
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
