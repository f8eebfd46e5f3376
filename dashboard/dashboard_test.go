package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/dashboard"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

func TestNew_Validation(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	if _, err := dashboard.New(nil, nil); err == nil || !strings.Contains(err.Error(), "nil Redis client") {
		t.Errorf("New(nil) = %v, want an error about the nil client", err)
	}
	tests := []struct {
		name string
		opts dashboard.Options
		want string // in the error
	}{
		{"base path without slash", dashboard.Options{BasePath: "admin"}, `must start with "/"`},
		{"base path with trailing slash", dashboard.Options{BasePath: "/admin/"}, `use "/admin"`},
		{"base path with query", dashboard.Options{BasePath: "/admin?x"}, "escaping"},
		{"base path not clean", dashboard.Options{BasePath: "/a/../b"}, "clean"},
		{"user without password", dashboard.Options{Auth: &dashboard.Auth{Username: "u"}}, "both Username and Password"},
		{"password without user", dashboard.Options{Auth: &dashboard.Auth{Password: "p"}}, "both Username and Password"},
		{"empty auth", dashboard.Options{Auth: &dashboard.Auth{}}, "Auth is set but empty"},
		{"colon in user", dashboard.Options{Auth: &dashboard.Auth{Username: "a:b", Password: goodPassword}}, `":"`},
		{"short password", dashboard.Options{Auth: &dashboard.Auth{Username: "ops", Password: "a"}}, "use at least 15"},
		{"14-character password", dashboard.Options{Auth: &dashboard.Auth{Username: "ops", Password: "abcdefghijklmn"}}, "use at least 15"},
		{"repetitive password", dashboard.Options{Auth: &dashboard.Auth{Username: "ops", Password: "abababababababababab"}}, "too few characters"},
		{"password with the user name", dashboard.Options{Auth: &dashboard.Auth{Username: "admin", Password: "Admin-rocks-2026!"}}, "user name"},
		{"session too short", dashboard.Options{SessionTTL: time.Second}, "at least 1m0s"},
		{"allowed host as a URL", dashboard.Options{AllowedHosts: []string{"https://jobs.example.com"}}, "not a host name"},
		{"empty allowed host", dashboard.Options{AllowedHosts: []string{" "}}, "empty name"},
		{"trusted origin with a path", dashboard.Options{TrustedOrigins: []string{"https://jobs.example.com/admin"}}, "not an origin"},
		{"trusted origin without scheme", dashboard.Options{TrustedOrigins: []string{"jobs.example.com"}}, "not an origin"},
		{"short token", dashboard.Options{Auth: &dashboard.Auth{Token: "short"}}, "at least 16"},
		{"refresh too short", dashboard.Options{Refresh: 10 * time.Millisecond}, "at least 1s"},
		{"nil middleware result", dashboard.Options{Middleware: func(http.Handler) http.Handler { return nil }}, "nil handler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := dashboard.New(rdb, &tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%+v) = %v, want an error containing %q", tt.opts, err, tt.want)
			}
		})
	}
	for _, ok := range []dashboard.Options{
		{}, {BasePath: "/admin/jobs"}, {Refresh: -1}, {Refresh: 2 * time.Second},
		{Auth: &dashboard.Auth{Username: "u", Password: goodPassword}}, {Auth: &dashboard.Auth{Token: strings.Repeat("x", 16)}},
		{AllowedHosts: []string{"jobs.example.com", "jobs.example.com:8443", "*"}, TrustedOrigins: []string{"https://jobs.example.com", "http://10.0.0.1:8080/"}},
		{SessionTTL: time.Hour},
	} {
		if _, err := dashboard.New(rdb, &ok); err != nil {
			t.Errorf("New(%+v) = %v, want nil", ok, err)
		}
	}
	// New never changes the caller's options.
	o := dashboard.Options{Auth: &dashboard.Auth{Username: "u", Password: goodPassword}}
	if _, err := dashboard.New(rdb, &o); err != nil || o.Prefix != "" || o.Refresh != 0 || o.Logger != nil {
		t.Errorf("New changed the options: %+v (err %v)", o, err)
	}
}

func TestPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))

	r := c.mustGet("/", "work", "idle", `<svg class="chart"`, "processed", "data-refresh=")
	for name, want := range map[string]string{
		"Content-Security-Policy": "default-src 'none'; script-src 'self'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
		"X-Frame-Options":         "DENY",
	} {
		if got := r.Header.Get(name); !strings.Contains(got, want) {
			t.Errorf("header %s = %q, want %q in it", name, got, want)
		}
	}
	if !strings.Contains(r.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("CSP lacks frame-ancestors 'none': %q", r.Header.Get("Content-Security-Policy"))
	}
	if strings.Contains(r.Body, "<script>") || strings.Contains(r.Body, " style=") || strings.Contains(r.Body, "onclick") {
		t.Error("the page has inline script or style")
	}
	// The live part alone, for the refresh script.
	if p := c.mustGet("/?partial=1", "work"); strings.Contains(p.Body, "<html") {
		t.Errorf("partial overview is a whole page:\n%s", p.Body)
	}

	c.mustGet("/queues/idle", "waiting", `&#34;kind&#34;:&#34;wait&#34;`, escapeID(f.waiting[0]))
	c.mustGet("/queues/idle?state=delayed", `&#34;kind&#34;:&#34;later&#34;`)
	c.mustGet("/queues/work?state=running", escapeID(f.running))
	c.mustGet("/queues/work?state=retrying", escapeID(f.retrying), "upstream said 503")
	c.mustGet("/queues/work?state=dead", escapeID(f.dead))
	c.mustGet("/queues/work/jobs/"+escapeID(f.dead), "invalid customer id 42", "permanent",
		"4bf92f3577b34da6a3ce929d0e0e4736", "&#34;kind&#34;: &#34;dead&#34;", "traceparent", `id="requeue"`, `id="delete"`)
	c.mustGet("/queues/work/jobs/"+escapeID(f.running), `id="cancel"`, "running")
	c.mustGet("/queues/work/jobs/"+escapeID(f.retrying), `id="run-now"`, "upstream said 503")
	c.mustGet("/queues/work/dead", escapeID(f.dead), "invalid customer id 42", `id="requeue-all"`, `id="purge-all"`)
	c.mustGet("/queues/work/dead?reason=permanent", escapeID(f.dead))
	if r := c.mustGet("/queues/work/dead?error=nomatch"); strings.Contains(r.Body, escapeID(f.dead)) {
		t.Error("the error filter kept a dead letter that does not match")
	}
	c.mustGet("/queues/work/consumers", "c1")
	c.mustGet("/queues/work/priority", "no priority bands")
	c.mustGet("/queues/work/writebehind", "No writebehind.Writer")
	c.mustGet("/schedules", "Periodic schedules")
	c.mustGet("/static/app.js", "data-refresh")
	c.mustGet("/static/app.css", "svg.chart")

	for path, want := range map[string]int{
		"/queues/nope":                    http.StatusNotFound,
		"/queues/work/jobs/1-1":           http.StatusNotFound,
		"/queues/work?state=bogus":        http.StatusBadRequest,
		"/queues/work?limit=0":            http.StatusBadRequest,
		"/queues/work/dead?since=yester":  http.StatusBadRequest,
		"/no/such/page":                   http.StatusNotFound,
		"/static/missing.js":              http.StatusNotFound,
		"/queues/idle?header=notapair":    http.StatusBadRequest,
		"/queues/work/jobs/1-1?partial=1": http.StatusNotFound,
	} {
		if r := c.get(path); r.Status != want {
			t.Errorf("GET %s: status %d, want %d", path, r.Status, want)
		}
	}
	if r := c.get("/queues/wrok"); !strings.Contains(r.Body, `href="/queues/work"`) {
		t.Errorf("a mistyped queue does not suggest the close name:\n%s", r.Body)
	}
}

func TestQueue_Search(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))

	// By ID: straight to the job.
	r := c.get("/queues/idle?id=" + url.QueryEscape(f.waiting[2]))
	if loc := r.Header.Get("Location"); r.Status != http.StatusSeeOther || loc != "/queues/idle/jobs/"+escapeID(f.waiting[2]) {
		t.Fatalf("search by ID: status %d Location %q, want 303 to the job", r.Status, loc)
	}
	c.mustGet(r.Header.Get("Location"), "&#34;n&#34;: 2", "tenant")
	c.mustGet("/queues/idle?id=0-42", "No job with ID 0-42")

	// By header: the globex jobs only (1 and 3).
	r = c.mustGet("/queues/idle?header=tenant%3Dglobex")
	for i, id := range f.waiting {
		if got, want := strings.Contains(r.Body, escapeID(id)), i%2 == 1; got != want {
			t.Errorf("header search: job %d listed %v, want %v", i, got, want)
		}
	}
	// By payload substring.
	r = c.mustGet("/queues/idle?q=" + url.QueryEscape(`"n":4`))
	for i, id := range f.waiting {
		if got, want := strings.Contains(r.Body, escapeID(id)), i == 4; got != want {
			t.Errorf("payload search: job %d listed %v, want %v", i, got, want)
		}
	}
	// Paging: two per page, the cursor leads to the rest.
	r = c.mustGet("/queues/idle?limit=2", `id="next-page"`)
	if strings.Contains(r.Body, escapeID(f.waiting[2])) {
		t.Error("page 1 of 2 jobs holds the third job")
	}
	next := regexpFind(t, r.Body, `href="([^"]+)" id="next-page"`)
	c.mustGet(strings.ReplaceAll(next, "&amp;", "&"), escapeID(f.waiting[2]))
}

func TestActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	ctx := context.Background()
	work, err := f.in.Queue(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}

	c.mustGet("/queues/work", `id="pause"`)
	r := c.post("/queues/work/pause", url.Values{"next": {"/queues/work/consumers"}})
	if r.Status != http.StatusSeeOther || r.Header.Get("Location") != "/queues/work/consumers" {
		t.Fatalf("pause: status %d Location %q, want 303 back", r.Status, r.Header.Get("Location"))
	}
	if n, _ := f.rdb.Exists(ctx, f.prefix+":{work}:paused").Result(); n != 1 {
		t.Error("pause did not set the paused key")
	}
	c.mustGet("/queues/work/consumers", "Paused queue work", "paused", `id="resume"`)
	if r := c.post("/queues/work/resume", nil); r.Status != http.StatusSeeOther {
		t.Fatalf("resume: status %d:\n%s", r.Status, r.Body)
	}
	if n, _ := f.rdb.Exists(ctx, f.prefix+":{work}:paused").Result(); n != 0 {
		t.Error("resume left the paused key")
	}
	// An open redirect is not followed: "next" must be a dashboard path.
	if r := c.post("/queues/work/pause", url.Values{"next": {"//evil.example/"}}); r.Header.Get("Location") != "/queues/work" {
		t.Errorf("next=//evil.example/ redirected to %q", r.Header.Get("Location"))
	}
	c.post("/queues/work/resume", nil)

	// Cancel a running job: the request is recorded for the consumer.
	c.mustGet("/queues/work/jobs/" + escapeID(f.running))
	if r := c.post("/queues/work/jobs/"+escapeID(f.running)+"/cancel", nil); r.Status != http.StatusSeeOther {
		t.Fatalf("cancel: status %d:\n%s", r.Status, r.Body)
	}
	// The consumer cancels the handler: the job is kept as cancelled.
	f.waitState(t, "work", f.running, inspect.StateCancelled)
	c.mustGet("/queues/work/dead?state=cancelled", escapeID(f.running), "cancelled")
	c.mustGet("/queues/work/jobs/"+escapeID(f.running), `id="requeue"`, "cancelled")
	// Cancelling a job that is not running is a 409 with the reason.
	if r := c.post("/queues/work/jobs/"+escapeID(f.retrying)+"/cancel", nil); r.Status != http.StatusConflict || !strings.Contains(r.Body, "retrying") {
		t.Errorf("cancel of a retrying job: status %d, want 409 saying why:\n%s", r.Status, r.Body)
	}

	// Run a retrying job now: it runs and fails again (a second error).
	if r := c.post("/queues/work/jobs/"+escapeID(f.retrying)+"/run", nil); r.Status != http.StatusSeeOther {
		t.Fatalf("run now: status %d:\n%s", r.Status, r.Body)
	}
	redistest.WaitFor(t, waitTimeout, "the retried job to run again", func() bool {
		j, err := work.Job(ctx, f.retrying)
		return err == nil && j.State == inspect.StateRetrying && len(j.Errors) >= 2
	})

	// Requeue the dead letter: it runs and is dead again (a second error).
	if r := c.post("/queues/work/jobs/"+escapeID(f.dead)+"/requeue", nil); r.Status != http.StatusSeeOther {
		t.Fatalf("requeue: status %d:\n%s", r.Status, r.Body)
	}
	redistest.WaitFor(t, waitTimeout, "the requeued dead letter to run again", func() bool {
		j, err := work.Job(ctx, f.dead)
		return err == nil && j.State == inspect.StateDead && len(j.Errors) >= 2
	})

	// Delete a delayed job of idle.
	idle, err := f.in.Queue(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	p, err := idle.Jobs(ctx, inspect.ListOptions{State: inspect.StateDelayed})
	if err != nil || len(p.Jobs) != 1 {
		t.Fatalf("delayed jobs of idle: %v, %v", p, err)
	}
	delayed := p.Jobs[0].ID
	if r := c.post("/queues/idle/jobs/"+escapeID(delayed)+"/delete", nil); r.Status != http.StatusSeeOther {
		t.Fatalf("delete: status %d:\n%s", r.Status, r.Body)
	}
	if _, err := idle.Job(ctx, delayed); err == nil {
		t.Error("the deleted job is still there")
	}
}

func TestActions_Bulk(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	ctx := context.Background()

	// Without confirm=yes: a confirmation page with the count, and nothing done.
	c.mustGet("/queues/work/dead")
	r := c.post("/queues/work/dead/purge", url.Values{"reason": {"permanent"}})
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `<span id="confirm-count">1</span>`) || !strings.Contains(r.Body, `name="confirm" value="yes"`) {
		t.Fatalf("purge without confirmation: status %d, want 200 with the count:\n%s", r.Status, r.Body)
	}
	if n, _ := f.rdb.XLen(ctx, f.prefix+":{work}:dead").Result(); n != 1 {
		t.Fatalf("the unconfirmed purge changed the dead letters: %d left", n)
	}
	// A filter that matches nothing purges nothing.
	r = c.post("/queues/work/dead/purge", url.Values{"error": {"no such error"}, "confirm": {"yes"}})
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `id="bulk-done">Purged 0 dead letters of work.`) {
		t.Fatalf("confirmed purge: status %d:\n%s", r.Status, r.Body)
	}
	// Confirmed: done, and the page says how many when it is done.
	r = c.post("/queues/work/dead/purge", url.Values{"reason": {"permanent"}, "confirm": {"yes"}})
	if r.Status != http.StatusOK || !strings.Contains(r.Body, `id="bulk-done">Purged 1 dead letters of work.`) || !strings.Contains(r.Body, "</html>") {
		t.Fatalf("confirmed purge: status %d:\n%s", r.Status, r.Body)
	}
	work, _ := f.in.Queue(ctx, "work")
	if n, err := work.CountDead(ctx, inspect.DeadFilter{}); err != nil || n != 0 {
		t.Errorf("after the purge: %d dead letters (%v), want 0", n, err)
	}
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	h := newDashboard(t, f, dashboard.Options{})
	ctx := context.Background()
	paused := func() bool {
		n, err := f.rdb.Exists(ctx, f.prefix+":{work}:paused").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	tests := []struct {
		name  string
		setup func(c *client, form url.Values)
	}{
		{"no token", func(c *client, form url.Values) { form.Set("csrf", "") }},
		{"wrong token", func(c *client, form url.Values) { form.Set("csrf", strings.Repeat("ab", 32)) }},
		{"other origin", func(c *client, form url.Values) { c.origin = "http://evil.example" }},
		{"cross-site fetch", func(c *client, form url.Values) { c.header.Set("Sec-Fetch-Site", "cross-site") }},
		{"token without its cookie", func(c *client, form url.Values) {
			c.hc.Jar, _ = newJar()
		}},
	}
	for _, tt := range tests {
		c := newClient(t, h)
		c.mustGet("/")
		form := url.Values{}
		tt.setup(c, form)
		r := c.post("/queues/work/pause", form)
		if r.Status != http.StatusForbidden || !strings.Contains(r.Body, "refused") {
			t.Errorf("%s: status %d, want 403 refused:\n%s", tt.name, r.Status, r.Body)
		}
		if paused() {
			t.Fatalf("%s: the refused request paused the queue", tt.name)
		}
	}
	// The same request with the token and the origin goes through.
	c := newClient(t, h)
	c.mustGet("/")
	if r := c.post("/queues/work/pause", nil); r.Status != http.StatusSeeOther || !paused() {
		t.Fatalf("a valid request: status %d, paused %v", r.Status, paused())
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	c := newClient(t, newDashboard(t, f, dashboard.Options{ReadOnly: true}))
	for _, p := range []string{"/queues/work", "/queues/work/dead", "/queues/work/jobs/" + escapeID(f.dead), "/queues/work/jobs/" + escapeID(f.running)} {
		r := c.mustGet(p, "read-only")
		for _, action := range []string{`method="post"`, `id="pause"`, `id="requeue"`, `id="cancel"`, `id="delete"`, `id="purge-all"`, `id="delete-queue"`, `id="bulk-`} {
			if strings.Contains(r.Body, action) {
				t.Errorf("read-only page %s shows %s", p, action)
			}
		}
	}
	ctx := context.Background()
	for _, p := range []string{"/queues/work/pause", "/queues/work/jobs/" + escapeID(f.dead) + "/requeue", "/queues/work/jobs/" + escapeID(f.running) + "/cancel", "/queues/work/dead/purge",
		"/queues/work/delete", "/queues/work/bulk/cancel?state=running", "/queues/idle/bulk/delete"} {
		r := c.post(p, url.Values{"confirm": {"yes"}})
		if r.Status != http.StatusForbidden || !strings.Contains(r.Body, "read-only") {
			t.Errorf("POST %s in read-only mode: status %d, want 403", p, r.Status)
		}
	}
	if n, _ := f.rdb.Exists(ctx, f.prefix+":{work}:paused", f.prefix+":{work}:cancel").Result(); n != 0 {
		t.Error("a refused action changed Redis")
	}
	if n, _ := f.rdb.XLen(ctx, f.prefix+":{work}:dead").Result(); n != 1 {
		t.Errorf("a refused purge left %d dead letters, want 1", n)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	token := goodToken

	t.Run("basic", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, newDashboard(t, f, dashboard.Options{Auth: &dashboard.Auth{Username: "admin", Password: goodPassword}}))
		r := c.get("/")
		if r.Status != http.StatusUnauthorized || !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Fatalf("no credentials: status %d, WWW-Authenticate %q", r.Status, r.Header.Get("WWW-Authenticate"))
		}
		if strings.Contains(r.Body, "work") {
			t.Error("the 401 answer shows queue names")
		}
		for _, pw := range []string{"wrong", goodPassword + " "} {
			req := httptest.NewRequest(http.MethodGet, c.srv.URL+"/", nil)
			req.RequestURI = ""
			req.SetBasicAuth("admin", pw)
			if r := c.do(req); r.Status != http.StatusUnauthorized {
				t.Errorf("password %q: status %d, want 401", pw, r.Status)
			}
		}
		c.header.Set("Authorization", "Basic "+basic("admin", goodPassword))
		c.mustGet("/", "work")
		c.mustGet("/queues/work")
		if r := c.post("/queues/work/pause", nil); r.Status != http.StatusSeeOther {
			t.Errorf("an action with credentials: status %d", r.Status)
		}
	})
	t.Run("token", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, newDashboard(t, f, dashboard.Options{BasePath: "/ops", Auth: &dashboard.Auth{Token: token}}))
		// A browser without the token gets the sign-in form.
		if r := c.get("/ops/"); r.Status != http.StatusUnauthorized || !strings.Contains(r.Body, `name="token"`) {
			t.Fatalf("no token: status %d, want 401 with the sign-in form", r.Status)
		}
		// Its style sheet loads without credentials; nothing else does.
		c.mustGet("/ops/static/app.css")
		if r := c.get("/ops/queues/work"); r.Status != http.StatusUnauthorized || strings.Contains(r.Body, "Dead letters") {
			t.Errorf("a queue page without the token: status %d", r.Status)
		}
	})
	t.Run("bearer", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, newDashboard(t, f, dashboard.Options{Auth: &dashboard.Auth{Token: token}}))
		c.header.Set("Authorization", "Bearer "+token+"x")
		if r := c.get("/"); r.Status != http.StatusUnauthorized {
			t.Errorf("wrong token: status %d, want 401", r.Status)
		}
		c.header.Set("Authorization", "Bearer "+token)
		c.mustGet("/", "work")
	})
	t.Run("sign in", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, newDashboard(t, f, dashboard.Options{Auth: &dashboard.Auth{Token: token}}))
		if r := c.post("/login", url.Values{"token": {"nope"}}); r.Status != http.StatusUnauthorized {
			t.Errorf("wrong token posted: status %d, want 401", r.Status)
		}
		r := c.post("/login", url.Values{"token": {token}})
		if r.Status != http.StatusSeeOther {
			t.Fatalf("sign in: status %d:\n%s", r.Status, r.Body)
		}
		if sc := r.Header.Get("Set-Cookie"); !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Strict") {
			t.Errorf("token cookie %q is not HttpOnly and SameSite=Strict", sc)
		}
		c.mustGet("/", "work")
		if strings.Contains(r.Header.Get("Set-Cookie"), token) {
			t.Error("the sign-in cookie holds the token itself")
		}
	})
	t.Run("middleware", func(t *testing.T) {
		t.Parallel()
		seen := make(chan string, 10)
		mw := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Team") != "ops" {
					http.Error(w, "not your team", http.StatusForbidden)
					return
				}
				seen <- r.URL.Path
				next.ServeHTTP(w, r)
			})
		}
		c := newClient(t, newDashboard(t, f, dashboard.Options{Middleware: mw}))
		r := c.get("/")
		if r.Status != http.StatusForbidden || r.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("middleware refusal: status %d, CSP %q; want 403 with the security headers", r.Status, r.Header.Get("Content-Security-Policy"))
		}
		c.header.Set("X-Team", "ops")
		c.mustGet("/", "work")
		if got := <-seen; got != "/" {
			t.Errorf("middleware saw %q", got)
		}
	})
}

func TestBasePath(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	h := newDashboard(t, f, dashboard.Options{BasePath: "/admin/jobs"})
	mux := http.NewServeMux()
	mux.Handle("/admin/jobs/", h)
	mux.Handle("/stripped/", http.StripPrefix("/stripped", h))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "app", http.StatusTeapot) })
	c := newClient(t, mux)

	r := c.mustGet("/admin/jobs/", `href="/admin/jobs/queues/work"`, `src="/admin/jobs/static/app.js"`)
	if strings.Contains(r.Body, `href="/queues/`) {
		t.Error("a link ignores the base path")
	}
	c.mustGet("/admin/jobs/queues/idle", `action="/admin/jobs/queues/idle/pause"`)
	c.mustGet("/admin/jobs/static/app.js")
	if r := c.post("/admin/jobs/queues/idle/pause", nil); r.Status != http.StatusSeeOther || !strings.HasPrefix(r.Header.Get("Location"), "/admin/jobs/") {
		t.Errorf("action under the base path: status %d Location %q", r.Status, r.Header.Get("Location"))
	}
	// Behind http.StripPrefix the paths arrive without it: still served.
	c.mustGet("/stripped/queues/idle", `href="/admin/jobs/queues/idle"`)
	if r := c.get("/other"); r.Status != http.StatusTeapot {
		t.Errorf("the rest of the server: %d", r.Status)
	}
}

func TestHidePayloads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	c := newClient(t, newDashboard(t, f, dashboard.Options{HidePayloads: true}))
	for _, p := range []string{"/queues/idle", "/queues/idle/jobs/" + escapeID(f.waiting[0])} {
		r := c.mustGet(p, "payloads hidden")
		if strings.Contains(r.Body, "&#34;kind") || strings.Contains(r.Body, `{"kind`) {
			t.Errorf("%s shows a payload:\n%s", p, r.Body)
		}
	}
	if r := c.get("/queues/idle?q=wait"); r.Status != http.StatusBadRequest {
		t.Errorf("payload search with hidden payloads: status %d, want 400", r.Status)
	}
}
