package integration

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
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
	if n, _ := rdb.XLen(ctx, core.Of(q).Keys.Stream).Result(); n != 1 {
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
	if ok, err := q.CancelDelayed(ctx, id); err != nil || !ok {
		t.Errorf("cancel the delayed job: %v %v", ok, err)
	}
}

// TestUnique_CancelReleasesKey checks that Queue.Cancel frees the unique key
// of the delayed job it removes, and only that job's lock.
func TestUnique_CancelReleasesKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("delayed unique job", func(t *testing.T) {
		t.Parallel()
		rdb, q, p := cqSetup(t, nil)
		id, err := p.Enqueue(ctx, []byte("a"), streamq.Unique("k", time.Hour), streamq.ProcessIn(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if dup, err := p.Enqueue(ctx, []byte("a"), streamq.Unique("k", time.Hour)); !errors.Is(err, streamq.ErrDuplicate) || dup != id {
			t.Fatalf("enqueue while the delayed job waits: id %q err %v, want %q and ErrDuplicate", dup, err, id)
		}
		if ok, err := q.CancelDelayed(ctx, id); err != nil || !ok {
			t.Fatalf("Cancel = %v, %v; want true", ok, err)
		}
		if n := rdb.Exists(ctx, core.Of(q).Keys.Part("unique:k")).Val(); n != 0 {
			t.Fatal("the lock is still there after Cancel")
		}
		next, err := p.Enqueue(ctx, []byte("b"), streamq.Unique("k", time.Hour))
		if err != nil {
			t.Fatalf("enqueue after Cancel: %v, want the key to be free", err)
		}
		if next == id {
			t.Fatalf("new job got the cancelled job's ID %q", id)
		}
		// A second Cancel of the same ID finds nothing and leaves the new
		// job's lock alone.
		if ok, err := q.CancelDelayed(ctx, id); err != nil || ok {
			t.Fatalf("second Cancel = %v, %v; want false", ok, err)
		}
		if dup, err := p.Enqueue(ctx, []byte("c"), streamq.Unique("k", time.Hour)); !errors.Is(err, streamq.ErrDuplicate) || dup != next {
			t.Fatalf("enqueue after the second Cancel: id %q err %v, want %q and ErrDuplicate", dup, err, next)
		}
	})

	t.Run("job without unique key", func(t *testing.T) {
		t.Parallel()
		rdb, q, p := cqSetup(t, nil)
		id, err := p.Enqueue(ctx, []byte("plain"), streamq.ProcessIn(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := q.CancelDelayed(ctx, id); err != nil || !ok {
			t.Fatalf("Cancel = %v, %v; want true", ok, err)
		}
		st, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Delayed != 0 || st.Length != 0 {
			t.Fatalf("stats %+v after Cancel: want nothing delayed and an empty stream", st)
		}
		if n := rdb.HLen(ctx, core.Of(q).Keys.Part("delayed:jobs")).Val(); n != 0 {
			t.Fatalf("%d delayed job bodies left after Cancel", n)
		}
	})

	t.Run("lock taken by a newer job", func(t *testing.T) {
		t.Parallel()
		_, q, p := cqSetup(t, nil)
		// The old job's lock expires while the job still waits; a newer job
		// then takes the key with its own token.
		old, err := p.Enqueue(ctx, []byte("old"), streamq.Unique("k", time.Millisecond), streamq.ProcessIn(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var newer string
		redistest.WaitFor(t, 5*time.Second, "the old job's lock expired and a newer job took the key", func() bool {
			newer, err = p.Enqueue(ctx, []byte("newer"), streamq.Unique("k", time.Hour), streamq.ProcessIn(time.Hour))
			return err == nil
		})
		// Cancelling the old job removes it but must not release the newer
		// job's lock.
		if ok, err := q.CancelDelayed(ctx, old); err != nil || !ok {
			t.Fatalf("Cancel(old) = %v, %v; want true", ok, err)
		}
		if dup, err := p.Enqueue(ctx, []byte("third"), streamq.Unique("k", time.Hour)); !errors.Is(err, streamq.ErrDuplicate) || dup != newer {
			t.Fatalf("enqueue after cancelling the old job: id %q err %v, want the newer job %q and ErrDuplicate", dup, err, newer)
		}
		if ok, err := q.CancelDelayed(ctx, newer); err != nil || !ok {
			t.Fatalf("Cancel(newer) = %v, %v; want true", ok, err)
		}
		if _, err := p.Enqueue(ctx, []byte("third"), streamq.Unique("k", time.Hour), streamq.ProcessIn(time.Hour)); err != nil {
			t.Fatalf("enqueue after cancelling the newer job: %v, want the key to be free", err)
		}
	})

	// Once the scheduler has moved a delayed unique job into the stream,
	// the job and its lock keep its ID (a new stream entry carries it);
	// CancelDelayed no longer finds it delayed and leaves the lock to the
	// running job.
	t.Run("job already moved into the stream", func(t *testing.T) {
		t.Parallel()
		_, q, p := cqSetup(t, nil)
		started := make(chan *streamq.Message, 1)
		release := make(chan struct{})
		c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
			started <- m
			<-release
			return nil
		}), fastConsumer(streamq.ConsumerConfig{Concurrency: 1, SchedulerInterval: 10 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		stop := cqRun(t, c)
		defer stop()
		var once sync.Once
		unblock := func() { once.Do(func() { close(release) }) }
		defer unblock() // let the handler return before stop waits for it

		id, err := p.Enqueue(ctx, []byte("soon"), streamq.Unique("k", time.Hour), streamq.ProcessIn(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var m *streamq.Message
		select {
		case m = <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the delayed job did not run within 10s")
		}
		if m.ID != id || m.EntryID == id {
			t.Fatalf("running copy: ID %q, EntryID %q; want the ID %q and a stream entry ID of its own", m.ID, m.EntryID, id)
		}
		dup, err := p.Enqueue(ctx, []byte("soon"), streamq.Unique("k", time.Hour))
		if !errors.Is(err, streamq.ErrDuplicate) || dup != id {
			t.Fatalf("enqueue while the job runs: id %q err %v, want the job's ID %q and ErrDuplicate", dup, err, id)
		}
		if ok, err := q.CancelDelayed(ctx, dup); err != nil || ok {
			t.Fatalf("Cancel of a job already in the stream = %v, %v; want false", ok, err)
		}
		if _, err := p.Enqueue(ctx, []byte("soon"), streamq.Unique("k", time.Hour)); !errors.Is(err, streamq.ErrDuplicate) {
			t.Fatalf("enqueue after the refused Cancel: %v, want ErrDuplicate (the running job keeps its lock)", err)
		}
		unblock()
		redistest.WaitFor(t, 5*time.Second, "lock released when the job finished", func() bool {
			_, err := p.Enqueue(ctx, []byte("again"), streamq.Unique("k", time.Hour), streamq.ProcessIn(time.Hour))
			return err == nil
		})
	})
}
