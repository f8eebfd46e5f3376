package dashboard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/dashboard"
)

// TestQueuePage_KindAndTag: a queue page with typed jobs shows their kind
// in a column and filters by kind and tag; the job page shows both; a page
// without typed jobs has no Kind column.
func TestQueuePage_KindAndTag(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := context.Background()
	p, err := streamq.NewProducer(f.idle, nil)
	if err != nil {
		t.Fatal(err)
	}
	mail, err := p.Enqueue(ctx, []byte(`{"to":"ada"}`), streamq.WithKind("email.send"), streamq.Tags("tenant:7", "vip"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, []byte(`{"url":"x"}`), streamq.WithKind("image.resize"), streamq.Tags("tenant:8")); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	c.mustGet("/queues/idle", "<th>Kind</th>", `<td class="kind">email.send</td>`, `<td class="kind">image.resize</td>`)
	r := c.mustGet("/queues/idle?kind=email.send", `<td class="kind">email.send</td>`, `value="email.send"`)
	if strings.Contains(r.Body, "image.resize") || strings.Contains(r.Body, f.waiting[0]) {
		t.Errorf("kind filter kept other jobs:\n%s", r.Body)
	}
	r = c.mustGet("/queues/idle?tag=tenant%3A8", "image.resize")
	if strings.Contains(r.Body, `<td class="kind">email.send</td>`) {
		t.Errorf("tag filter kept other jobs:\n%s", r.Body)
	}
	c.mustGet("/queues/idle?kind=nope", "match the search")
	c.mustGet("/queues/idle/jobs/"+escapeID(mail), `<code id="job-kind">email.send</code>`, "<code>tenant:7</code>, <code>vip</code>")
	if r := c.mustGet("/queues/work"); strings.Contains(r.Body, "<th>Kind</th>") {
		t.Error("a page without typed jobs shows a Kind column")
	}
}
