package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
)

// TestCLI_Completed lists the completed jobs of a queue that keeps them
// (newest first, one per page with the next-page command), shows one, and
// says so for a queue that keeps none.
func TestCLI_Completed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	q, err := streamq.NewQueue(e.rdb, "mail", &streamq.QueueConfig{KeyPrefix: e.prefix, CompletedRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, payload := range []string{`{"to":"ada"}`, `{"to":"bob"}`} {
		id, err := p.Enqueue(ctx, []byte(payload), streamq.WithKind("mail.send"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }), &streamq.ConsumerConfig{Concurrency: 1, Block: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "consumer", 10*time.Second, c.Run)
	redistest.WaitFor(t, 10*time.Second, "two completed jobs", func() bool {
		return e.rdb.ZCard(ctx, e.keys("mail").Completed()).Val() == 2
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	off := mustQueue(t, e.rdb, e.prefix, "plain")
	if err := off.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	e.rdb.HSet(ctx, e.prefix+":queues", "mail", "stream", "plain", "stream")

	golden(t, "jobs_completed", e.ok("jobs", "mail", "--state", "completed", "--json"))
	golden(t, "job_completed", e.ok("job", "mail", ids[0], "--json"))
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"jobs", "mail", "--state", "completed", "--limit", "1"}, []string{"completed", "mail.send", "done ", "more: streamq jobs mail --state completed --limit 1 --cursor '"}},
		{[]string{"job", "mail", ids[1]}, []string{"completed", "Finished", "Ran for", `"to": "bob"`}},
		{[]string{"jobs", "plain", "--state", "completed"}, []string{"no completed jobs", "set QueueConfig.CompletedRetention"}},
	} {
		out := e.ok(c.args...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("streamq %s: output lacks %q:\n%s", strings.Join(c.args, " "), w, out)
			}
		}
	}
	if out := e.ok("jobs", "mail", "--state", "completed", "--limit", "1"); !strings.Contains(out, ids[1]) || strings.Contains(out, ids[0]) {
		t.Errorf("first page of one: want the newest job %s only:\n%s", ids[1], out)
	}
}
