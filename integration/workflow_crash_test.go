package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/proctest"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/testworker"
	"github.com/streamq/streamq/workflow"
)

// wfStep are the args of the workflow-testworker's jobs (its Step).
type wfStep struct {
	Node string `json:"node"`
}

func (wfStep) Kind() string { return "wftest.step" }

// Workflow crash storm settings.
const (
	wfStormWorkflows = 12
	wfStormKids      = 30
	wfStormWorkers   = 3
	wfStormDuration  = 6 * time.Second
)

// TestWorkflow_CrashStorm runs workflows (fan-out/fan-in, a batch with both
// callbacks, a chain) on worker processes that are SIGKILLed at random, and
// checks from the workers' external log that no job started before all its
// parents had succeeded, that each callback was enqueued once (one job ID)
// and finished, and that every workflow finished with every node succeeded:
// nothing lost, nothing waiting forever (the re-drive repairs releases cut
// short by a kill).
func TestWorkflow_CrashStorm(t *testing.T) {
	t.Parallel()
	c := redistest.NewIsolatedClient(t)
	addr := redistest.AddrOf(t, c)
	prefix := "wfstorm"
	ctx := context.Background()
	var qs []*streamq.Queue
	for _, name := range []string{"a", "b"} {
		q, err := streamq.NewQueue(c, name, &streamq.QueueConfig{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q)
	}
	wc, err := workflow.NewClient(qs, &workflow.Config{RedriveInterval: 200 * time.Millisecond, RedriveAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "workflow re-drive", 10*time.Second, wc.Run)

	bin := proctest.Build(t, testworker.WorkflowWorker)
	start := func(i int) *proctest.Proc {
		name := fmt.Sprintf("w%d", i)
		p := proctest.Start(t, proctest.Options{Bin: bin, Name: name, Args: []string{"-addr", addr, "-prefix", prefix, "-name", name, "-work", "5ms-40ms"}})
		p.WaitReady(t, 30*time.Second)
		return p
	}
	workers := make([]*proctest.Proc, wfStormWorkers)
	for i := range workers {
		workers[i] = start(i)
	}

	deps := map[string][]string{} // "<wf>/<node>" -> parents
	callbacks := []string{}
	enqueue := func(i int) {
		id := fmt.Sprintf("storm%d", i)
		w := workflow.New(id).Add("root", qs[0], wfStep{"root"})
		var kids []string
		for k := range wfStormKids {
			kid := fmt.Sprintf("kid%d", k)
			kids = append(kids, kid)
			w.Add(kid, qs[k%2], wfStep{kid}, workflow.After("root"))
			deps[id+"/"+kid] = []string{id + "/root"}
		}
		w.Add("sink", qs[1], wfStep{"sink"}, workflow.After(kids...))
		w.Add("ok", qs[0], wfStep{"ok"}).Add("all", qs[1], wfStep{"all"}).Batch("kids", kids, "ok", "all")
		w.Add("c1", qs[0], wfStep{"c1"}).Add("c2", qs[1], wfStep{"c2"}).Chain("sink", "c1", "c2")
		for _, n := range []string{"sink", "ok", "all"} {
			for _, k := range kids {
				deps[id+"/"+n] = append(deps[id+"/"+n], id+"/"+k)
			}
		}
		deps[id+"/c1"], deps[id+"/c2"] = []string{id + "/sink"}, []string{id + "/c1"}
		callbacks = append(callbacks, id+"/ok", id+"/all")
		if err := wc.Enqueue(ctx, w); err != nil {
			t.Fatal(err)
		}
	}

	// The storm: SIGKILL a random worker every 150-400 ms and start it
	// again, while workflows are enqueued one per kill.
	kills := 0
	for end := time.Now().Add(wfStormDuration); time.Now().Before(end) || kills < wfStormWorkflows; kills++ {
		if kills < wfStormWorkflows {
			enqueue(kills)
		}
		i := rand.N(len(workers))
		workers[i].Kill()
		workers[i] = start(i)
		time.Sleep(150*time.Millisecond + rand.N(250*time.Millisecond)) // pacing of the storm, not synchronisation
	}
	t.Logf("%d kills", kills)

	for i := range wfStormWorkflows {
		id := fmt.Sprintf("storm%d", i)
		redistest.WaitFor(t, 90*time.Second, "workflow "+id+" to finish", func() bool {
			info, err := wc.Show(ctx, id)
			return err == nil && info.State == workflow.StateFinished
		})
		info, err := wc.Show(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := wfStormKids + 6; info.Progress.Succeeded != want {
			t.Errorf("workflow %s: %+v, want all %d nodes succeeded", id, info.Progress, want)
		}
	}
	for _, p := range workers {
		p.Stop(t, 20*time.Second)
	}
	checkWorkflowLog(t, c.LRange(ctx, prefix+":wftest:log", 0, -1).Val(), deps, callbacks)
}

// checkWorkflowLog checks the external log: every start of a node comes
// after a "done" of each parent, every node finished, and each callback
// ran under a single job ID.
func checkWorkflowLog(t *testing.T, log []string, deps map[string][]string, callbacks []string) {
	t.Helper()
	firstDone := map[string]int{}
	jobIDs := map[string]map[string]bool{}
	starts := 0
	for i, line := range log {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("malformed log line %q", line)
		}
		switch f[0] {
		case "done":
			if _, ok := firstDone[f[1]]; !ok {
				firstDone[f[1]] = i
			}
		case "start":
			starts++
			if jobIDs[f[1]] == nil {
				jobIDs[f[1]] = map[string]bool{}
			}
			jobIDs[f[1]][f[2]] = true
			for _, p := range deps[f[1]] {
				if at, ok := firstDone[p]; !ok || at > i {
					t.Errorf("log line %d: %s started before its parent %s had succeeded", i, f[1], p)
				}
			}
		}
	}
	for n := range deps {
		if _, ok := firstDone[n]; !ok {
			t.Errorf("node %s never finished", n)
		}
	}
	for _, cb := range callbacks {
		if len(jobIDs[cb]) != 1 {
			t.Errorf("callback %s was enqueued as %d jobs (%v), want once", cb, len(jobIDs[cb]), jobIDs[cb])
		}
	}
	t.Logf("%d log lines, %d starts of %d nodes", len(log), starts, len(jobIDs))
}
