package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/dashboard"
	"github.com/streamq/streamq/workflow"
)

type dashStep struct{ N int }

func (dashStep) Kind() string { return "dash.step" }

// enqueueWorkflow enqueues workflow id on f's "idle" queue (no consumer
// runs it): fetch, then resize, then notify, with a batch of resize. It
// returns the job ID of fetch, the only node enqueued.
func enqueueWorkflow(t testing.TB, f *fixture, id string) string {
	t.Helper()
	ctx := context.Background()
	wc, err := workflow.NewClient([]*streamq.Queue{f.idle}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := workflow.New(id).Add("fetch", f.idle, dashStep{1}).Add("resize", f.idle, dashStep{2}).Add("notify", f.idle, dashStep{3}).
		Chain("fetch", "resize", "notify").Batch("images", []string{"resize"}, "", "")
	if err := wc.Enqueue(ctx, w); err != nil {
		t.Fatal(err)
	}
	info, err := wc.Show(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if info.Nodes[0].Name != "fetch" || info.Nodes[0].JobID == "" {
		t.Fatalf("fetch was not enqueued: %+v", info.Nodes)
	}
	return info.Nodes[0].JobID
}

// TestWorkflows_Page shows a workflow: each node's state, kind, queue and
// job, why each waits (its parent, or the queue's reason for an enqueued
// job), its batch; the lookup form and the list of unfinished workflows;
// the link from the job page.
func TestWorkflows_Page(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	root := enqueueWorkflow(t, f, "order-7")
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))

	c.mustGet("/workflows", `id="workflow-lookup"`, `href="/workflows/order-7"`, `aria-current="page">Workflows`)
	r := c.get("/workflows?id=" + url.QueryEscape(" order-7 "))
	if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/workflows/order-7" {
		t.Errorf("lookup: status %d, location %q", r.Status, r.Header.Get("Location"))
	}
	r = c.mustGet("/workflows/order-7", `id="workflow-state">running`, `id="cancel-workflow"`,
		"waiting for parent fetch (enqueued)", "waiting for parent resize (waiting)",
		"<code>dash.step</code>", `href="/queues/idle/jobs/`+escapeID(root)+`"`, "images", "0 of 1 ended")
	fetchRow := regexpFind(t, r.Body, `(?s)<tr data-node="fetch">(.*?)</tr>`)
	if !strings.Contains(fetchRow, "no live consumer") && !strings.Contains(fetchRow, "behind") {
		t.Errorf("the enqueued node does not say why its job waits in its queue:\n%s", fetchRow)
	}
	c.mustGet("/workflows/order-7?partial=1", `id="workflow-nodes"`)
	c.mustGet("/queues/idle/jobs/"+escapeID(root), `id="job-workflow" href="/workflows/order-7"`, "node <code>fetch</code>")
	if r := c.get("/workflows/nope"); r.Status != http.StatusNotFound || !strings.Contains(r.Body, `workflow &#34;nope&#34; not found`) {
		t.Errorf("an unknown workflow: status %d\n%s", r.Status, r.Body)
	}
}

// TestWorkflows_Cancel cancels a workflow from its page through the
// actions' checks: refused read-only and without the CSRF token, then done
// and written to the audit log; the root's waiting job is deleted.
func TestWorkflows_Cancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	root := enqueueWorkflow(t, f, "order-8")

	ro := newClient(t, newDashboard(t, f, dashboard.Options{ReadOnly: true}))
	if r := ro.mustGet("/workflows/order-8"); strings.Contains(r.Body, `id="cancel-workflow"`) {
		t.Error("a read-only dashboard offers to cancel")
	}
	if r := ro.post("/workflows/order-8/cancel", nil); r.Status != http.StatusForbidden {
		t.Errorf("read-only cancel: status %d", r.Status)
	}

	var audit logs
	c := newClient(t, newDashboard(t, f, dashboard.Options{AuditLogger: audit.logger()}))
	if r := c.post("/workflows/order-8/cancel", url.Values{"csrf": {"0123"}}); r.Status != http.StatusForbidden {
		t.Errorf("cancel with a wrong CSRF token: status %d", r.Status)
	}
	c.mustGet("/workflows/order-8")
	if r := c.post("/workflows/order-8/bogus", nil); r.Status != http.StatusBadRequest {
		t.Errorf("an unknown action: status %d", r.Status)
	}
	r := c.post("/workflows/order-8/cancel", nil)
	if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/workflows/order-8" {
		t.Fatalf("cancel: status %d, location %q\n%s", r.Status, r.Header.Get("Location"), r.Body)
	}
	r = c.mustGet("/workflows/order-8", `id="workflow-state">cancelled`, "Cancelled workflow order-8: 3 nodes, 1 jobs stopped in their queues.")
	if strings.Contains(r.Body, `id="cancel-workflow"`) {
		t.Error("a cancelled workflow offers to cancel again")
	}
	if r := c.get("/queues/idle/jobs/" + escapeID(root)); r.Status != http.StatusNotFound {
		t.Errorf("the root's waiting job was not deleted: status %d", r.Status)
	}
	var got []string
	for _, l := range audit.lines(t, "dashboard: audit") {
		got = append(got, strings.Join([]string{l["level"].(string), l["action"].(string), str(l["workflow"]), str(l["count"])}, " "))
	}
	want := "WARN workflow-cancel order-8 , WARN workflow-bogus order-8 , INFO workflow-cancel order-8 1"
	if strings.Join(got, ", ") != want {
		t.Errorf("audit lines: %q, want %q", strings.Join(got, ", "), want)
	}
}

// str formats a logged value ("" for none).
func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// TestBrowser_Workflow looks a workflow up in Chromium, from the lookup
// form to its page, at desktop and 390 px phone width in light and dark
// mode: the nodes table scrolls in its box (the page is never wider than
// the window) and dark mode applies. It saves the screenshots the docs
// show (-screenshots). It skips without Chromium, as TestBrowser does.
func TestBrowser_Workflow(t *testing.T) {
	t.Parallel()
	bin := findChromium(t)
	f := newFixture(t, false)
	enqueueWorkflow(t, f, "order-1234")
	srv := httptest.NewServer(newDashboard(t, f, dashboard.Options{}))
	t.Cleanup(srv.Close)
	dir := *screenshots
	if dir == "" {
		dir = t.TempDir()
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 860), chromedp.Flag("hide-scrollbars", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	bctx, cancel := context.WithTimeout(bctx, browserTimeout)
	t.Cleanup(cancel)

	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/workflows"), chromedp.WaitVisible(chromedp.ID("workflow-lookup")),
		chromedp.SendKeys(chromedp.ID("workflow-id"), "order-1234"), chromedp.Submit(chromedp.ID("workflow-id")),
		chromedp.WaitVisible(chromedp.ID("workflow-nodes"))); err != nil {
		t.Fatalf("browser: look the workflow up: %v", err)
	}
	why, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`tr[data-node="notify"] td.why`)))
	if err != nil || why != "waiting for parent resize (waiting)" {
		t.Errorf("browser: notify waits for %q (%v)", why, err)
	}
	shots := map[string]string{"desktop/light": "workflow", "phone/dark": "workflow-phone-dark"}
	for _, size := range []struct {
		name          string
		width, height int64
	}{{"desktop", 1280, 860}, {"phone", 390, 844}} {
		for _, scheme := range []string{"light", "dark"} {
			what := size.name + "/" + scheme
			err := chromedp.Do(bctx, emulate(size.width, size.height, scheme),
				chromedp.Navigate(srv.URL+"/workflows/order-1234"), chromedp.WaitVisible(chromedp.ID("workflow-nodes")))
			if err != nil {
				t.Fatalf("browser: %s: %v", what, err)
			}
			checkFits(t, bctx, what, size.width, scheme)
			if name, ok := shots[what]; ok {
				png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
				if err != nil {
					t.Fatalf("browser: screenshot %s: %v", name, err)
				}
				if err := os.WriteFile(filepath.Join(dir, "dashboard-"+name+".png"), png, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// emulate sets the window's size (a mobile one) and color scheme.
func emulate(width, height int64, scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.EmulateViewport(width, height, chromedp.EmulateMobile),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
			return err
		}))
}

// checkFits checks that the page loaded is no wider than the window (width)
// and has the background of scheme.
func checkFits(t *testing.T, bctx context.Context, what string, width int64, scheme string) {
	t.Helper()
	wide, err := chromedp.Run(bctx, chromedp.Evaluate[int64](`document.documentElement.scrollWidth - document.documentElement.clientWidth`))
	if err != nil || wide > 0 {
		t.Errorf("browser: %s is %d px wider than the %d px window (%v)", what, wide, width, err)
	}
	bg, err := chromedp.Run(bctx, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
	if wantBG := map[string]string{"light": "rgb(255, 255, 255)", "dark": "rgb(18, 23, 29)"}[scheme]; err != nil || bg != wantBG {
		t.Errorf("browser: %s has background %q, want %q (%v)", what, bg, wantBG, err)
	}
}
