package workflow_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/workflow"
)

func TestClient_Enqueue_Refused(t *testing.T) {
	t.Parallel()
	e := setup(t, redistest.NewClient(t), &workflow.Config{MaxNodes: 3, MaxBytes: 4096})
	a, b := e.qs[0], e.qs[1]
	other, err := streamq.NewQueue(e.c, "other", &streamq.QueueConfig{KeyPrefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		w    *workflow.Workflow
		want string
	}{
		{"cycle", workflow.New("w").Add("x", a, step{}, workflow.After("z")).Add("y", a, step{}, workflow.After("x")).Add("z", b, step{}, workflow.After("y")), "cycle"},
		{"self", workflow.New("w").Add("x", a, step{}, workflow.After("x")), "depends on itself"},
		{"unknown parent", workflow.New("w").Add("x", a, step{}, workflow.After("nope")), `depends on "nope", which is not a node`},
		{"duplicate node", workflow.New("w").Add("x", a, step{}).Add("x", b, step{}), "added twice"},
		{"duplicate edge", workflow.New("w").Add("x", a, step{}).Add("y", a, step{}, workflow.After("x", "x")), "twice"},
		{"too many nodes", workflow.New("w").Add("1", a, step{}).Add("2", a, step{}).Add("3", a, step{}).Add("4", a, step{}), "more than Config.MaxNodes"},
		{"too many bytes", workflow.New("w").Add("x", a, step{Name: strings.Repeat("x", 5000)}), "more than Config.MaxBytes"},
		{"empty", workflow.New("w"), "no nodes"},
		{"brace in ID", workflow.New("w{1}").Add("x", a, step{}), "brace"},
		{"space in name", workflow.New("w").Add("x y", a, step{}), "space"},
		{"nil queue", workflow.New("w").Add("x", nil, step{}), "nil queue"},
		{"foreign queue", workflow.New("w").Add("x", other, step{}), "was not given"},
		{"delay", workflow.New("w").Add("x", a, step{}, workflow.With(streamq.ProcessIn(time.Second))), "ProcessAt/ProcessIn cannot be used"},
		{"unique", workflow.New("w").Add("x", a, step{}, workflow.With(streamq.Unique("k", time.Second))), "Unique cannot be used"},
		{"chain of unknown", workflow.New("w").Add("x", a, step{}).Chain("x", "y"), `node "y" is not added`},
		{"batch of unknown", workflow.New("w").Add("x", a, step{}).Batch("b", []string{"x", "y"}, "", ""), `member "y" is not a node`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e.wc.Enqueue(context.Background(), tt.w)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Enqueue: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if keys := redistest.ScanKeys(t, e.c, e.prefix+":{wf:*"); len(keys) != 0 || e.c.Exists(context.Background(), rdb.WorkflowRegistry(e.prefix)).Val() != 0 {
		t.Fatalf("refused workflows wrote keys: %q", keys)
	}
}

func TestClient_Chain(t *testing.T) {
	t.Parallel()
	e := setup(t, redistest.NewClient(t), nil)
	a, b := e.qs[0], e.qs[1]
	got := make(chan map[string][]byte, 1)
	e.consume(func(ctx context.Context, job *streamq.TypedJob[step]) error {
		if job.Args.Name == "c" {
			res, err := workflow.ParentResults(ctx)
			if err != nil {
				return err
			}
			got <- res
		}
		return e.handler(ctx, job)
	})
	w := workflow.New("chain").Add("a", a, step{"a"}).Add("b", b, step{"b"}).Add("c", a, step{"c"}).Chain("a", "b", "c")
	if err := e.wc.Enqueue(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	info := e.waitEnded("chain", 20*time.Second)
	if info.State != workflow.StateFinished || info.Progress.Succeeded != 3 {
		t.Fatalf("workflow %s with %+v, want finished with 3 succeeded", info.State, info.Progress)
	}
	e.checkOrder(map[string][]string{"b": {"a"}, "c": {"b"}}, nil)
	res := <-got
	if string(res["b"]) != "result of b" || len(res) != 1 {
		t.Fatalf("c read its parents' results %q, want only b's", res)
	}
	for _, n := range info.Nodes {
		if n.JobID == "" || (n.Name == "b") != (n.Queue == "b") {
			t.Errorf("node %+v: want a job ID on its queue", n)
		}
	}
	ttl := e.c.PTTL(context.Background(), rdb.NewWorkflowKeys(e.prefix, "chain").Meta).Val()
	if ttl <= 0 || ttl > workflow.DefaultRetention {
		t.Fatalf("finished workflow's TTL %s, want up to the retention %s", ttl, workflow.DefaultRetention)
	}
	// The registry entry goes after the last job's record (see unregister):
	// wait for it, bounded, instead of expecting it with the finished state.
	redistest.WaitFor(t, 10*time.Second, "the finished workflow to leave the registry", func() bool {
		return e.c.ZCard(context.Background(), rdb.WorkflowRegistry(e.prefix)).Val() == 0
	})
}

func TestClient_FanOutFanIn(t *testing.T) {
	t.Parallel()
	const width = 1000
	e := setup(t, redistest.NewClient(t), nil)
	e.consume(nil)
	w, deps := fanOut(e, "fan", width)
	if err := e.wc.Enqueue(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	info := e.waitEnded("fan", 60*time.Second)
	if info.Progress.Succeeded != width+2 {
		t.Fatalf("progress %+v, want %d succeeded", info.Progress, width+2)
	}
	e.checkOrder(deps, nil)
	e.checkRunsOnce()
	// The hashes written with a field per node at once are hash tables,
	// without the field that made them so (see hsetLib in internal/rdb).
	ctx := context.Background()
	for _, key := range []string{
		rdb.NewWorkflowKeys(e.prefix, "fan").State, rdb.NewWorkflowKeys(e.prefix, "fan").Parents,
		rdb.WorkflowMarks(rdb.NewKeys(e.prefix, "b"), "fan"),
	} {
		enc, err := e.c.ObjectEncoding(ctx, key).Result()
		if err != nil || enc != "hashtable" {
			t.Errorf("%s: encoding %q (%v), want hashtable", key, enc, err)
		}
		if n, err := e.c.HLen(ctx, key).Result(); err != nil || n < width/2 {
			t.Errorf("%s: %d fields (%v)", key, n, err)
		}
		if ok, err := e.c.HExists(ctx, key, "\x00wide").Result(); err != nil || ok {
			t.Errorf("%s: has the widening field (%v)", key, err)
		}
	}
}

// fanOut builds root -> width children (on both queues) -> sink.
func fanOut(e *env, id string, width int) (*workflow.Workflow, map[string][]string) {
	w := workflow.New(id).Add("root", e.qs[0], step{"root"})
	kids := names("kid", width)
	for i, k := range kids {
		w.Add(k, e.qs[i%2], step{k}, workflow.After("root"))
	}
	w.Add("sink", e.qs[1], step{"sink"}, workflow.After(kids...))
	deps := map[string][]string{"sink": kids}
	for _, k := range kids {
		deps[k] = []string{"root"}
	}
	return w, deps
}

// checkRunsOnce checks that each node's handler started once.
func (e *env) checkRunsOnce() {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for n, r := range e.runs {
		if r != 1 {
			e.t.Errorf("node %s started %d times, want once", n, r)
		}
	}
}

func TestClient_FailurePolicies(t *testing.T) {
	t.Parallel()
	e := setup(t, redistest.NewClient(t), nil)
	a, b := e.qs[0], e.qs[1]
	e.fail["root"] = streamq.Permanent(errBoom)
	e.fail["flaky"] = errBoom // fails each attempt: dead after MaxAttempts(2)
	e.consume(nil)
	w := workflow.New("pol").
		Add("root", a, step{"root"}).
		Add("cancelled", b, step{"cancelled"}, workflow.After("root")).
		Add("grandchild", a, step{"grandchild"}, workflow.After("cancelled")).
		Add("anyway", b, step{"anyway"}, workflow.AfterPolicy(workflow.RunAnyway, "root")).
		Add("ignored", a, step{"ignored"}, workflow.AfterPolicy(workflow.Ignore, "root")).
		Add("flaky", b, step{"flaky"}, workflow.With(streamq.MaxAttempts(2))).
		Add("after-flaky", a, step{"after-flaky"}, workflow.After("flaky"))
	if err := e.wc.Enqueue(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	info := e.waitEnded("pol", 20*time.Second)
	want := map[string]workflow.NodeState{
		"root": workflow.NodeDead, "cancelled": workflow.NodeCancelled, "grandchild": workflow.NodeCancelled,
		"anyway": workflow.NodeSucceeded, "ignored": workflow.NodeSucceeded,
		"flaky": workflow.NodeDead, "after-flaky": workflow.NodeCancelled,
	}
	got := states(info)
	for n, s := range want {
		if got[n] != s {
			t.Errorf("node %s is %s, want %s", n, got[n], s)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range []string{"cancelled", "grandchild", "after-flaky"} {
		if e.runs[n] != 0 {
			t.Errorf("cancelled node %s ran %d times", n, e.runs[n])
		}
	}
	if e.runs["flaky"] != 2 {
		t.Errorf("flaky ran %d times, want its 2 attempts", e.runs["flaky"])
	}
}

func TestClient_Batch(t *testing.T) {
	t.Parallel()
	e := setup(t, redistest.NewClient(t), nil)
	a, b := e.qs[0], e.qs[1]
	e.fail["m3"] = streamq.Permanent(errBoom)
	members := names("m", 6)
	w := workflow.New("batch")
	for i, m := range members {
		w.Add(m, []*streamq.Queue{a, b}[i%2], step{m})
	}
	w.Add("ok-all", a, step{"ok-all"}).Add("done-all", b, step{"done-all"}).Batch("thumbs", members, "ok-all", "done-all")
	w.Add("n0", a, step{"n0"}).Add("n1", b, step{"n1"}).Add("good", a, step{"good"}).Add("all", b, step{"all"}).
		Batch("clean", []string{"n0", "n1"}, "good", "all")
	ctx := context.Background()
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.wc.Enqueue(ctx, w); err != nil {
		t.Fatal(err)
	}
	bi, err := e.wc.Batch(ctx, "batch", "thumbs")
	if err != nil {
		t.Fatal(err)
	}
	if bi.Progress.Total != 6 || bi.Progress.Waiting+bi.Progress.Succeeded+bi.Progress.Dead != 6 {
		t.Fatalf("progress before the run %+v, want 6 members", bi.Progress)
	}
	e.consume(nil)
	info := e.waitEnded("batch", 20*time.Second)
	got := states(info)
	if got["ok-all"] != workflow.NodeCancelled || got["done-all"] != workflow.NodeSucceeded {
		t.Errorf("callbacks of the failed batch: ok-all %s, done-all %s; want cancelled, succeeded", got["ok-all"], got["done-all"])
	}
	if got["good"] != workflow.NodeSucceeded || got["all"] != workflow.NodeSucceeded {
		t.Errorf("callbacks of the good batch: good %s, all %s; want both succeeded", got["good"], got["all"])
	}
	bi, err = e.wc.Batch(ctx, "batch", "thumbs")
	if err != nil {
		t.Fatal(err)
	}
	if want := (workflow.Progress{Total: 6, Succeeded: 5, Dead: 1}); bi.Progress != want {
		t.Fatalf("progress %+v, want %+v", bi.Progress, want)
	}
	e.checkOrder(map[string][]string{"done-all": members, "all": {"n0", "n1"}, "good": {"n0", "n1"}},
		map[string]bool{"done-all<m3": true})
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, cb := range []string{"done-all", "good", "all"} {
		if e.runs[cb] != 1 {
			t.Errorf("callback %s ran %d times, want once", cb, e.runs[cb])
		}
	}
}

func TestClient_Cancel(t *testing.T) {
	t.Parallel()
	e := setup(t, redistest.NewClient(t), nil)
	a, b := e.qs[0], e.qs[1]
	started := make(chan struct{})
	e.consume(func(ctx context.Context, job *streamq.TypedJob[step]) error {
		if job.Args.Name == "slow" {
			close(started)
			<-ctx.Done() // until cancelled
			return context.Cause(ctx)
		}
		return e.handler(ctx, job)
	})
	w := workflow.New("cx").Add("slow", a, step{"slow"}).Add("next", b, step{"next"}).Add("last", a, step{"last"}).Chain("slow", "next", "last")
	ctx := context.Background()
	if err := e.wc.Enqueue(ctx, w); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the first job did not start")
	}
	ok, err := e.wc.Cancel(ctx, "cx")
	if err != nil || !ok {
		t.Fatalf("Cancel: %v, %v; want true", ok, err)
	}
	if ok, err := e.wc.Cancel(ctx, "cx"); err != nil || ok {
		t.Fatalf("second Cancel: %v, %v; want false", ok, err)
	}
	if _, err := e.wc.Cancel(ctx, "nope"); !errors.Is(err, workflow.ErrNotFound) {
		t.Fatalf("Cancel of an unknown workflow: %v, want ErrNotFound", err)
	}
	info, err := e.wc.Show(ctx, "cx")
	if err != nil {
		t.Fatal(err)
	}
	if info.State != workflow.StateCancelled || info.Progress.Cancelled != 3 {
		t.Fatalf("after cancel: %s %+v, want cancelled with 3 cancelled nodes", info.State, info.Progress)
	}
	// The running job was cancelled in its queue: it ends as a cancelled
	// dead letter.
	redistest.WaitFor(t, 20*time.Second, "the running job to be cancelled", func() bool {
		return e.c.XLen(ctx, e.prefix+":{a}:dead").Val() == 1
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.runs["next"]+e.runs["last"] != 0 {
		t.Fatalf("nodes after a cancelled one ran: %v", e.runs)
	}
}

func TestClient_Enqueue_Idempotent(t *testing.T) {
	t.Parallel()
	e := setup(t, redistest.NewClient(t), nil)
	ctx := context.Background()
	build := func() *workflow.Workflow {
		return workflow.New("same").Add("r1", e.qs[0], step{"r1"}).Add("r2", e.qs[1], step{"r2"}).Add("k", e.qs[0], step{"k"}, workflow.After("r1", "r2"))
	}
	for range 3 {
		if err := e.wc.Enqueue(ctx, build()); err != nil {
			t.Fatal(err)
		}
	}
	for i, q := range e.qs {
		if n := e.c.XLen(ctx, e.prefix+":{"+q.Name()+"}:stream").Val(); n != 1 {
			t.Errorf("queue %d holds %d jobs after 3 enqueues of the workflow, want 1", i, n)
		}
	}
	other := workflow.New("same").Add("r1", e.qs[0], step{"other"})
	if err := e.wc.Enqueue(ctx, other); !errors.Is(err, workflow.ErrExists) {
		t.Fatalf("another workflow under the ID: %v, want ErrExists", err)
	}
}

func TestClient_Redrive(t *testing.T) {
	t.Parallel()
	e := setup(t, redistest.NewClient(t), &workflow.Config{RedriveAfter: time.Millisecond})
	a, b := e.qs[0], e.qs[1]
	ctx := context.Background()
	w := workflow.New("rd").Add("p", a, step{"p"}).Add("c", b, step{"c"}, workflow.After("p")).
		Add("dies", a, step{"dies"}, workflow.With(streamq.MaxAttempts(1))).Add("after", b, step{"after"}, workflow.After("dies"))
	if err := e.wc.Enqueue(ctx, w); err != nil {
		t.Fatal(err)
	}
	// A worker recorded p's success and died before releasing c.
	found, _, run, err := rdb.NewWorkflow(e.c, e.prefix, "rd").Complete(ctx, []rdb.Completion{{Node: "p", Outcome: "s"}})
	if err != nil || !found[0] || len(run) != 1 || run[0].Name != "c" {
		t.Fatalf("Complete: %v %v %v, want c runnable", found, run, err)
	}
	// dies is dead-lettered by a consumer without the middleware.
	mux := streamq.NewMux()
	streamq.Register(mux, func(ctx context.Context, job *streamq.TypedJob[step]) error {
		return streamq.Permanent(errBoom)
	})
	cons, err := streamq.NewConsumer(a, mux, &streamq.ConsumerConfig{Block: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "consumer without middleware", 10*time.Second, cons.Run)
	redistest.WaitFor(t, 20*time.Second, "both jobs of a to be dead-lettered", func() bool {
		return e.c.XLen(ctx, e.prefix+":{a}:dead").Val() == 2
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	got, err := e.wc.Redrive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Released != 1 || got.Ended != 1 {
		t.Fatalf("Redrive: %+v, want 1 released and 1 ended", got)
	}
	info, err := e.wc.Show(ctx, "rd")
	if err != nil {
		t.Fatal(err)
	}
	st := states(info)
	if st["c"] != workflow.NodeEnqueued || st["dies"] != workflow.NodeDead || st["after"] != workflow.NodeCancelled {
		t.Fatalf("after the re-drive: %v", st)
	}
	if n := e.c.XLen(ctx, e.prefix+":{b}:stream").Val(); n != 1 {
		t.Fatalf("queue b holds %d jobs, want c's", n)
	}
	// Again: nothing more to do.
	if got, err := e.wc.Redrive(ctx); err != nil || got.Released+got.Ended != 0 {
		t.Fatalf("second Redrive: %+v, %v; want nothing done", got, err)
	}
}

// TestClient_FanOutFanIn_10000 runs a 10,000-wide fan-out/fan-in on a Redis
// server of its own.
func TestClient_FanOutFanIn_10000(t *testing.T) {
	if testing.Short() {
		t.Skip("a 10,000-job workflow; runs without -short")
	}
	t.Parallel()
	const width = 10_000
	e := setup(t, redistest.NewIsolatedClient(t), nil)
	e.consume(nil)
	w, deps := fanOut(e, "fan10k", width)
	start := time.Now()
	if err := e.wc.Enqueue(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	info := e.waitEnded("fan10k", 120*time.Second)
	t.Logf("%d jobs through a %d-wide fan-out/fan-in in %s", width+2, width, time.Since(start))
	if info.Progress.Succeeded != width+2 {
		t.Fatalf("progress %+v, want %d succeeded", info.Progress, width+2)
	}
	e.checkOrder(deps, nil)
	e.checkRunsOnce()
}

func TestInspector_ExplainNode(t *testing.T) {
	t.Parallel()
	e := setup(t, redistest.NewClient(t), nil)
	a, b := e.qs[0], e.qs[1]
	ctx := context.Background()
	w := workflow.New("why").Add("p1", a, step{"p1"}).Add("p2", b, step{"p2"}).Add("kid", a, step{"kid"}, workflow.After("p1", "p2"))
	if err := e.wc.Enqueue(ctx, w); err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(e.c, &inspect.Options{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	why, err := in.ExplainNode(ctx, "why", "kid")
	if err != nil {
		t.Fatal(err)
	}
	if why.State != "waiting" || len(why.Reasons) != 2 || why.Reasons[0].Reason != inspect.WaitParent || why.Reasons[0].Parent != "p1" ||
		why.Reasons[0].Detail != "waiting for parent p1 (enqueued)" || why.Reasons[1].Parent != "p2" {
		t.Fatalf("ExplainNode(kid): %+v", why)
	}
	why, err = in.ExplainNode(ctx, "why", "p2")
	if err != nil {
		t.Fatal(err)
	}
	if why.State != "enqueued" || why.Queue != "b" || why.Job == nil || len(why.Job.Reasons) == 0 {
		t.Fatalf("ExplainNode(p2): %+v", why)
	}
	if _, err := in.ExplainNode(ctx, "nope", "kid"); err == nil || !strings.Contains(err.Error(), `workflow "nope" not found`) {
		t.Fatalf("unknown workflow: %v", err)
	}
}

// TestWorkflow_CompleteGroup records several outcomes in one complete
// script call, as the middleware's group commit sends them: a fan-in child
// becomes runnable once, when both its parents' successes are in the same
// call; an unknown node is reported not found; a repeated record changes
// nothing and returns the children still runnable.
func TestWorkflow_CompleteGroup(t *testing.T) {
	t.Parallel()
	e := setup(t, redistest.NewClient(t), nil)
	a := e.qs[0]
	ctx := context.Background()
	w := workflow.New("grp").Add("a", a, step{"a"}).Add("b", a, step{"b"}).
		Add("both", a, step{"both"}, workflow.After("a", "b")).Add("only-a", a, step{"only-a"}, workflow.After("a")).
		Add("f", a, step{"f"})
	if err := e.wc.Enqueue(ctx, w); err != nil {
		t.Fatal(err)
	}
	wf := rdb.NewWorkflow(e.c, e.prefix, "grp")
	found, finished, run, err := wf.Complete(ctx, []rdb.Completion{
		{Node: "a", Outcome: "s", Result: []byte("ra"), HasResult: true}, {Node: "nope", Outcome: "s"},
		{Node: "b", Outcome: "s"}, {Node: "a", Outcome: "s"}, {Node: "f", Outcome: "f"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true, true, true}; !slices.Equal(found, want) || finished {
		t.Fatalf("found %v finished %v, want %v and not finished", found, finished, want)
	}
	if got := runNames(run); !slices.Equal(got, []string{"both", "only-a"}) {
		t.Fatalf("runnable %q, want both and only-a once each", got)
	}
	st, err := wf.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State["a"] != "s" || st.State["b"] != "s" || st.State["f"] != "f" || st.State["both"] != "r" || st.Need["both"] != "0" {
		t.Fatalf("states %v, need %v: want a, b succeeded, f retrying, both runnable with no parent left", st.State, st.Need)
	}
	_, _, run, err = wf.Complete(ctx, []rdb.Completion{{Node: "b", Outcome: "s"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := runNames(run); !slices.Equal(got, []string{"both"}) {
		t.Fatalf("a repeated record returned %q, want its child still runnable (both)", got)
	}
}

// runNames returns the sorted names of run.
func runNames(run []rdb.Runnable) []string {
	var out []string
	for _, r := range run {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}
