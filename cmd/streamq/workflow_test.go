package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/workflow"
)

type cliStep struct{ N int }

func (cliStep) Kind() string { return "cli.step" }

// workflowSetup sets queue name up under e's prefix and returns it with a
// workflow client of it.
func workflowSetup(t *testing.T, e *env, name string) (*streamq.Queue, *workflow.Client) {
	t.Helper()
	q := mustQueue(t, e.rdb, e.prefix, name)
	if err := q.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	wc, err := workflow.NewClient([]*streamq.Queue{q}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q, wc
}

// TestCLI_WorkflowShow enqueues a workflow (nothing runs it) and shows it:
// the root enqueued, the children waiting for their parents.
func TestCLI_WorkflowShow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	q, wc := workflowSetup(t, e, "orders")
	w := workflow.New("order-42").Add("fetch", q, cliStep{1}).Add("resize", q, cliStep{2}).Add("notify", q, cliStep{3}).
		Chain("fetch", "resize", "notify").Batch("images", []string{"resize"}, "", "")
	if err := wc.Enqueue(ctx, w); err != nil {
		t.Fatal(err)
	}
	out := e.ok("workflow", "show", "order-42")
	for _, want := range []string{"workflow order-42: running, 3 nodes", "fetch", "enqueued", "waiting", "parent fetch", "parent resize", "batch images: 1 members"} {
		if !strings.Contains(out, want) {
			t.Errorf("workflow show printed no %q:\n%s", want, out)
		}
	}
	var wj workflowJSON
	if err := json.Unmarshal([]byte(e.ok("--json", "workflow", "show", "order-42")), &wj); err != nil {
		t.Fatal(err)
	}
	if wj.State != "running" || wj.Progress.Total != 3 || len(wj.Nodes) != 3 || wj.Nodes[0].Name != "fetch" || wj.Nodes[0].JobID == "" {
		t.Errorf("workflow show --json: %+v", wj)
	}
	if r := e.run("", "workflow", "show", "nope"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("an unknown workflow: exit %d\n%s", r.code, r.stderr)
	}
}

// TestCLI_WorkflowCancel cancels a workflow whose root job waits in its
// queue: it asks for --yes without a terminal, then cancels the nodes that
// had not ended and deletes the waiting job, says so (golden file), and a
// second cancel finds the workflow ended.
func TestCLI_WorkflowCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	q, wc := workflowSetup(t, e, "orders")
	w := workflow.New("order-43").Add("fetch", q, cliStep{1}).Add("resize", q, cliStep{2}).Add("notify", q, cliStep{3}).
		Chain("fetch", "resize", "notify")
	if err := wc.Enqueue(ctx, w); err != nil {
		t.Fatal(err)
	}
	info, err := wc.Show(ctx, "order-43")
	if err != nil {
		t.Fatal(err)
	}
	root := info.Nodes[0].JobID
	if info.Nodes[0].Name != "fetch" || root == "" {
		t.Fatalf("the root node has no job: %+v", info.Nodes)
	}

	r := e.run("", "workflow", "cancel", "order-43")
	if r.code != exitUsage || !strings.Contains(r.stderr, "cancel workflow order-43: 3 of its 3 nodes have not ended, 1 of them with a job in a queue") || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("cancel without --yes and without a terminal: exit %d\n%s", r.code, r.stderr)
	}
	if got, _ := wc.Show(ctx, "order-43"); got.State != workflow.StateRunning {
		t.Fatalf("a cancel not confirmed changed the workflow: %s", got.State)
	}

	out := e.ok("workflow", "cancel", "order-43", "--yes", "--json")
	golden(t, "workflow_cancel", strings.ReplaceAll(out, root, "<job_id>"))
	if got, _ := wc.Show(ctx, "order-43"); got.State != workflow.StateCancelled || got.Progress.Cancelled != 3 {
		t.Errorf("after cancel: %s, %+v", got.State, got.Progress)
	}
	if r := e.run("", "job", "orders", root); r.code != exitNotFound {
		t.Errorf("the root's waiting job was not deleted: exit %d\n%s", r.code, r.stdout)
	}

	again := e.ok("workflow", "cancel", "order-43", "--yes")
	if !strings.Contains(again, "workflow order-43 had already ended (cancelled): nothing cancelled") {
		t.Errorf("a second cancel printed:\n%s", again)
	}
	if r := e.run("", "workflow", "cancel", "nope", "--yes"); r.code != exitNotFound || !strings.Contains(r.stderr, "workflow not found") {
		t.Errorf("an unknown workflow: exit %d\n%s", r.code, r.stderr)
	}
}

// TestCLI_WorkflowCancelText checks the lines a cancel prints for the
// record: each node cancelled and what was done to each job.
func TestCLI_WorkflowCancelText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	q, wc := workflowSetup(t, e, "mail")
	if err := wc.Enqueue(ctx, workflow.New("w-1").Add("a", q, cliStep{1}).Add("b", q, cliStep{2}, workflow.After("a"))); err != nil {
		t.Fatal(err)
	}
	out := e.ok("workflow", "cancel", "w-1", "-y")
	for _, want := range []string{"cancelled workflow w-1: 2 nodes", "cancelled node a", "cancelled node b", "of queue mail (node a): deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("workflow cancel printed no %q:\n%s", want, out)
		}
	}
}
