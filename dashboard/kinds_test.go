package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/dashboard"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/periodic"
	"github.com/streamq/streamq/priority"
	"github.com/streamq/streamq/writebehind"
)

// TestPages_PriorityWriteBehindSchedules shows the pages of a priority
// queue, a write-behind queue and a periodic schedule, each fed by its real
// component.
func TestPages_PriorityWriteBehindSchedules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.NewClient(t)
	prefix := redistest.Name(t)
	redistest.DeleteKeysAtCleanup(t, rdb, prefix+":*")
	open := func(name string) *streamq.Queue {
		q, err := streamq.NewQueue(rdb, name, &streamq.QueueConfig{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}

	// A priority queue with jobs in three bands.
	pq, err := priority.NewQueue(open("urgent"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{1, 5, 5, 9, 9, 9} {
		if _, err := pq.Push(ctx, priority.Job{Priority: p, Payload: []byte(`{"p":true}`)}); err != nil {
			t.Fatal(err)
		}
	}

	// A write-behind queue with changes not yet persisted (no consumer).
	cq := open("cache")
	if err := cq.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := writebehind.NewWriter(cq, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The Writer registers its queue (issue 18); set the registry here too so
	// the test does not depend on when it does.
	if err := rdb.HSet(ctx, prefix+":writebehind", "cache", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"user:1", "user:2", "user:3"} {
		if _, err := w.Set(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}

	// A schedule that ticks every second.
	tq := open("ticks")
	if err := tq.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	prod, err := streamq.NewProducer(tq, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := periodic.New(prod, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterInterval("heartbeat", time.Second, []byte("beat")); err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "scheduler", 10*time.Second, s.Run)

	h, err := dashboard.New(rdb, &dashboard.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, h)
	redistest.WaitFor(t, waitTimeout, "the three queues in the overview", func() bool {
		r := c.get("/")
		return strings.Contains(r.Body, `data-queue="urgent"`) && strings.Contains(r.Body, `data-queue="cache"`) && strings.Contains(r.Body, `data-queue="ticks"`)
	})
	c.mustGet("/", ">priority<", "write-behind")
	r := c.mustGet("/queues/urgent/priority", `<svg class="bars"`, "priority 9", "priority 5", "priority 1")
	if !strings.Contains(r.Body, `<td class="n">9</td><td class="n">3</td>`) {
		t.Errorf("the priority page does not count 3 jobs of priority 9:\n%s", r.Body)
	}
	c.mustGet("/queues/urgent", "Priorities")
	c.mustGet("/queues/cache/writebehind", `<b id="wb-unpersisted">3</b>`, "No sink errors")
	redistest.WaitFor(t, waitTimeout, "a tick of the schedule", func() bool {
		r := c.get("/schedules")
		return strings.Contains(r.Body, "heartbeat") && strings.Contains(r.Body, "ticks")
	})
}
