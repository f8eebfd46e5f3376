package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/workflow"
)

// TestCluster runs workflows on Redis Cluster: the workflow's slot and its
// two queues' slots differ, and every script stays in one slot.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: -1})
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	e := setup(t, c, nil)
	e.fail["bad"] = streamq.Permanent(errBoom)
	e.consume(nil)
	const id = "cluster-wf"
	slots := map[int]bool{}
	for _, k := range []string{rdb.NewWorkflowKeys(e.prefix, id).Meta, e.prefix + ":{a}:stream", e.prefix + ":{b}:stream"} {
		s, err := cl.KeySlot(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		slots[s] = true
	}
	if len(slots) != 3 {
		t.Fatalf("the workflow and its queues share slots (%v): pick names on three slots", slots)
	}
	w, deps := fanOut(e, id, 50)
	w.Add("bad", e.qs[0], step{"bad"}).Add("never", e.qs[1], step{"never"}, workflow.After("bad")).
		Add("anyway", e.qs[0], step{"anyway"}, workflow.AfterPolicy(workflow.RunAnyway, "bad"))
	if err := e.wc.Enqueue(ctx, w); err != nil {
		t.Fatal(err)
	}
	info := e.waitEnded(id, 60*time.Second)
	st := states(info)
	if info.Progress.Succeeded != 53 || st["never"] != workflow.NodeCancelled || st["bad"] != workflow.NodeDead {
		t.Fatalf("progress %+v, never %s, bad %s; want 53 succeeded, never cancelled, bad dead", info.Progress, st["never"], st["bad"])
	}
	e.checkOrder(deps, nil)

	// Cancel on the cluster too.
	w = workflow.New("cluster-cx").Add("x", e.qs[0], step{"x"}).Add("y", e.qs[1], step{"y"}, workflow.After("x"))
	e.mu.Lock()
	e.fail["x"] = streamq.RetryAfter(time.Hour, errBoom) // waits in its retry: cancellable
	e.mu.Unlock()
	if err := e.wc.Enqueue(ctx, w); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 20*time.Second, "x to fail once", func() bool {
		i, err := e.wc.Show(ctx, "cluster-cx")
		return err == nil && states(i)["x"] == workflow.NodeRetrying
	})
	if ok, err := e.wc.Cancel(ctx, "cluster-cx"); err != nil || !ok {
		t.Fatalf("Cancel: %v %v", ok, err)
	}
	if _, err := e.wc.Redrive(ctx); err != nil {
		t.Fatal(err)
	}
}
