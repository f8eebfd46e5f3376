package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/streamq/streamq"
)

// TestCLI_Partitions sets, shows and shrinks the partitions of a queue.
func TestCLI_Partitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.ok("partitions", "set", "orders", "3")
	pq, err := streamq.NewPartitionedQueue(e.rdb, "orders", &streamq.PartitionedQueueConfig{Queue: &streamq.QueueConfig{KeyPrefix: e.prefix}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pq.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnqueueBatch(ctx, make([]streamq.Job, 9)); err != nil {
		t.Fatal(err)
	}
	var got partitionsJSON
	if err := json.Unmarshal([]byte(e.ok("partitions", "show", "orders", "--json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.Partitions != 3 || got.Total.Waiting != 9 || len(got.Each) != 3 || got.Each[2].Name != "orders#2" || got.Each[2].Waiting != 3 {
		t.Fatalf("partitions show: %+v", got)
	}
	out := e.ok("partitions", "set", "orders", "2")
	if !strings.Contains(out, "partitions 2..2 draining") {
		t.Fatalf("after shrinking, show says:\n%s", out)
	}
	// Partition 2 holds jobs: finish refuses and says so.
	if r := e.run("", "partitions", "finish", "orders"); r.code == 0 || !strings.Contains(r.stderr, "draining") {
		t.Fatalf("finish with jobs in a dropped partition: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.run("", "partitions", "set", "orders", "0"); r.code == 0 {
		t.Fatal("set 0 partitions: exit 0")
	}
}
