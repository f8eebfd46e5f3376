package dashboard_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/streamq/streamq/dashboard"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/hist"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
)

// screenshots is where TestBrowser saves its screenshots. The docs' come
// from: go test -run TestBrowser ./dashboard/ -screenshots ../docs
var screenshots = flag.String("screenshots", "", "directory for the screenshots of TestBrowser (default: a temporary directory)")

// browserTimeout bounds the whole browser test.
const browserTimeout = 3 * time.Minute

// chromiumNames are the executables looked for on PATH, Debian's first.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// envRequireBrowser names the environment variable that makes a missing
// Chromium fail TestBrowser instead of skipping it (.ci/run sets it once it
// made sure Chromium is installed), as STREAMQ_REQUIRE_POSTGRES does for
// PostgreSQL.
const envRequireBrowser = "STREAMQ_REQUIRE_BROWSER"

// findChromium returns the browser's path. Without one it skips the test,
// saying what it needs and how to install it, or fails it if
// STREAMQ_REQUIRE_BROWSER is set.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("no Chromium found on PATH (looked for %v): the browser test needs one; on Debian run "+
		"`apt-get update && apt-get install -y chromium` (.ci/run does)", chromiumNames)
	if os.Getenv(envRequireBrowser) != "" {
		t.Fatalf("%s (%s is set)", msg, envRequireBrowser)
	}
	t.Skipf("%s; set %s=1 to fail instead of skipping", msg, envRequireBrowser)
	return ""
}

// TestBrowser drives Debian's Chromium through the dashboard over a real
// Redis with jobs in every state: it loads every page, searches a job,
// pauses a queue and sees its consumer stop, and requeues dead letters and
// sees them run. It skips without Chromium (unless STREAMQ_REQUIRE_BROWSER
// is set) and fails if Chromium is there but cannot start.
func TestBrowser(t *testing.T) {
	t.Parallel()
	bin := findChromium(t)
	f := newFixture(t, true)
	ctx := context.Background()
	// More dead letters, with different errors, for the dead-letter page.
	for i := range 6 {
		if _, err := f.producer.Enqueue(ctx, mustJSON(t, payload{Kind: "dead", N: 100 + i})); err != nil {
			t.Fatal(err)
		}
	}
	f.settle(t)
	work, err := f.in.Queue(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	waitDead(t, work, 7)
	newPages := newPagesFixture(t, f)

	srv := httptest.NewServer(newDashboard(t, f, dashboard.Options{Refresh: time.Second, Outboxes: newPages.outboxes}))
	t.Cleanup(srv.Close)
	dir := *screenshots
	if dir == "" {
		dir = t.TempDir()
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 860),
		chromedp.Flag("hide-scrollbars", true),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	bctx, cancel := context.WithTimeout(bctx, browserTimeout)
	t.Cleanup(cancel)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("Chromium (%s) could not start: %v\nThe browser test needs a working Chromium: on Debian run "+
			"`apt-get update && apt-get install -y chromium` (.ci/run does).", bin, err)
	}

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("browser: text of %s: %v", sel, err)
		}
		return s
	}
	// waitJS waits for a JavaScript condition, the live refresh making it true.
	waitJS := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			t.Fatalf("browser: waiting for %s (%s): %v\npage:\n%s", what, expr, err, body)
		}
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("browser: screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "dashboard-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	noError := func(page string) {
		t.Helper()
		ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.getElementById("error") === null && document.querySelector("main") !== null`))
		if err != nil || !ok {
			t.Errorf("browser: page %s shows an error (%v): %s", page, err, text("body"))
		}
	}

	// Every page loads, with its script and style (the CSP allows them).
	for _, p := range []string{
		"/", "/queues/work", "/queues/work?state=running", "/queues/work?state=retrying", "/queues/idle",
		"/queues/idle?state=delayed", "/queues/work/jobs/" + escapeID(f.running), "/queues/work/dead",
		"/queues/work/consumers", "/queues/work/priority", "/queues/work/writebehind", "/schedules",
		"/queues/work/history", "/redis", "/queues/idle/flow", "/queues/shard/partitions", "/outbox",
	} {
		do("load "+p, chromedp.Navigate(srv.URL+p), chromedp.WaitVisible(chromedp.CSS("main")))
		noError(p)
	}
	// The overview, refreshed live by the script.
	do("overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-queue="work"] svg.chart`)))
	// The CSP lets the dashboard's own script run and style sheet apply.
	waitJS("a live refresh", `document.getElementById("live").hasAttribute("data-refreshed")`)
	if bg, err := chromedp.Run(bctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector("header.top")).backgroundColor`)); err != nil || bg != "rgb(22, 32, 43)" {
		t.Errorf("the style sheet is not applied: header background %q (%v)", bg, err)
	}
	shot("overview")

	// Search a job by ID from the queue page: it opens the job.
	do("search", chromedp.Navigate(srv.URL+"/queues/work"),
		chromedp.SendKeys(chromedp.ID("search-id"), f.dead), chromedp.Click(chromedp.ID("search-go")),
		chromedp.WaitVisible(chromedp.ID("job-id")))
	if got := text("#job-id"); got != f.dead {
		t.Fatalf("search by ID opened job %q, want %q", got, f.dead)
	}
	if got := text("#job-state"); got != "dead" {
		t.Errorf("the dead letter's page says state %q", got)
	}
	shot("job")

	// The queue page with its chart and jobs.
	do("queue", chromedp.Navigate(srv.URL+"/queues/work?state=dead"), chromedp.WaitVisible(chromedp.CSS("table.jobs")))
	shot("queue")

	// Pause: the consumer stops taking jobs, so new ones wait.
	do("pause", chromedp.Navigate(srv.URL+"/queues/work/consumers"), chromedp.Click(chromedp.ID("pause")),
		chromedp.WaitVisible(chromedp.ID("paused-badge")))
	if qs, err := f.in.Queues(ctx); err != nil || !paused(qs, "work") {
		t.Fatalf("after the click, work is not paused: %v %v", qs, err)
	}
	// The consumer sees the pause within a control interval.
	waitPausedSeen(t, f)
	const more = 5
	for i := range more {
		if _, err := f.producer.Enqueue(ctx, mustJSON(t, payload{Kind: "ok", N: 1000 + i})); err != nil {
			t.Fatal(err)
		}
	}
	// A read already in flight when the pause was seen may still take one
	// job; after that the consumer takes none.
	waitJS("the live page to show the waiting jobs", `Number(document.getElementById("waiting-count").textContent) >= `+strconv.Itoa(more-1))
	before := text("#waiting-count")
	// Three refreshes later (3 s, fifteen control intervals) they still wait.
	mark, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("live").getAttribute("data-refreshed")`))
	if err != nil {
		t.Fatal(err)
	}
	waitJS("three more refreshes", fmt.Sprintf(`Number(document.getElementById("live").getAttribute("data-refreshed")) >= %s + 2900`, mark))
	if got := text("#waiting-count"); got != before {
		t.Errorf("while paused, waiting went from %s to %s: the consumer took jobs", before, got)
	}
	shot("consumers-paused")
	do("resume", chromedp.Click(chromedp.ID("resume")), chromedp.WaitVisible(chromedp.ID("pause")))
	waitJS("the consumer to take the jobs after resume", `document.getElementById("waiting-count").textContent === "0"`)

	// Requeue one dead letter from its page: with the bug fixed it runs
	// and is done, which the live part of the page shows.
	f.healed.Store(true)
	do("requeue one", chromedp.Navigate(srv.URL+"/queues/work/jobs/"+escapeID(f.dead)), chromedp.Click(chromedp.ID("requeue")),
		chromedp.WaitVisible(chromedp.ID("flash")))
	waitJS("the requeued job to run", `(document.getElementById("job-state") || {}).textContent === "done"`)

	// Bulk requeue: the confirmation shows the count, then they all run.
	do("dead letters", chromedp.Navigate(srv.URL+"/queues/work/dead"), chromedp.WaitVisible(chromedp.CSS("table.jobs")))
	shot("dead")
	do("requeue all", chromedp.Click(chromedp.ID("requeue-all")), chromedp.WaitVisible(chromedp.ID("confirm-count")))
	if got := text("#confirm-count"); got != "6" {
		t.Errorf("the confirmation counts %s dead letters, want 6", got)
	}
	shot("confirm")
	do("confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("bulk-done")))
	if got := text("#bulk-done"); got != "Requeued 6 dead letters of work." {
		t.Errorf("flash after the bulk requeue: %q", got)
	}
	waitDead(t, work, 0)

	// Set the flow limits on the form: the page shows them.
	do("set flow limits", chromedp.Navigate(srv.URL+"/queues/idle/flow"), chromedp.SetValue(chromedp.ID("flow-global"), "12"),
		chromedp.Click(chromedp.ID("flow-set")), chromedp.WaitVisible(chromedp.ID("flash")))
	if got := text("#flow-global-cap"); got != "12" {
		t.Errorf("after the form, the global cap shows %q, want 12", got)
	}

	// The history charts wait and run percentiles over the last half hour.
	seedLatency(t, f, "work", 30)
	redistest.WaitFor(t, waitTimeout, "wait and run percentiles in the history of work", func() bool {
		h, err := work.History(ctx, time.Hour)
		return err == nil && len(slices.DeleteFunc(h.Points, func(p inspect.Point) bool { return p.WaitP95 == 0 || p.RunP95 == 0 })) >= 30
	})
	shotsOf(t, bctx, srv.URL, f.retrying, newPages.pages, shot)

	// Delete every waiting job of idle: the confirmation counts them, the
	// page shows the result.
	do("bulk delete", chromedp.Navigate(srv.URL+"/queues/idle"), chromedp.Click(chromedp.ID("bulk-delete")),
		chromedp.WaitVisible(chromedp.ID("confirm-count")))
	if got := text("#confirm-count"); got != "5" {
		t.Errorf("the bulk delete's confirmation counts %s waiting jobs, want 5", got)
	}
	do("confirm bulk delete", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("bulk-done")))
	if got := text("#bulk-done"); got != "Deleted 5 waiting jobs of idle." {
		t.Errorf("after the bulk delete: %q", got)
	}
	shot("bulk")

	// With a token: sign in on the form, act, and sign out (the browser's
	// forms carry their origin, which the dashboard checks).
	authed := httptest.NewServer(newDashboard(t, f, dashboard.Options{Auth: &dashboard.Auth{Token: goodToken}}))
	t.Cleanup(authed.Close)
	do("sign in", chromedp.Navigate(authed.URL+"/queues/idle"), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), goodToken), chromedp.Submit(chromedp.CSS(`input[name="token"]`)),
		chromedp.WaitVisible(chromedp.ID("logout")))
	do("pause signed in", chromedp.Navigate(authed.URL+"/queues/idle"), chromedp.Click(chromedp.ID("pause")),
		chromedp.WaitVisible(chromedp.ID("paused-badge")))
	do("sign out", chromedp.Click(chromedp.ID("logout")), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))
}

// paused reports whether queue is paused in qs.
func paused(qs []inspect.QueueInfo, queue string) bool {
	for _, q := range qs {
		if q.Name == queue {
			return q.Paused
		}
	}
	return false
}

// waitPausedSeen waits until the consumer of "work" has seen the pause.
func waitPausedSeen(t *testing.T, f *fixture) {
	t.Helper()
	redistest.WaitFor(t, waitTimeout, "the consumer to see the pause", func() bool { return f.consumer.Health().Paused })
}

// waitDead waits until queue has n dead letters.
func waitDead(t *testing.T, q *inspect.Queue, n int) {
	t.Helper()
	last := -1
	defer func() {
		if t.Failed() {
			t.Logf("queue %s: %d dead letters, want %d", q.Name(), last, n)
		}
	}()
	redistest.WaitFor(t, waitTimeout, fmt.Sprintf("%d dead letters in %s", n, q.Name()), func() bool {
		c, err := q.CountDead(context.Background(), inspect.DeadFilter{})
		last = c
		return err == nil && c == n
	})
}

// shotsOf loads the main pages at desktop and phone width, in light and dark
// mode: none may be wider than the window (tables scroll in their own box),
// dark mode must apply, and it saves the screenshots the docs show.
func shotsOf(t *testing.T, bctx context.Context, base, job string, extra map[string]string, shot func(string)) {
	t.Helper()
	pages := map[string]string{
		"overview": "/", "queue": "/queues/work?state=dead", "job": "/queues/work/jobs/" + escapeID(job),
		"dead": "/queues/work/dead", "consumers": "/queues/work/consumers", "history": "/queues/work/history",
		"redis": "/redis", "schedules": "/schedules",
	}
	maps.Copy(pages, extra)
	// The screenshots the docs use, by width and scheme.
	want := map[string]string{
		"desktop/light/history": "history", "desktop/light/redis": "redis", "desktop/dark/overview": "overview-dark",
		"desktop/dark/job": "job-dark", "phone/light/overview": "overview-phone", "phone/light/queue": "queue-phone",
		"phone/dark/overview": "overview-phone-dark", "phone/dark/history": "history-phone-dark",
		"desktop/light/flow": "flow", "desktop/dark/flow": "flow-dark", "phone/light/flow": "flow-phone", "phone/dark/flow": "flow-phone-dark",
		"desktop/light/why": "why", "phone/dark/why": "why-phone-dark",
		"desktop/light/partitions": "partitions", "phone/dark/partitions": "partitions-phone-dark",
		"desktop/light/outbox": "outbox", "phone/light/outbox": "outbox-phone",
		"desktop/light/completed": "completed", "phone/dark/completed": "completed-phone-dark",
	}
	for _, size := range []struct {
		name          string
		width, height int64
	}{{"desktop", 1280, 860}, {"phone", 390, 844}} {
		for _, scheme := range []string{"light", "dark"} {
			if err := chromedp.Do(bctx, emulate(size.width, size.height, scheme)); err != nil {
				t.Fatalf("browser: emulate %s %s: %v", size.name, scheme, err)
			}
			for _, name := range slices.Sorted(maps.Keys(pages)) {
				what := size.name + "/" + scheme + "/" + name
				if err := chromedp.Do(bctx, chromedp.Navigate(base+pages[name]), chromedp.WaitVisible(chromedp.CSS("main"))); err != nil {
					t.Fatalf("browser: load %s: %v", what, err)
				}
				checkFits(t, bctx, what, size.width, scheme)
				if name, ok := want[what]; ok {
					shot(name)
				}
			}
		}
	}
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 860), chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{})
		return err
	})); err != nil {
		t.Fatalf("browser: back to the desktop: %v", err)
	}
}

// seedLatency writes the latency histograms a consumer of queue would have
// written over the minutes before the current one (the fixture's jobs run
// in one minute, whose lone point draws no line): 20 jobs a minute, waits
// and run times that vary from minute to minute.
func seedLatency(t *testing.T, f *fixture, queue string, minutes int) {
	t.Helper()
	ctx := context.Background()
	k := rdb.NewKeys(f.prefix, queue)
	now := rdb.Minute(time.Now())
	pipe := f.rdb.Pipeline()
	for i := 1; i <= minutes; i++ {
		key := k.Latency(now - int64(i))
		for j := range 20 {
			wait := time.Duration(20+10*(i%7)+j*j) * time.Millisecond
			run := time.Duration(80+15*(i%5)+j*12) * time.Millisecond
			pipe.HIncrBy(ctx, key, rdb.LatencyField(rdb.LatencyWait, hist.Index(wait), "", false), 1)
			pipe.HIncrBy(ctx, key, rdb.LatencyField(rdb.LatencyRun, hist.Index(run), "", false), 1)
		}
		pipe.Expire(ctx, key, rdb.StatsTTL*time.Second)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}
