package integration

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
)

func TestUnique_ConcurrentEnqueuesOneWins(t *testing.T) {
	t.Parallel()
	rdb, q, p := cqSetup(t, nil)
	ctx := context.Background()
	var wg sync.WaitGroup
	var ok, dup atomic.Int64
	ids := make([]string, 20)
	start := make(chan struct{})
	for i := range 20 {
		wg.Go(func() {
			<-start
			id, err := p.Enqueue(ctx, []byte("charge"), streamq.Unique("invoice:42", time.Minute))
			ids[i] = id
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, streamq.ErrDuplicate):
				dup.Add(1)
			default:
				t.Errorf("enqueue %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != 1 || dup.Load() != 19 {
		t.Fatalf("%d enqueues succeeded and %d were duplicates, want 1 and 19", ok.Load(), dup.Load())
	}
	for i, id := range ids {
		if id != ids[0] {
			t.Errorf("enqueue %d returned ID %q, want the one job's ID %q", i, id, ids[0])
		}
	}
	if n, _ := rdb.XLen(ctx, q.StreamKey()).Result(); n != 1 {
		t.Errorf("stream holds %d jobs, want 1", n)
	}
}

func TestUnique_LockReleasedWhenJobFinishes(t *testing.T) {
	t.Parallel()
	_, q, p := cqSetup(t, nil)
	ctx := context.Background()
	release := make(chan struct{})
	var runs atomic.Int64
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		if m.Key != "report:7" {
			return streamq.Permanent(errors.New("unique key not delivered with the job"))
		}
		if runs.Add(1) == 1 {
			<-release
		}
		return nil
	}), fastConsumer(streamq.ConsumerConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	stop := cqRun(t, c)

	first, err := p.Enqueue(ctx, []byte("r"), streamq.Unique("report:7", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "job running", func() bool { return runs.Load() == 1 })
	// Still running: a second enqueue is a duplicate and names the first job.
	id, err := p.Enqueue(ctx, []byte("r"), streamq.Unique("report:7", time.Minute))
	if !errors.Is(err, streamq.ErrDuplicate) || id != first {
		t.Fatalf("enqueue while running: id %q err %v, want %q and ErrDuplicate", id, err, first)
	}
	close(release)
	redistest.WaitFor(t, 5*time.Second, "job acknowledged", func() bool { return c.Stats().Processed == 1 })
	// Finished: the key is free again.
	var second string
	redistest.WaitFor(t, 5*time.Second, "unique key released", func() bool {
		second, err = p.Enqueue(ctx, []byte("r"), streamq.Unique("report:7", time.Minute))
		return err == nil
	})
	if second == first {
		t.Fatal("second job got the first job's ID")
	}
	redistest.WaitFor(t, 5*time.Second, "second job handled", func() bool { return c.Stats().Processed == 2 })
	stop()
}

func TestUnique_ReleasedOnDeadLetterAndExpiry(t *testing.T) {
	t.Parallel()
	_, q, p := cqSetup(t, nil)
	ctx := context.Background()
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		return streamq.Permanent(errors.New("cannot do this"))
	}), fastConsumer(streamq.ConsumerConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	stop := cqRun(t, c)
	if _, err := p.Enqueue(ctx, []byte("x"), streamq.Unique("k", time.Minute)); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "job dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	redistest.WaitFor(t, 5*time.Second, "unique key released after dead letter", func() bool {
		_, err := p.Enqueue(ctx, []byte("x"), streamq.Unique("k", time.Minute))
		return err == nil
	})
	stop()

	// A delayed unique job holds its key while it waits; the TTL frees it.
	id, err := p.Enqueue(ctx, []byte("later"), streamq.Unique("ttl", 200*time.Millisecond), streamq.ProcessIn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, []byte("later"), streamq.Unique("ttl", time.Minute)); !errors.Is(err, streamq.ErrDuplicate) {
		t.Fatalf("second enqueue while the delayed job waits: %v, want ErrDuplicate", err)
	}
	redistest.WaitFor(t, 5*time.Second, "unique key expired", func() bool {
		_, err := p.Enqueue(ctx, []byte("later"), streamq.Unique("ttl", time.Minute))
		return err == nil
	})
	if ok, err := q.Cancel(ctx, id); err != nil || !ok {
		t.Errorf("cancel the delayed job: %v %v", ok, err)
	}
}
