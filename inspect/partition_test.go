package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

// partEnv is a partitioned queue "orders" of one test, with a producer.
type partEnv struct {
	c      *redis.Client
	prefix string
	pq     *streamq.PartitionedQueue
	p      *streamq.PartitionedProducer
}

// partSetup returns a queue "orders" of n partitions under the test's own
// key prefix.
func partSetup(t *testing.T, n int) *partEnv {
	t.Helper()
	return partSetupQueue(t, n, streamq.QueueConfig{})
}

// partSetupQueue is partSetup with qc configuring every partition.
func partSetupQueue(t *testing.T, n int, qc streamq.QueueConfig) *partEnv {
	t.Helper()
	e := &partEnv{c: redistest.NewClient(t), prefix: "iq-" + redistest.Name(t)}
	redistest.DeleteKeysAtCleanup(t, e.c, e.prefix+":*")
	ctx := context.Background()
	var err error
	qc.KeyPrefix = e.prefix
	e.pq, err = streamq.NewPartitionedQueue(e.c, "orders", &streamq.PartitionedQueueConfig{Queue: &qc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.pq.SetPartitions(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := e.pq.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if e.p, err = streamq.NewPartitionedProducer(e.pq, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestPartitioned_ReadsAsOneQueue(t *testing.T) {
	t.Parallel()
	e := partSetup(t, 3)
	c, prefix, pq, p := e.c, e.prefix, e.pq, e.p
	ctx := context.Background()
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

// TestPartitioned_JobByPartitionID finds, shows and cancels jobs by the
// IDs the partitioned producer returned: one that names its partition
// talks to that partition alone, a chosen ID to the partition of its hash;
// a bare ID from before is still found by asking the partitions in turn.
func TestPartitioned_JobByPartitionID(t *testing.T) {
	t.Parallel()
	e := partSetup(t, 8)
	ctx := context.Background()
	var ids []string
	for i := range 8 {
		id, err := e.p.Enqueue(ctx, []byte("job-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	chosen, err := e.p.Enqueue(ctx, []byte("chosen"), streamq.WithJobID("invoice-42"))
	if err != nil || chosen != "invoice-42" {
		t.Fatalf("Enqueue WithJobID = %q, %v; want invoice-42", chosen, err)
	}
	c := redistest.NewClient(t)
	tags := &redistest.Tags{}
	c.AddHook(tags)
	in, err := inspect.New(c, &inspect.Options{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	pi, err := in.Partitioned(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var se *inspect.StateError
	for _, id := range append(ids, chosen) {
		for verb, call := range map[string]func() error{
			"Job": func() error {
				j, err := pi.Job(ctx, id)
				if err == nil && (j.ID != id || j.State != inspect.StateWaiting) {
					err = fmt.Errorf("job %s in state %s", j.ID, j.State)
				}
				return err
			},
			// A waiting job is found, and not cancelled: only running ones are.
			"Cancel": func() error {
				if err := pi.Cancel(ctx, id); !errors.As(err, &se) {
					return fmt.Errorf("%w, want a *StateError", err)
				}
				return nil
			},
		} {
			tags.Start()
			err := call()
			got, cmds := tags.Stop()
			if err != nil {
				t.Fatalf("%s(%s): %v", verb, id, err)
			}
			if len(got) != 1 || !strings.HasPrefix(got[0], "{orders") {
				t.Fatalf("%s(%s) sent %d commands naming %v, want one partition", verb, id, cmds, got)
			}
			if k, _, named := strings.Cut(id, "~"); named && got[0] != "{orders#"+strings.TrimPrefix(k, "p")+"}" && !(k == "p0" && got[0] == "{orders}") {
				t.Fatalf("%s(%s) asked partition %s", verb, id, got[0])
			}
		}
	}
	// Bare IDs, as producers returned them before IDs named partitions. Two
	// partitions may hold the same entry ID (jobs of one millisecond): a
	// bare ID finds one of them, which may be the job with the chosen ID
	// (found by its entry ID, shown by its chosen one).
	for _, id := range ids {
		_, bare, _ := strings.Cut(id, "~")
		if j, err := pi.Job(ctx, bare); err != nil || (!strings.HasSuffix(j.ID, "~"+bare) && j.ID != chosen) {
			t.Fatalf("Job(%s) of a bare ID: %v, %v; want a job p<k>~%s", bare, j, err, bare)
		}
	}
}

// TestPartitioned_CompletedJobs: completed jobs of every partition are
// listed newest first by finish time across pages, each once, and the
// overview sums their count.
func TestPartitioned_CompletedJobs(t *testing.T) {
	t.Parallel()
	e := partSetupQueue(t, 3, streamq.QueueConfig{CompletedRetention: time.Hour})
	ctx := context.Background()
	const n = 30
	for i := range n {
		if _, err := e.p.Enqueue(ctx, []byte("job-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	var ran atomic.Int64
	w, err := streamq.NewPartitionedWorker(e.pq, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		ran.Add(1)
		return nil
	}), &streamq.PartitionedWorkerConfig{Concurrency: 1, Consumer: &streamq.ConsumerConfig{Block: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(e.c, &inspect.Options{Prefix: e.prefix})
	if err != nil {
		t.Fatal(err)
	}
	pi, err := in.Partitioned(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "worker", 20*time.Second, w.Run)
	redistest.WaitFor(t, 15*time.Second, "every job completed and recorded", func() bool {
		o, err := pi.Overview(ctx)
		return err == nil && o.Completed == n
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	var all []inspect.Job
	cursor := ""
	for range 100 {
		p, err := pi.Jobs(ctx, inspect.ListOptions{State: inspect.StateCompleted, Limit: 4, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Jobs) > 4 {
			t.Fatalf("a page of %d jobs, want at most 4", len(p.Jobs))
		}
		all = append(all, p.Jobs...)
		if cursor = p.Cursor; cursor == "" {
			break
		}
	}
	seen := map[string]bool{}
	parts := map[string]bool{}
	for i, j := range all {
		if j.State != inspect.StateCompleted || seen[string(j.Payload)] {
			t.Errorf("job %s (%q): state %s, or listed twice", j.ID, j.Payload, j.State)
		}
		seen[string(j.Payload)] = true
		parts[j.Queue] = true
		if i > 0 && all[i-1].FinishedAt.Before(j.FinishedAt) {
			t.Errorf("job %d finished at %v, after the job before it (%v): want newest first", i, j.FinishedAt, all[i-1].FinishedAt)
		}
	}
	if len(all) != n || len(parts) != 3 {
		t.Errorf("listed %d completed jobs from %d partitions, want %d from 3", len(all), len(parts), n)
	}
}
