package priority_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
)

func TestWorker_UnderStreamqWorker(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	sq, err := streamq.NewQueue(e.rdb, redistest.Name(t)+"-s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sq.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteQueueKeys(sq) })
	sp, err := streamq.NewProducer(sq, nil)
	if err != nil {
		t.Fatal(err)
	}

	const n = 30
	var jobs []priority.Job
	for i := range n {
		jobs = append(jobs, priority.Job{Priority: i % 10, Payload: []byte(strconv.Itoa(i))})
	}
	if _, err := e.pq.PushBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := sp.Enqueue(ctx, []byte("s"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var prios []int
	streamed := 0
	done := make(chan struct{}, 2*n+1)
	ph := streamq.HandlerFunc(func(_ context.Context, msg *streamq.Message) error {
		p, ok := priority.Of(msg)
		if !ok {
			t.Errorf("priority job %s has no priority header", msg.ID)
		}
		mu.Lock()
		prios = append(prios, p)
		mu.Unlock()
		done <- struct{}{}
		return nil
	})
	sh := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		mu.Lock()
		streamed++
		mu.Unlock()
		done <- struct{}{}
		return nil
	})
	// One job of the priority queue at a time, so that their order shows.
	pw := e.newWorker(t, ph, priority.WorkerConfig{Concurrency: 1, ControlInterval: streamq.MinControlInterval})
	sc, err := streamq.NewConsumer(sq, sh, &streamq.ConsumerConfig{Block: 100 * time.Millisecond, ControlInterval: streamq.MinControlInterval})
	if err != nil {
		t.Fatal(err)
	}
	w, err := streamq.NewWorker(streamq.WorkerConfig{Concurrency: 4, Queues: []streamq.WorkerQueue{
		{Source: pw, Weight: 2},
		{Source: sc, Weight: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "streamq.Worker.Run", waitTimeout, w.Run)
	waitN := func(k int, what string) {
		t.Helper()
		deadline := time.After(waitTimeout)
		for i := range k {
			select {
			case <-done:
			case <-deadline:
				t.Fatalf("%d of %d %s ran", i, k, what)
			}
		}
	}
	waitN(2*n, "jobs")
	// A job pushed while the worker waits for work wakes it.
	if _, err := e.pq.Push(ctx, priority.Job{Priority: 5, Payload: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	waitN(1, "late jobs")

	mu.Lock()
	defer mu.Unlock()
	if streamed != n {
		t.Errorf("%d stream jobs ran, want %d", streamed, n)
	}
	for i := 1; i < n; i++ {
		if prios[i] > prios[i-1] {
			t.Fatalf("priority jobs ran out of order: %v", prios[:n])
		}
	}
	if st := pw.Stats(); st.Processed != n+1 {
		t.Errorf("priority worker's Stats = %+v, want %d processed", st, n+1)
	}
	if st := w.Stats(); st.Processed != 2*n+1 {
		t.Errorf("Worker.Stats = %+v, want %d processed", st, 2*n+1)
	}
	if h := w.Health(); !h.Running || !h.Fetching || h.Concurrency != 4 {
		t.Errorf("Worker.Health = %+v", h)
	}
}
