package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/dashboard"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/outbox/sqlite"
	wbsqlite "github.com/streamq/streamq/writebehind/sqlite"
)

// TestFlow_PageAndSet shows a queue's limits, its flow keys and why its
// jobs wait, and replaces the limits through the form, which the audit log
// records.
func TestFlow_PageAndSet(t *testing.T) {
	t.Parallel()
	f, q := idleQueue(t)
	ctx := context.Background()
	if err := q.SetFlowLimits(ctx, inspect.FlowLimits{Global: 7, PerKey: 2, Keys: map[string]int{"customer:42": 5}, Kinds: map[string]int{"report.build": 3}}); err != nil {
		t.Fatal(err)
	}
	var audit logs
	c := newClient(t, newDashboard(t, f, dashboard.Options{AuditLogger: audit.logger()}))
	r := c.mustGet("/queues/idle/flow", `id="flow-global-cap">7<`, "<code>customer:42</code>", "<code>report.build</code>",
		`id="flow-form"`, `name="global" id="flow-global" inputmode="numeric" value="7"`, "customer:42=5\n</textarea>",
		// idle has no consumer: its 5 waiting jobs wait for one, the delayed one for its time.
		`<tr data-reason="delayed"><td><code>delayed</code></td><td class="n">1</td>`,
		`<tr data-reason="no_consumer"><td><code>no_consumer</code></td><td class="n">5</td>`,
		`href="/queues/idle/flow" aria-current="page">Flow</a>`)
	if strings.Contains(r.Body, `data-reason="behind"`) {
		t.Errorf("the summary says jobs wait behind others although no consumer reads:\n%s", r.Body)
	}
	c.mustGet("/queues/idle/flow?partial=1", `id="why-summary"`)

	form := url.Values{"global": {"10"}, "per_key": {"0"}, "rate": {"2.5"}, "keys": {"customer:42=3\r\n\r\n tenant=a = 4 \r\n"},
		"key_rates": {"customer:42=0.5"}, "weights": {"customer:42=3"}, "kinds": {"report.build=1"}, "kind_per_key": {"email.send=1"}}
	r = c.post("/queues/idle/flow", form)
	if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/queues/idle/flow" {
		t.Fatalf("POST limits: status %d, location %q:\n%s", r.Status, r.Header.Get("Location"), r.Body)
	}
	st, err := q.Flow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := inspect.FlowLimits{Global: 10, Rate: 2.5, Keys: map[string]int{"customer:42": 3, "tenant=a": 4}, Rates: map[string]float64{"customer:42": 0.5},
		Weights: map[string]int{"customer:42": 3}, Kinds: map[string]int{"report.build": 1}, KindPerKey: map[string]int{"email.send": 1}}
	if !reflect.DeepEqual(st.Limits, want) {
		t.Errorf("limits after the form:\n got %+v\nwant %+v", st.Limits, want)
	}
	c.mustGet("/queues/idle/flow", `id="flash">Set the flow limits of idle: global cap 10, per-key cap none, per-key rate 2.5/s, 2 key caps`,
		"<code>tenant=a</code>", "0.5/s")
	var got []string
	for _, l := range audit.lines(t, "dashboard: audit") {
		got = append(got, fmt.Sprint(l["level"], " ", l["action"], " ", l["queue"], " ", l["detail"]))
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "INFO flow-limits idle global cap 10, per-key cap none, per-key rate 2.5/s, 2 key caps, 1 key rates") {
		t.Errorf("audit lines: %q", got)
	}
}

// TestFlow_BadInput: each malformed field is refused with 400 and a text
// that says how to write it, and the limits stay as they were.
func TestFlow_BadInput(t *testing.T) {
	t.Parallel()
	f, q := idleQueue(t)
	ctx := context.Background()
	before := inspect.FlowLimits{Global: 4}
	if err := q.SetFlowLimits(ctx, before); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	c.mustGet("/queues/idle/flow")
	for _, tc := range []struct {
		name string
		form url.Values
		want string
	}{
		{"negative global", url.Values{"global": {"-1"}}, `global cap &#34;-1&#34;: use a whole number of jobs`},
		{"words", url.Values{"per_key": {"lots"}}, `per-key cap &#34;lots&#34;`},
		{"rate", url.Values{"rate": {"fast"}}, `per-key rate &#34;fast&#34;: use jobs per second`},
		{"infinite rate", url.Values{"rate": {"Inf"}}, `per-key rate &#34;Inf&#34;`},
		{"key without cap", url.Values{"keys": {"customer:42"}}, `key caps, line 1 &#34;customer:42&#34;: write &lt;flow key&gt;=&lt;cap&gt;, a cap of 1 or more`},
		{"key cap 0", url.Values{"keys": {"a=1\nb=0"}}, `key caps, line 2 &#34;b=0&#34;`},
		{"unnamed key", url.Values{"weights": {"=3"}}, `weights, line 1 &#34;=3&#34;`},
		{"twice", url.Values{"keys": {"a=1\na=2"}}, `key caps, line 2: &#34;a&#34; is given twice`},
		{"rate 0", url.Values{"key_rates": {"a=0"}}, `key rates, line 1 &#34;a=0&#34;: write &lt;flow key&gt;=&lt;jobs per second&gt;, above 0`},
		{"kind with space", url.Values{"kinds": {"report build=1"}}, `kind &#34;report build&#34; holds white space`},
	} {
		r := c.post("/queues/idle/flow", tc.form)
		if r.Status != http.StatusBadRequest || !strings.Contains(r.Body, tc.want) {
			t.Errorf("%s: status %d, want 400 with %q:\n%s", tc.name, r.Status, tc.want, r.Body)
		}
	}
	st, err := q.Flow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Limits, before) {
		t.Errorf("refused forms changed the limits: %+v", st.Limits)
	}
}

// TestFlow_RefusedAndEscaped: a read-only dashboard shows the limits
// without the form and refuses the action; a post without the CSRF token
// is refused; flow keys and kinds are escaped.
func TestFlow_RefusedAndEscaped(t *testing.T) {
	t.Parallel()
	f, q := idleQueue(t)
	ctx := context.Background()
	evil := `<script>alert("k")</script>`
	limits := inspect.FlowLimits{Keys: map[string]int{evil: 2}, Kinds: map[string]int{"<b>kind</b>": 1}}
	if err := q.SetFlowLimits(ctx, limits); err != nil {
		t.Fatal(err)
	}
	ro := newClient(t, newDashboard(t, f, dashboard.Options{ReadOnly: true}))
	r := ro.mustGet("/queues/idle/flow", "&lt;script&gt;alert(&#34;k&#34;)&lt;/script&gt;", "&lt;b&gt;kind&lt;/b&gt;", "streamq flow set idle")
	for _, bad := range []string{evil, "<b>kind", `id="flow-form"`} {
		if strings.Contains(r.Body, bad) {
			t.Errorf("read-only flow page holds %q:\n%s", bad, r.Body)
		}
	}
	if r := ro.post("/queues/idle/flow", url.Values{"global": {"1"}, "csrf": {"x"}}); r.Status != http.StatusForbidden {
		t.Errorf("read-only POST: status %d, want 403", r.Status)
	}
	rw := newClient(t, newDashboard(t, f, dashboard.Options{}))
	r = rw.mustGet("/queues/idle/flow", "&lt;script&gt;alert(&#34;k&#34;)&lt;/script&gt;=2\n</textarea>")
	if strings.Contains(r.Body, evil) {
		t.Errorf("flow page holds the raw key:\n%s", r.Body)
	}
	if r := rw.post("/queues/idle/flow", url.Values{"global": {"1"}, "csrf": {"0123"}}); r.Status != http.StatusForbidden {
		t.Errorf("POST with a bad CSRF token: status %d, want 403", r.Status)
	}
	st, err := q.Flow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Limits, limits) {
		t.Errorf("refused posts changed the limits: %+v", st.Limits)
	}
}

// TestJob_Why: the page of a job that has not started says why, with the
// evidence; a running job's page has no reasons.
func TestJob_Why(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	ctx := context.Background()
	c := newClient(t, newDashboard(t, f, dashboard.Options{HidePayloads: true}))
	c.mustGet("/queues/idle/jobs/"+escapeID(f.waiting[2]), `id="job-why"`, `<tr data-reason="behind"><th><code>behind</code></th><td>behind 2 jobs in the stream</td>`,
		`data-reason="no_consumer"`)
	c.mustGet("/queues/work/jobs/"+escapeID(f.retrying), `data-reason="retry_backoff"`, "attempt 1 failed; the retry is due at")
	r := c.mustGet("/queues/work/jobs/" + escapeID(f.running))
	if strings.Contains(r.Body, "job-why") {
		t.Errorf("a running job's page says why it waits:\n%s", r.Body)
	}
	idle, err := f.in.Queue(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	c.mustGet("/queues/idle/jobs/"+escapeID(f.waiting[0])+"?partial=1", `data-reason="paused"`, "the queue is paused")
	// Without HidePayloads, the retry's reason quotes the attempt's error.
	open := newClient(t, newDashboard(t, f, dashboard.Options{}))
	open.mustGet("/queues/work/jobs/"+escapeID(f.retrying), "upstream said 503")
	if r := c.get("/queues/work/jobs/" + escapeID(f.retrying)); strings.Contains(r.Body, "upstream said 503") {
		t.Errorf("with HidePayloads the retry's reason shows the error:\n%s", r.Body)
	}
}

// TestPartitions_Page lists a partitioned queue's partitions with their
// counts and sum, linked from the overview.
func TestPartitions_Page(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := context.Background()
	partitioned(t, f, "shard", 3, 12)
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	r := c.mustGet("/", `<a class="badge" href="/queues/shard/partitions">partitioned</a>`, `<a class="badge" href="/queues/shard/partitions">partition of shard</a>`)
	if strings.Contains(r.Body, `href="/queues/idle/partitions"`) {
		t.Errorf("the overview marks idle as partitioned:\n%s", r.Body)
	}
	c.mustGet("/queues/shard/partitions", `<b id="partitions-write">3</b> partitions`, `<tr data-partition="2">`, `href="/queues/shard%232"`,
		`id="partitions-total"><th class="n">all</th><th>shard</th><td class="n">12</td>`)
	c.mustGet("/queues/idle/partitions", "is not partitioned", `<tr data-partition="0">`)
	c.mustGet("/queues/shard%231/partitions", "is not partitioned")
	if r := c.get("/queues/nosuch/partitions"); r.Status != http.StatusNotFound {
		t.Errorf("partitions of an unknown queue: status %d, want 404", r.Status)
	}
	// Lowered: the dropped partitions drain.
	pq, err := streamq.NewPartitionedQueue(f.rdb, "shard", &streamq.PartitionedQueueConfig{Queue: &streamq.QueueConfig{KeyPrefix: f.prefix}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pq.SetPartitions(ctx, 2); err != nil {
		t.Fatal(err)
	}
	c.mustGet("/queues/shard/partitions?partial=1", "partitions 2 to 2 drain", `<span class="badge">draining</span>`)
}

// partitioned makes the queue name of the fixture's prefix with n
// partitions and enqueues jobs into it, spread by partition key.
func partitioned(t testing.TB, f *fixture, name string, n, jobs int) {
	t.Helper()
	ctx := context.Background()
	pq, err := streamq.NewPartitionedQueue(f.rdb, name, &streamq.PartitionedQueueConfig{Queue: &streamq.QueueConfig{KeyPrefix: f.prefix}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pq.SetPartitions(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := pq.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	for k := range n {
		part := name
		if k > 0 {
			part += "#" + strconv.Itoa(k)
		}
		if err := f.rdb.HSet(ctx, f.prefix+":queues", part, "stream").Err(); err != nil {
			t.Fatal(err)
		}
	}
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		if _, err := p.Enqueue(ctx, []byte(`{"n":`+strconv.Itoa(i)+`}`), streamq.PartitionKey("key"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
}

// newOutbox returns an SQLite outbox table with rows committed for queue
// q, one per payload.
func newOutbox(t testing.TB, q *streamq.Queue, payloads ...string) *sqlite.Outbox {
	t.Helper()
	ctx := context.Background()
	db, err := wbsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ob, err := sqlite.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range payloads {
		if _, err := ob.Enqueue(ctx, db, q, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	return ob
}

// TestOutbox_Backlog shows the rows an outbox table holds per queue, on
// its page and in the overview's panel; a table that cannot be read shows
// its error without hiding the others.
func TestOutbox_Backlog(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ob := newOutbox(t, f.idle, "a", "b", "c")
	closedDB, err := wbsqlite.Open(filepath.Join(t.TempDir(), "closed.db"))
	if err != nil {
		t.Fatal(err)
	}
	closed, err := sqlite.New(closedDB, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = closedDB.Close()
	c := newClient(t, newDashboard(t, f, dashboard.Options{Outboxes: []dashboard.Outbox{{Name: "app-db", Store: ob}, {Name: "<gone>", Store: closed}}}))
	c.mustGet("/outbox", `<section class="outbox" data-outbox="app-db">`, `<b class="outbox-rows">3</b>`,
		`<td><a href="/queues/idle">idle</a></td><td class="n">3</td>`, `data-outbox="&lt;gone&gt;"`, `class="error"`,
		`href="/outbox" aria-current="page">Outbox</a>`)
	c.mustGet("/", `id="outbox-panel"`, `<tr data-outbox="app-db"><td><a href="/outbox">app-db</a></td>`+"\n"+`<td class="n">3</td>`)
	plain := newClient(t, newDashboard(t, f, dashboard.Options{}))
	r := plain.mustGet("/outbox", "No outbox table is configured")
	if strings.Contains(r.Body, `href="/outbox"`) {
		t.Errorf("without Outboxes the navigation links the outbox page:\n%s", r.Body)
	}
	if r := plain.mustGet("/"); strings.Contains(r.Body, "outbox-panel") {
		t.Errorf("without Outboxes the overview shows the outbox panel")
	}
	for _, tc := range []struct {
		name string
		obs  []dashboard.Outbox
		want string
	}{
		{"no name", []dashboard.Outbox{{Store: ob}}, "has no Name"},
		{"no store", []dashboard.Outbox{{Name: "x"}}, "has no Store"},
		{"twice", []dashboard.Outbox{{Name: "x", Store: ob}, {Name: "x", Store: ob}}, `holds "x" twice`},
	} {
		if _, err := dashboard.New(f.rdb, &dashboard.Options{Outboxes: tc.obs}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// pagesFixture is what the browser test adds to the fixture for the pages
// of flow control, partitions and the outbox.
type pagesFixture struct {
	outboxes []dashboard.Outbox
	pages    map[string]string // screenshot name -> path
}

// newPagesFixture sets flow limits on "idle", makes the partitioned queue
// "shard" and an outbox table with rows waiting.
func newPagesFixture(t testing.TB, f *fixture) *pagesFixture {
	t.Helper()
	ctx := context.Background()
	q, err := f.in.Queue(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	err = q.SetFlowLimits(ctx, inspect.FlowLimits{Global: 20, PerKey: 2, Rate: 5, Keys: map[string]int{"customer:42": 8, "customer:7": 1},
		Rates: map[string]float64{"customer:42": 20}, Weights: map[string]int{"customer:42": 3}, Kinds: map[string]int{"report.build": 2}, KindPerKey: map[string]int{"email.send": 1}})
	if err != nil {
		t.Fatal(err)
	}
	partitioned(t, f, "shard", 4, 40)
	ob := newOutbox(t, f.idle, "a", "b", "c", "d")
	completedQueue(t, f, `{"report":"daily","rows":1200}`, `{"report":"weekly","rows":8400}`, `{"to":"ada@example.com","template":"welcome"}`)
	return &pagesFixture{
		outboxes: []dashboard.Outbox{{Name: "app-db", Store: ob}},
		pages: map[string]string{"flow": "/queues/idle/flow", "why": "/queues/idle/jobs/" + escapeID(f.waiting[3]),
			"partitions": "/queues/shard/partitions", "outbox": "/outbox", "completed": "/queues/done?state=completed"},
	}
}

// TestFlow_HiddenCharacterKeys: flow keys holding a zero-width space and a
// right-to-left override show escaped, and saving the form as a browser
// posts it keeps them exactly, not their escaped text.
func TestFlow_HiddenCharacterKeys(t *testing.T) {
	t.Parallel()
	f, q := idleQueue(t)
	ctx := context.Background()
	zw, rtl := "customer:\u200b42", "tenant:\u202eevil"
	if err := q.SetFlowLimits(ctx, inspect.FlowLimits{Keys: map[string]int{zw: 5, "plain": 1}, Rates: map[string]float64{rtl: 2}, Weights: map[string]int{rtl: 3}}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	r := c.mustGet("/queues/idle/flow", `customer:\u200b42=5`, `tenant:\u202eevil=2`, `<code>customer:\u200b42</code>`, `name="raw_key"`)
	for _, raw := range []string{"\u200b", "\u202e"} {
		if strings.Contains(r.Body, raw) {
			t.Errorf("the flow page holds %q raw", raw)
		}
	}
	// Post the form as a browser would: every field as the page holds it.
	form := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="raw_key" value="([^"]*)">`).FindAllStringSubmatch(r.Body, -1) {
		form.Add("raw_key", m[1])
	}
	for _, name := range []string{"keys", "key_rates", "weights"} {
		text := regexpFind(t, r.Body, `<textarea name="`+name+`"[^>]*>((?s:[^<]*))</textarea>`)
		form.Set(name, html.UnescapeString(text))
	}
	if r := c.post("/queues/idle/flow", form); r.Status != http.StatusSeeOther {
		t.Fatalf("POST limits: status %d:\n%s", r.Status, r.Body)
	}
	st, err := q.Flow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := inspect.FlowLimits{Keys: map[string]int{zw: 5, "plain": 1}, Rates: map[string]float64{rtl: 2}, Weights: map[string]int{rtl: 3}}
	if !reflect.DeepEqual(st.Limits, want) {
		t.Errorf("limits after saving the form:\n got %#v\nwant %#v", st.Limits, want)
	}
	if r := c.post("/queues/idle/flow", url.Values{"raw_key": {"%%%"}}); r.Status != http.StatusBadRequest || !strings.Contains(r.Body, "reload the flow page") {
		t.Errorf("a malformed raw_key: status %d, want 400 saying what to do:\n%s", r.Status, r.Body)
	}
}

// idleQueue returns a fixture without consumer and the inspector's view
// of its queue "idle".
func idleQueue(t *testing.T) (*fixture, *inspect.Queue) {
	t.Helper()
	f := newFixture(t, false)
	q, err := f.in.Queue(context.Background(), "idle")
	if err != nil {
		t.Fatal(err)
	}
	return f, q
}

// TestPartitions_JobByPartitionID: a job ID that names its partition
// ("p1~…", as a partitioned producer returns it) on the queue's page leads
// to the job's page in that partition.
func TestPartitions_JobByPartitionID(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	partitioned(t, f, "shard", 3, 0)
	pq, err := streamq.NewPartitionedQueue(f.rdb, "shard", &streamq.PartitionedQueueConfig{Queue: &streamq.QueueConfig{KeyPrefix: f.prefix}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	for i := range 6 { // round robin: partitions 0, 1 and 2 each twice
		payload := `{"found":` + strconv.Itoa(i) + `}`
		id, err := p.Enqueue(context.Background(), []byte(payload))
		if err != nil {
			t.Fatal(err)
		}
		k, bare, ok := strings.Cut(id, "~")
		if !ok {
			t.Fatalf("ID %q does not name its partition", id)
		}
		part := "shard"
		if k != "p0" {
			part += "%23" + strings.TrimPrefix(k, "p")
		}
		r := c.get("/queues/shard/jobs/" + escapeID(id))
		if want := "/queues/" + part + "/jobs/" + escapeID(bare); r.Status != http.StatusSeeOther || r.Header.Get("Location") != want {
			t.Fatalf("job %s: status %d, Location %q; want 303 to %s", id, r.Status, r.Header.Get("Location"), want)
		}
		c.mustGet(r.Header.Get("Location"), "found&#34;: "+strconv.Itoa(i))
	}
}
