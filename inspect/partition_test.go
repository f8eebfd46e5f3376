package inspect_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

func TestPartitioned_ReadsAsOneQueue(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	prefix := "iq-" + redistest.Name(t)
	redistest.DeleteKeysAtCleanup(t, c, prefix+":*")
	ctx := context.Background()
	pq, err := streamq.NewPartitionedQueue(c, "orders", &streamq.PartitionedQueueConfig{Queue: &streamq.QueueConfig{KeyPrefix: prefix}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pq.SetPartitions(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := pq.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 30 {
		id, err := p.Enqueue(ctx, []byte("job-"+strconv.Itoa(i)), streamq.PartitionKey("key"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	later, err := p.Enqueue(ctx, []byte("later"), streamq.ProcessIn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(c, &inspect.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	pi, err := in.Partitioned(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if w, r := pi.Partitions(); w != 3 || r != 3 {
		t.Fatalf("Partitions() = %d, %d; want 3, 3", w, r)
	}
	o, err := pi.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o.Waiting != 30 || o.Delayed != 1 {
		t.Fatalf("Overview: %d waiting, %d delayed; want 30 and 1", o.Waiting, o.Delayed)
	}
	for _, id := range append(ids[:3:3], later) {
		j, err := pi.Job(ctx, id)
		if err != nil {
			t.Fatalf("Job(%s): %v", id, err)
		}
		if j.ID != id {
			t.Fatalf("Job(%s).ID = %s", id, j.ID)
		}
	}
	if _, err := pi.Job(ctx, "1-1"); !errors.Is(err, inspect.ErrJobNotFound) {
		t.Fatalf("Job of an unknown ID: %v, want ErrJobNotFound", err)
	}
	var listed []inspect.Job
	cursor := ""
	for range 30 {
		page, err := pi.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Limit: 4, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSortedFunc(page.Jobs, func(a, b inspect.Job) int { return a.EnqueuedAt.Compare(b.EnqueuedAt) }) {
			t.Fatal("a page is not in enqueue order")
		}
		listed = append(listed, page.Jobs...)
		if cursor = page.Cursor; cursor == "" {
			break
		}
	}
	if len(listed) != 30 {
		t.Fatalf("listed %d waiting jobs, want 30", len(listed))
	}
	if err := pi.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if o, err := pi.Overview(ctx); err != nil || !o.Paused {
		t.Fatalf("after Pause: paused %v, %v", o.Paused, err)
	}
	if err := pi.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	// Cancel reaches the job's partition: a delayed job is not running.
	var se *inspect.StateError
	if err := pi.Cancel(ctx, later); !errors.As(err, &se) {
		t.Fatalf("Cancel of a delayed job: %v, want a *StateError", err)
	}
	if ok, err := pq.Cancel(ctx, later); err != nil || !ok {
		t.Fatalf("PartitionedQueue.Cancel of a delayed job: %v, %v", ok, err)
	}
	if o, err := pi.Overview(ctx); err != nil || o.Delayed != 0 {
		t.Fatalf("after Cancel: %d delayed (%v), want 0", o.Delayed, err)
	}
}
