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
		if len(page.Jobs) > 4 {
			t.Fatalf("a page of limit 4 holds %d jobs", len(page.Jobs))
		}
		listed = append(listed, page.Jobs...)
		if cursor = page.Cursor; cursor == "" {
			break
		}
	}
	// The pages, one after the other, list every job once, in enqueue
	// order across the partitions.
	if !slices.IsSortedFunc(listed, func(a, b inspect.Job) int { return a.EnqueuedAt.Compare(b.EnqueuedAt) }) {
		t.Fatal("the pages are not in enqueue order")
	}
	got := make([]string, 0, len(listed))
	for _, j := range listed {
		got = append(got, j.ID)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, want) {
		t.Fatalf("listed %d jobs %v, want each of the %d waiting jobs once %v", len(got), got, len(want), want)
	}
	for _, bad := range []string{"zzz", `[{"s":-1},{},{}]`, `[{}]`, `[{"d":true,"c":"x"},{},{}]`} {
		if _, err := pi.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Cursor: bad}); !errors.Is(err, inspect.ErrInvalidCursor) {
			t.Errorf("cursor %s: %v, want ErrInvalidCursor", bad, err)
		}
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
