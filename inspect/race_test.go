package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

// runs counts the runs of each payload.
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) add(p string) {
	r.mu.Lock()
	r.n[p]++
	r.mu.Unlock()
}

func (r *runs) get(p string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[p]
}

func consume(t *testing.T, e *env, r *runs) *redistest.Runner {
	t.Helper()
	h := streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
		r.add(string(m.Payload))
		return nil
	})
	c, err := streamq.NewConsumer(e.q, h, &streamq.ConsumerConfig{Concurrency: 4, Block: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return redistest.Background(t, "consumer", 10*time.Second, c.Run)
}

// A consumer reads while waiting jobs are deleted: each job either runs or
// is deleted, never both, never neither.
func TestQueue_DeleteWhileConsuming(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	const n = 400
	ids := make([]string, n)
	for i := range ids {
		ids[i] = e.enqueue(t, fmt.Sprint("job-", i))
	}
	r := &runs{n: map[string]int{}}
	cons := consume(t, e, r)
	deleted := make([]bool, n)
	for i := n - 1; i >= 0; i-- { // from the back, so the two meet in the middle
		err := e.iq.Delete(ctx, ids[i])
		var se *inspect.StateError
		switch {
		case err == nil:
			deleted[i] = true
		case errors.As(err, &se) && (se.State == inspect.StateRunning || se.State == inspect.StateDone):
		default:
			t.Fatalf("Delete(%s): %v", ids[i], err)
		}
	}
	redistest.WaitFor(t, 10*time.Second, "the queue to drain", func() bool {
		o, err := e.iq.Overview(ctx)
		return err == nil && o.Waiting == 0 && o.Running == 0
	})
	if err := cons.Stop(); err != nil {
		t.Fatal(err)
	}
	nd := 0
	for i := range ids {
		got := r.get(fmt.Sprint("job-", i))
		if deleted[i] {
			nd++
		}
		if (deleted[i] && got != 0) || (!deleted[i] && got != 1) {
			t.Errorf("job %d: deleted %v, ran %d times", i, deleted[i], got)
		}
	}
	t.Logf("%d of %d jobs deleted, the others ran", nd, n)
	if nd == 0 || nd == n {
		t.Logf("no overlap between the consumer and the deletes this run")
	}
}

// Dead letters are requeued by two callers at once while a consumer runs:
// each letter is requeued once and its job runs once.
func TestQueue_RequeueDeadWhileConsuming(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	const n = 300
	for i := range n {
		e.addDead(t, fmt.Sprint("job-", i), "permanent", "boom")
	}
	r := &runs{n: map[string]int{}}
	cons := consume(t, e, r)
	var total atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := e.iq.RequeueDead(ctx, inspect.DeadFilter{Reason: "permanent"}, nil)
			if err != nil {
				t.Error(err)
			}
			total.Add(int64(got))
		}()
	}
	wg.Wait()
	if total.Load() != n {
		t.Errorf("requeued %d in all, want %d", total.Load(), n)
	}
	redistest.WaitFor(t, 10*time.Second, "every requeued job to run", func() bool {
		for i := range n {
			if r.get(fmt.Sprint("job-", i)) == 0 {
				return false
			}
		}
		return true
	})
	if err := cons.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if got := r.get(fmt.Sprint("job-", i)); got != 1 {
			t.Errorf("job %d ran %d times", i, got)
		}
	}
}
