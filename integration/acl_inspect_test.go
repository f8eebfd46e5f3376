package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
)

// TestACL_Inspect runs every read and control call of package inspect, on a
// stream queue and a priority queue, as the least-privilege user of
// aclCommands, and checks that Redis denied nothing.
func TestACL_Inspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, rdb := leastPrivilege(t)

	q, err := streamq.NewQueue(rdb, "acl", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(payload string, opts ...streamq.EnqueueOption) string {
		id, err := p.Enqueue(ctx, []byte(payload), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	dead := enqueue("dead")
	cons, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		return streamq.Permanent(errors.New("boom"))
	}), &streamq.ConsumerConfig{Block: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "consumer", 10*time.Second, cons.Run)
	redistest.WaitFor(t, 10*time.Second, "a dead letter", func() bool {
		n, err := q.DeadLetters().Len(ctx)
		return err == nil && n == 1
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	waiting := enqueue("waiting")
	delayed := enqueue("delayed", streamq.ProcessIn(time.Hour))
	pqq, err := streamq.NewQueue(rdb, "aclp", nil)
	if err != nil {
		t.Fatal(err)
	}
	pq, err := priority.NewQueue(pqq, nil)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := pq.Push(ctx, priority.Job{Priority: 3, Payload: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}

	in, err := inspect.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	queues, err := in.Queues(ctx)
	if err != nil || len(queues) != 2 {
		t.Fatalf("Queues = %v, %v", queues, err)
	}
	iq, err := in.Queue(ctx, "acl")
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	_, err = iq.Overview(ctx)
	check("Overview", err)
	_, err = iq.Throughput(ctx, 5)
	check("Throughput", err)
	for _, st := range []inspect.State{inspect.StateWaiting, inspect.StateRunning, inspect.StateDelayed, inspect.StateRetrying, inspect.StateDead, inspect.StateCancelled} {
		_, err = iq.Jobs(ctx, inspect.ListOptions{State: st, Grep: "x"})
		check(fmt.Sprint("Jobs ", st), err)
	}
	for _, id := range []string{waiting, delayed, dead} {
		_, err = iq.Job(ctx, id)
		check("Job "+id, err)
	}
	_, err = iq.Consumers(ctx)
	check("Consumers", err)
	_, err = iq.PruneConsumers(ctx, time.Hour)
	check("PruneConsumers", err)
	_, err = in.Schedules(ctx, "")
	check("Schedules", err)
	_, err = iq.WriteBehind(ctx)
	check("WriteBehind", err)
	check("Pause", iq.Pause(ctx))
	check("Resume", iq.Resume(ctx))
	check("RunNow", iq.RunNow(ctx, delayed))
	check("Delete", iq.Delete(ctx, waiting))
	var se *inspect.StateError
	if err := iq.Cancel(ctx, delayed); !errors.As(err, &se) {
		t.Errorf("Cancel(waiting): %v, want a StateError", err)
	}
	_, err = iq.CountDead(ctx, inspect.DeadFilter{})
	check("CountDead", err)
	_, err = iq.RequeueDead(ctx, inspect.DeadFilter{IDs: []string{dead}}, nil)
	check("RequeueDead", err)
	_, err = iq.PurgeDead(ctx, inspect.DeadFilter{Reason: "nothing"}, nil)
	check("PurgeDead", err)

	pqi, err := in.Queue(ctx, "aclp")
	if err != nil {
		t.Fatal(err)
	}
	if pqi.Kind() != inspect.KindPriority {
		t.Errorf("aclp is %s, want priority", pqi.Kind())
	}
	_, err = pqi.Levels(ctx)
	check("Levels", err)
	_, err = pqi.Overview(ctx)
	check("priority Overview", err)
	if _, err := pq.Push(ctx, priority.Job{Priority: 1, Payload: []byte("p2")}); err != nil {
		t.Fatal(err)
	}
	page, err := pqi.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Limit: 1})
	check("priority Jobs", err)
	if page == nil || page.Cursor == "" {
		t.Fatalf("priority Jobs page %+v: want a cursor", page)
	}
	_, err = pqi.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Cursor: page.Cursor})
	check("priority Jobs after a cursor", err)
	_, err = pqi.Job(ctx, pid)
	check("priority Job", err)
	_, err = pqi.Consumers(ctx)
	check("priority Consumers", err)
	check("priority Delete", pqi.Delete(ctx, pid))

	denied, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(denied) > 0 {
		t.Fatalf("Redis denied %d commands to the least-privilege user (add them to aclCommands and the README, or stop using them):\n%s", len(denied), fmt.Sprint(denied...))
	}
}
