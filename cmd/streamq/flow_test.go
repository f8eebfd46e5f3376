package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
)

// TestCLI_FlowAndWhy sets caps with flow set, parks a job behind its key's
// cap (as a consumer's read does), and asks why it waits, for the job and
// for the queue.
func TestCLI_FlowAndWhy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	q := mustQueue(t, e.rdb, e.prefix, "orders")
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := e.ok("flow", "set", "orders", "--global", "5", "--per-key", "1", "--key", "vip=3", "--key-rate", "vip=2.5")
	if !strings.Contains(out, "global cap 5, per-key cap 1, per-key rate none") || !strings.Contains(out, "vip") {
		t.Errorf("flow set printed\n%s", out)
	}
	var ids []string
	for range 2 {
		id, err := p.Enqueue(ctx, []byte("x"), streamq.FlowKey("acme"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if got, err := core.Of(q).DB.FlowRead(ctx, rdb.FlowReadParams{Consumer: "c", N: 10}); err != nil || len(got) != 1 {
		t.Fatalf("flow read: %d, %v", len(got), err)
	}
	var fj flowJSON
	if err := json.Unmarshal([]byte(e.ok("--json", "flow", "show", "orders")), &fj); err != nil {
		t.Fatal(err)
	}
	if fj.Global != 5 || fj.PerKey != 1 || fj.Keys["vip"] != 3 || fj.Rates["vip"] != 2.5 || fj.Running != 1 || fj.Slots["acme"] != 1 || fj.Waiting["acme"] != 1 {
		t.Errorf("flow show --json: %+v", fj)
	}
	out = e.ok("why", "orders", ids[1])
	if !strings.Contains(out, `key_cap: flow key "acme" is at its cap: 1 of 1 running`) {
		t.Errorf("why <job> printed\n%s", out)
	}
	out = e.ok("why", "orders")
	if !strings.Contains(out, "key_cap") || !strings.Contains(out, "1") {
		t.Errorf("why <queue> printed\n%s", out)
	}
	if r := e.run("", "flow", "set", "orders", "--key", "vip"); r.code != exitUsage {
		t.Errorf("a --key without a cap: exit %d, want %d\n%s", r.code, exitUsage, r.stderr)
	}
}

// TestCLI_FlowKinds sets caps per kind with flow set, parks a job of a kind
// at its cap, and shows the caps and why the job waits.
func TestCLI_FlowKinds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	q := mustQueue(t, e.rdb, e.prefix, "reports")
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.ok("flow", "set", "reports", "--kind", "report.build=1", "--kind-per-key", "email.send=2", "--weight", "vip=3")
	var ids []string
	for range 2 {
		id, err := p.Enqueue(ctx, []byte("x"), streamq.WithKind("report.build"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if got, err := core.Of(q).DB.FlowRead(ctx, rdb.FlowReadParams{Consumer: "c", N: 10}); err != nil || len(got) != 1 {
		t.Fatalf("flow read: %d, %v", len(got), err)
	}
	var fj flowJSON
	if err := json.Unmarshal([]byte(e.ok("--json", "flow", "show", "reports")), &fj); err != nil {
		t.Fatal(err)
	}
	if fj.Kinds["report.build"] != 1 || fj.KindPerKey["email.send"] != 2 || fj.KindSlots["report.build"] != 1 || fj.Running != 1 || fj.Weights["vip"] != 3 {
		t.Errorf("flow show --json: %+v", fj)
	}
	if out := e.ok("flow", "show", "reports"); !strings.Contains(out, "report.build") || !strings.Contains(out, "CAP PER KEY") {
		t.Errorf("flow show printed\n%s", out)
	}
	if out := e.ok("why", "reports", ids[1]); !strings.Contains(out, `kind_cap: kind "report.build" is at its cap: 1 of 1 running`) {
		t.Errorf("why <job> printed\n%s", out)
	}
	if out := e.ok("why", "reports"); !strings.Contains(out, "kind_cap") {
		t.Errorf("why <queue> printed\n%s", out)
	}
	if r := e.run("", "flow", "set", "reports", "--kind", "report.build=0"); r.code != exitUsage {
		t.Errorf("a --kind cap of 0: exit %d, want %d\n%s", r.code, exitUsage, r.stderr)
	}
}
