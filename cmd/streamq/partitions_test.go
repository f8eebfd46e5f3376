package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/streamq/streamq"
)

// partitioned sets the partitions of queue "orders" to n with the CLI, and
// returns the queue, set up, and a producer of it.
func partitioned(t *testing.T, e *env, n int) (*streamq.PartitionedQueue, *streamq.PartitionedProducer) {
	t.Helper()
	e.ok("partitions", "set", "orders", strconv.Itoa(n))
	pq, err := streamq.NewPartitionedQueue(e.rdb, "orders", &streamq.PartitionedQueueConfig{Queue: &streamq.QueueConfig{KeyPrefix: e.prefix}})
	if err != nil {
		t.Fatal(err)
	}
	if err := pq.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pq, p
}

// TestCLI_Partitions sets, shows and shrinks the partitions of a queue.
func TestCLI_Partitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	_, p := partitioned(t, e, 3)
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

// TestCLI_PartitionJobIDs shows and deletes jobs of a partitioned queue by
// the IDs its producer returned, which name their partitions.
func TestCLI_PartitionJobIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	pq, p := partitioned(t, e, 3)
	ids, err := p.EnqueueBatch(ctx, []streamq.Job{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		part, bare, _ := strings.Cut(id, "~")
		want := "orders"
		if part != "p0" {
			want += "#" + strings.TrimPrefix(part, "p")
		}
		var j struct{ ID, Queue string }
		if err := json.Unmarshal([]byte(e.ok("job", "orders", id, "--json")), &j); err != nil {
			t.Fatal(err)
		}
		if j.ID != bare || j.Queue != want {
			t.Fatalf("job orders %s: ID %s in queue %s, want %s in %s", id, j.ID, j.Queue, bare, want)
		}
	}
	e.ok("delete", "orders", ids[1], ids[2], "--yes")
	if s, err := pq.Stats(ctx); err != nil || s.Lag != 1 {
		t.Fatalf("after deleting 2 of 3 jobs: %d waiting (%v), want 1", s.Lag, err)
	}
}
