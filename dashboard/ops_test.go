package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/dashboard"
)

// TestPages_HistoryAndRedis reads the history of a queue (which rolls its
// minute counters up into hours) and the Redis page.
func TestPages_HistoryAndRedis(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	ctx := context.Background()
	// A minute of histograms as the workers write them, of kind "email".
	m := time.Now().Unix() / 60
	lat := fmt.Sprintf("%s:{work}:stats:lat:%d", f.prefix, m)
	f.rdb.HSet(ctx, lat, "w:100", 3, "r:120", 3, "w:100:email", 3, "r:120:email", 3, "p:email", 3)
	f.rdb.Expire(ctx, lat, time.Hour)
	c.mustGet("/queues/work/history", `id="history-minutes"`, `id="history-hours"`, "per minute", "per hour", "-120m", "-168h", "streamq stats --rollup",
		`id="history-latency-minutes"`, `id="history-latency-hours"`, "<title>wait p95</title>", `id="history-kind-0">kind`, `kind &#34;email&#34;</h3>`)
	keys, _, err := f.rdb.Scan(ctx, 0, f.prefix+":{work}:stats:hour:*", 1000).Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("the history page rolled no hour counter up: %v, %v", keys, err)
	}
	r := c.mustGet("/redis", "Redis", `id="eviction-policy" class="ok">noeviction`, `id="persistence"`, "Memory used")
	if strings.Contains(r.Body, "eviction-warning") {
		t.Error("a warning under noeviction")
	}
	c.mustGet("/redis?partial=1", "redis-facts")
}

// TestActions_StateBulk deletes every waiting job and runs every delayed job
// now, each after a confirmation that counts them, on a page that shows the
// result.
func TestActions_StateBulk(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	var audit logs
	c := newClient(t, newDashboard(t, f, dashboard.Options{AuditLogger: audit.logger()}))
	ctx := context.Background()
	c.mustGet("/queues/idle", `id="bulk-delete"`, "Delete all waiting jobs…")
	c.mustGet("/queues/idle?state=delayed", `id="bulk-run"`, "Run all delayed jobs now…")
	c.mustGet("/queues/work?state=running", `id="bulk-cancel"`, "Cancel all running jobs…")

	r := c.post("/queues/idle/bulk/delete", url.Values{"state": {"waiting"}})
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `<span id="confirm-count">5</span> waiting jobs of idle?`) {
		t.Fatalf("bulk delete without confirmation: status %d:\n%s", r.Status, r.Body)
	}
	if n := f.rdb.XLen(ctx, f.prefix+":{idle}:stream").Val(); n != 5 {
		t.Fatalf("the unconfirmed delete changed the stream: %d entries", n)
	}
	r = c.post("/queues/idle/bulk/delete", url.Values{"state": {"waiting"}, "confirm": {"yes"}})
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `id="bulk-done">Deleted 5 waiting jobs of idle.`) || !strings.Contains(r.Body, "</html>") {
		t.Fatalf("confirmed bulk delete: status %d:\n%s", r.Status, r.Body)
	}
	if n := f.rdb.XLen(ctx, f.prefix+":{idle}:stream").Val(); n != 0 {
		t.Errorf("after the bulk delete, %d entries in the stream", n)
	}
	r = c.post("/queues/idle/bulk/run", url.Values{"state": {"delayed"}, "confirm": {"yes"}})
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `id="bulk-done">Made due now 1 delayed job of idle.`) {
		t.Fatalf("confirmed run all now: status %d:\n%s", r.Status, r.Body)
	}
	for path, form := range map[string]url.Values{
		"/queues/idle/bulk/run":    {"state": {"waiting"}},
		"/queues/idle/bulk/bogus":  {"state": {"waiting"}},
		"/queues/idle/bulk/cancel": {"state": {"dead"}},
	} {
		if r := c.post(path, form); r.Status != http.StatusBadRequest {
			t.Errorf("POST %s %v: status %d, want 400", path, form, r.Status)
		}
	}
	lines := audit.lines(t, "dashboard: audit")
	var got []string
	for _, l := range lines {
		if l["level"] == "INFO" {
			got = append(got, fmt.Sprint(l["action"], " ", l["filter"], " ", l["count"]))
		}
	}
	if strings.Join(got, ", ") != "bulk-delete state=waiting 5, bulk-run state=delayed 1" {
		t.Errorf("audit lines of the bulk actions: %q", got)
	}
}

// TestActions_DeleteQueue deletes a queue after a confirmation that names
// its live consumers, only with force while they are live.
func TestActions_DeleteQueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	var audit logs
	c := newClient(t, newDashboard(t, f, dashboard.Options{AuditLogger: audit.logger()}))
	ctx := context.Background()
	c.mustGet("/queues/work", `id="delete-queue"`)
	r := c.post("/queues/work/delete", nil)
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `id="live-consumers"`) || !strings.Contains(r.Body, "c1") || !strings.Contains(r.Body, `name="force"`) {
		t.Fatalf("delete queue without confirmation: status %d:\n%s", r.Status, r.Body)
	}
	if r := c.post("/queues/work/delete", url.Values{"confirm": {"yes"}}); r.Status != http.StatusConflict || !strings.Contains(r.Body, "live") {
		t.Errorf("delete of a queue in use without force: status %d, want 409:\n%s", r.Status, r.Body)
	}
	if !f.rdb.HExists(ctx, f.prefix+":queues", "work").Val() {
		t.Fatal("a refused delete removed the queue")
	}
	r = c.post("/queues/work/delete", url.Values{"confirm": {"yes"}, "force": {"yes"}})
	if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/" {
		t.Fatalf("forced delete: status %d, Location %q:\n%s", r.Status, r.Header.Get("Location"), r.Body)
	}
	if f.rdb.HExists(ctx, f.prefix+":queues", "work").Val() {
		t.Error("after the delete, work is still registered")
	}
	page := c.mustGet("/", "Deleted queue work")
	if strings.Contains(page.Body, `data-queue="work"`) {
		t.Error("the overview still lists work")
	}
	// No consumer: no force needed.
	if r := c.post("/queues/idle/delete", nil); strings.Contains(r.Body, `name="force"`) {
		t.Errorf("a queue without consumers asks for force:\n%s", r.Body)
	}
	if r := c.post("/queues/idle/delete", url.Values{"confirm": {"yes"}}); r.Status != http.StatusSeeOther {
		t.Errorf("delete of idle: status %d", r.Status)
	}
	var actions []string
	for _, l := range audit.lines(t, "dashboard: audit") {
		actions = append(actions, l["action"].(string)+":"+l["level"].(string))
	}
	if strings.Join(actions, " ") != "delete-queue:WARN delete-queue:INFO delete-queue:INFO" {
		t.Errorf("audit of the deletions: %v", actions)
	}
}
