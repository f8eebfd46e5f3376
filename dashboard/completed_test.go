package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/dashboard"
	"github.com/streamq/streamq/internal/redistest"
)

// completedQueue adds queue "done" to f, whose consumer keeps completed
// jobs and runs one at a time (they finish in order), runs payloads
// through it and returns it and their IDs once all completed.
func completedQueue(t testing.TB, f *fixture, payloads ...string) (*streamq.Queue, []string) {
	t.Helper()
	ctx := context.Background()
	q, err := streamq.NewQueue(f.rdb, "done", &streamq.QueueConfig{KeyPrefix: f.prefix, CompletedRetention: time.Hour, CompletedMax: 100})
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, pl := range payloads {
		id, err := p.Enqueue(ctx, []byte(pl), streamq.WithKind("report.<b>build</b>"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }), &streamq.ConsumerConfig{Block: 10 * time.Millisecond, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "consumer of done", 10*time.Second, c.Run)
	redistest.WaitFor(t, waitTimeout, "the completed jobs", func() bool {
		return f.rdb.ZCard(ctx, f.prefix+":{done}:completed").Val() == int64(len(payloads))
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.HSet(ctx, f.prefix+":queues", "done", "stream").Err(); err != nil {
		t.Fatal(err)
	}
	return q, ids
}

func TestDashboard_Completed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	big := strings.Repeat("x", streamq.CompletedPayloadMax+1)
	q, ids := completedQueue(t, f, `{"to":"<script>alert(1)</script>","note":"a`+"\u202e"+`b"}`, big)
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))

	page := c.mustGet("/queues/done?state=completed", `data-state="completed"`, `id="completed-note"`, "Completed jobs are kept for 1h", "the newest 100 at most",
		"report.&lt;b&gt;build&lt;/b&gt;", "&lt;script&gt;alert(1)&lt;/script&gt;", ids[0], ids[1])
	for _, raw := range []string{"<script>alert(1)", "<b>build</b>", "\u202e"} {
		if strings.Contains(page.Body, raw) {
			t.Errorf("the completed tab shows %q raw", raw)
		}
	}
	if strings.Index(page.Body, ids[1]) > strings.Index(page.Body, ids[0]) {
		t.Errorf("the completed tab lists %s before %s: want the newest first", ids[0], ids[1])
	}
	c.mustGet("/queues/done/jobs/"+escapeID(ids[0]), `id="job-state">completed`, "Finished", "ran ")
	// Once its acknowledged entry is trimmed, a job is its record alone.
	if _, err := q.Trim(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mustGet("/queues/done/jobs/"+escapeID(ids[1]), `id="payload-not-kept"`, "not kept: completed jobs keep payloads up to 1024 bytes")
	c.mustGet("/queues/idle?state=completed", `id="completed-note"`, "Completed jobs are not kept; set CompletedRetention")
	c.mustGet("/", `href="/queues/done?state=completed">2</a>`)
	if r := c.get("/queues/done?state=completed&header=a%3Db"); r.Status != 400 || !strings.Contains(r.Body, "completed jobs keep no headers or tags") {
		t.Errorf("a header search of completed jobs: status %d, want 400 saying why; body:\n%s", r.Status, r.Body)
	}
}
