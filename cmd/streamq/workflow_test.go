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

// TestCLI_WorkflowShow enqueues a workflow (nothing runs it) and shows it:
// the root enqueued, the children waiting for their parents.
func TestCLI_WorkflowShow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	q := mustQueue(t, e.rdb, e.prefix, "orders")
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	wc, err := workflow.NewClient([]*streamq.Queue{q}, nil)
	if err != nil {
		t.Fatal(err)
	}
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
