package dashboard_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/dashboard"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

// logs is a slog.Logger whose JSON lines a test reads back.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// lines returns the records logged with message msg.
func (l *logs) lines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// text is everything logged.
func (l *logs) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestHost checks the defence against DNS rebinding: without
// authentication, only loopback hosts and Options.AllowedHosts are served.
func TestHost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := context.Background()
	get := func(c *client, host, path string) *response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, c.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		return c.do(req)
	}
	open := newClient(t, newDashboard(t, f, dashboard.Options{}))
	for _, host := range []string{"localhost", "LOCALHOST:8080", "localhost.:80", "127.0.0.1", "127.8.9.10:9999", "[::1]:8080", "[::1]"} {
		if r := get(open, host, "/queues/idle"); r.Status != http.StatusOK {
			t.Errorf("Host %q without auth: status %d, want 200", host, r.Status)
		}
	}
	for _, host := range []string{"rebind.evil.example", "rebind.evil.example:8080", "10.0.0.5:8080", "localhost.evil.example", "127.0.0.1.nip.io"} {
		r := get(open, host, "/queues/idle")
		if r.Status != http.StatusMisdirectedRequest || !strings.Contains(r.Body, "AllowedHosts") || !strings.Contains(r.Body, "--allowed-host") {
			t.Errorf("Host %q without auth: status %d, want 421 saying which setting to change:\n%s", host, r.Status, r.Body)
		}
		if strings.Contains(r.Body, "kind") || r.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("Host %q: the refusal shows data or lacks the security headers", host)
		}
	}
	// An action through a rebound name is refused before it is done.
	open.mustGet("/")
	req, _ := http.NewRequest(http.MethodPost, open.srv.URL+"/queues/work/pause", strings.NewReader(url.Values{"csrf": {open.csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Host = "rebind.evil.example:8080"
	req.Header.Set("Origin", "http://rebind.evil.example:8080")
	if r := open.do(req); r.Status != http.StatusMisdirectedRequest {
		t.Errorf("pause through a rebound name: status %d, want 421", r.Status)
	}
	if n, _ := f.rdb.Exists(ctx, f.prefix+":{work}:paused").Result(); n != 0 {
		t.Fatal("a request through a rebound name paused the queue")
	}

	listed := newClient(t, newDashboard(t, f, dashboard.Options{AllowedHosts: []string{"jobs.internal", "ops.example.com:8443"}}))
	for host, want := range map[string]int{
		"jobs.internal": 200, "JOBS.internal:8080": 200, "ops.example.com:8443": 200, "ops.example.com:9000": 421, "other.internal": 421, "localhost:1": 200,
	} {
		if r := get(listed, host, "/"); r.Status != want {
			t.Errorf("AllowedHosts, Host %q: status %d, want %d", host, r.Status, want)
		}
	}
	any := newClient(t, newDashboard(t, f, dashboard.Options{AllowedHosts: []string{"*"}}))
	if r := get(any, "anything.example", "/"); r.Status != http.StatusOK {
		t.Errorf(`AllowedHosts "*": status %d, want 200`, r.Status)
	}
	// With authentication any host gets the challenge, unless hosts are listed.
	authed := newClient(t, newDashboard(t, f, dashboard.Options{Auth: &dashboard.Auth{Username: "ops", Password: goodPassword}}))
	if r := get(authed, "jobs.example.com", "/"); r.Status != http.StatusUnauthorized {
		t.Errorf("with Auth, another host: status %d, want 401", r.Status)
	}
	authedListed := newClient(t, newDashboard(t, f, dashboard.Options{Auth: &dashboard.Auth{Username: "ops", Password: goodPassword}, AllowedHosts: []string{"jobs.example.com"}}))
	if r := get(authedListed, "evil.example", "/"); r.Status != http.StatusMisdirectedRequest {
		t.Errorf("with Auth and AllowedHosts, another host: status %d, want 421", r.Status)
	}
}

// TestAuth_Throttle checks that failed sign-ins are throttled per client
// and logged without the password.
func TestAuth_Throttle(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	var l logs
	c := newClient(t, newDashboard(t, f, dashboard.Options{Logger: l.logger(),
		Auth: &dashboard.Auth{Username: "admin", Password: goodPassword, Token: goodToken}}))
	try := func(user, password string) *response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, c.srv.URL+"/", nil)
		req.SetBasicAuth(user, password)
		return c.do(req)
	}
	for i := range 5 {
		if r := try("admin", "wrong-password-"+string(rune('a'+i))); r.Status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: status %d, want 401", i+1, r.Status)
		}
	}
	// The sixth failure locks the client out; then even the right
	// credentials are refused, without being checked, until it ends.
	r := try("admin", "wrong-password-f")
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("sixth wrong password: status %d, Retry-After %q; want 429 and 1", r.Status, r.Header.Get("Retry-After"))
	}
	if r := try("admin", goodPassword); r.Status != http.StatusTooManyRequests || !strings.Contains(r.Body, "try again") {
		t.Errorf("right password while locked out: status %d, want 429:\n%s", r.Status, r.Body)
	}
	// The token sign-in form is throttled with the same count.
	if r := c.post("/login", url.Values{"token": {goodToken}}); r.Status != http.StatusTooManyRequests {
		t.Errorf("token sign-in while locked out: status %d, want 429", r.Status)
	}
	// Each failure is logged: client, user, method; never the password.
	lines := l.lines(t, "dashboard: failed sign-in")
	if len(lines) != 6 {
		t.Fatalf("%d failed sign-ins logged, want 6:\n%s", len(lines), l.text())
	}
	for _, m := range lines {
		if m["user"] != "admin" || m["method"] != "basic" || !strings.HasPrefix(m["client"].(string), "127.0.0.1:") {
			t.Errorf("log line %v lacks the user, method or client", m)
		}
	}
	if strings.Contains(l.text(), "wrong-password") || strings.Contains(l.text(), goodPassword) {
		t.Errorf("the log shows a password:\n%s", l.text())
	}
	// Once the lockout is over (1 s), the right password works and resets
	// the count.
	redistest.WaitFor(t, 5*time.Second, "the lockout to end", func() bool { return try("admin", goodPassword).Status == http.StatusOK })
	if r := try("admin", "wrong-again"); r.Status != http.StatusUnauthorized {
		t.Errorf("a failure after a success: status %d, want 401 (the count was reset)", r.Status)
	}
}

// TestTLS serves the dashboard over TLS with a certificate of a throwaway
// CA: the session, CSRF and flash cookies are Secure, and a session ends on
// sign-out.
func TestTLS(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	var audit logs
	cert, key, clientConf := redistest.TLSCertificate(t)
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(newDashboard(t, f, dashboard.Options{Auth: &dashboard.Auth{Token: goodToken}, AuditLogger: audit.logger()}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c := newClient(t, http.NotFoundHandler())
	c.srv = srv
	c.origin = srv.URL
	c.hc.Transport = &http.Transport{TLSClientConfig: clientConf}

	r := c.post("/login", url.Values{"token": {goodToken}})
	if r.Status != http.StatusSeeOther {
		t.Fatalf("sign in over TLS: status %d:\n%s", r.Status, r.Body)
	}
	session := ""
	for _, ck := range (&http.Response{Header: r.Header}).Cookies() {
		if ck.Name == "streamq_dashboard_token" {
			session = ck.Value
			if !ck.Secure || !ck.HttpOnly || ck.MaxAge != int((12*time.Hour).Seconds()) {
				t.Errorf("session cookie %+v: want Secure, HttpOnly, Max-Age 12h", ck)
			}
		}
	}
	if session == "" {
		t.Fatalf("no session cookie: %v", r.Header["Set-Cookie"])
	}
	page := c.mustGet("/queues/work", `id="logout"`)
	for _, sc := range page.Header["Set-Cookie"] {
		if !strings.Contains(sc, "; Secure") {
			t.Errorf("cookie over TLS without Secure: %s", sc)
		}
	}
	c.mustGet("/queues/work")
	// Sign out: the cookie is cleared and the session is over on the
	// server too (its old value no longer works).
	if r := c.post("/logout", nil); r.Status != http.StatusSeeOther {
		t.Fatalf("sign out: status %d:\n%s", r.Status, r.Body)
	}
	if r := c.get("/queues/work"); r.Status != http.StatusUnauthorized {
		t.Errorf("after sign-out: status %d, want 401", r.Status)
	}
	replay := newClient(t, http.NotFoundHandler())
	replay.srv = srv
	replay.hc.Transport = &http.Transport{TLSClientConfig: clientConf}
	replay.header.Set("Cookie", "streamq_dashboard_token="+session)
	if r := replay.get("/queues/work"); r.Status != http.StatusUnauthorized {
		t.Errorf("the session cookie replayed after sign-out: status %d, want 401", r.Status)
	}
	if got := len(audit.lines(t, "dashboard: audit")); got != 2 {
		t.Errorf("%d audit lines for sign-in and sign-out, want 2:\n%s", got, audit.text())
	}

	// Behind a proxy that terminates TLS, SecureCookies makes them Secure
	// on plain HTTP too.
	plain := newClient(t, newDashboard(t, f, dashboard.Options{SecureCookies: true}))
	r = plain.mustGet("/")
	if sc := r.Header.Get("Set-Cookie"); !strings.Contains(sc, "; Secure") {
		t.Errorf("SecureCookies: cookie %q is not Secure", sc)
	}
}

// TestAudit checks that every action is logged with who, what, where and
// how many.
func TestAudit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	var audit logs
	c := newClient(t, newDashboard(t, f, dashboard.Options{AuditLogger: audit.logger()}))
	c.mustGet("/")
	posts := []struct {
		path string
		form url.Values
	}{
		{"/queues/work/pause", nil},
		{"/queues/work/resume", nil},
		{"/queues/work/jobs/" + escapeID(f.retrying) + "/run", nil},
		{"/queues/work/jobs/" + escapeID(f.running) + "/cancel", nil},
		{"/queues/idle/jobs/" + escapeID(f.waiting[0]) + "/delete", nil},
		{"/queues/work/jobs/" + escapeID(f.dead) + "/requeue", nil},
	}
	for _, p := range posts {
		if r := c.post(p.path, p.form); r.Status != http.StatusSeeOther {
			t.Fatalf("POST %s: status %d:\n%s", p.path, r.Status, r.Body)
		}
	}
	f.waitState(t, "work", f.dead, "dead")
	if r := c.post("/queues/work/dead/purge", url.Values{"reason": {"permanent"}, "confirm": {"yes"}}); r.Status != http.StatusOK || !strings.Contains(r.Body, "bulk-done") {
		t.Fatalf("purge: status %d:\n%s", r.Status, r.Body)
	}
	// A refused action is logged too.
	if r := c.post("/queues/work/pause", url.Values{"csrf": {"bad"}}); r.Status != http.StatusForbidden {
		t.Fatalf("bad token: status %d", r.Status)
	}
	lines := audit.lines(t, "dashboard: audit")
	want := []struct {
		action, queue, job string
		count              float64
		level              string
	}{
		{"pause", "work", "", -1, "INFO"},
		{"resume", "work", "", -1, "INFO"},
		{"run", "work", f.retrying, 1, "INFO"},
		{"cancel", "work", f.running, 1, "INFO"},
		{"delete", "idle", f.waiting[0], 1, "INFO"},
		{"requeue", "work", f.dead, 1, "INFO"},
		{"dead-purge", "work", "", 1, "INFO"},
		{"pause", "work", "", -1, "WARN"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d audit lines, want %d:\n%s", len(lines), len(want), audit.text())
	}
	for i, w := range want {
		m := lines[i]
		count, hasCount := m["count"].(float64)
		if !hasCount {
			count = -1
		}
		job, _ := m["job"].(string)
		if m["action"] != w.action || m["queue"] != w.queue || job != w.job || count != w.count || m["level"] != w.level ||
			m["user"] != "anonymous" || !strings.HasPrefix(m["client"].(string), "127.0.0.1:") {
			t.Errorf("audit line %d = %v, want %+v by anonymous from 127.0.0.1", i, m, w)
		}
	}
	if lines[6]["filter"] != `reason="permanent"` {
		t.Errorf("the purge's line does not name its filter: %v", lines[6])
	}
}

// TestHidePayloads_ErrorsAndHeaders checks that HidePayloads hides errors
// and headers too, and refuses the searches that would reveal them.
func TestHidePayloads_ErrorsAndHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	c := newClient(t, newDashboard(t, f, dashboard.Options{HidePayloads: true}))
	for _, p := range []string{
		"/queues/work?state=retrying", "/queues/work?state=dead", "/queues/work/dead",
		"/queues/work/jobs/" + escapeID(f.dead), "/queues/work/jobs/" + escapeID(f.retrying), "/queues/idle/jobs/" + escapeID(f.waiting[1]),
	} {
		r := c.mustGet(p, "payloads hidden")
		for _, secret := range []string{"invalid customer id", "upstream said 503", "globex", "traceparent", "tenant", `name="error"`, `name="header"`} {
			if strings.Contains(r.Body, secret) {
				t.Errorf("%s shows %q with HidePayloads", p, secret)
			}
		}
	}
	for _, p := range []string{"/queues/work/dead?error=invalid", "/queues/idle?header=tenant%3Dglobex"} {
		if r := c.get(p); r.Status != http.StatusBadRequest || !strings.Contains(r.Body, "hidden") {
			t.Errorf("GET %s with HidePayloads: status %d, want 400 saying why", p, r.Status)
		}
	}
	c.mustGet("/queues/work/dead")
	if r := c.post("/queues/work/dead/purge", url.Values{"error": {"invalid"}}); r.Status != http.StatusBadRequest {
		t.Errorf("a bulk action filtered by error text with HidePayloads: status %d, want 400", r.Status)
	}
}

// TestBadInput checks that a bad cursor or reason is a 400 that says what
// to do, never a Redis error.
func TestBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	for _, p := range []string{
		"/queues/work?state=delayed&cursor=zzz", "/queues/work?state=retrying&cursor=1.5", "/queues/work?cursor=zzz",
		"/queues/work?state=running&cursor=1-2-3", "/queues/work?cursor=99999999999999999999-0",
		"/queues/work/dead?cursor=zzz", "/queues/work/dead?state=cancelled&cursor=x%20y",
	} {
		r := c.get(p)
		if r.Status != http.StatusBadRequest || !strings.Contains(r.Body, "cursor") || strings.Contains(r.Body, "ERR") || strings.Contains(r.Body, "Invalid stream ID") {
			t.Errorf("GET %s: status %d, want 400 about the cursor without a Redis error:\n%s", p, r.Status, regexpOr(r.Body))
		}
	}
	if r := c.get("/queues/work/dead?reason=bogus"); r.Status != http.StatusBadRequest || !strings.Contains(r.Body, "max_deliveries") {
		t.Errorf("reason=bogus: status %d, want 400 listing the reasons", r.Status)
	}
	// The cursor a page gives still works.
	r := c.mustGet("/queues/idle?limit=2", `id="next-page"`)
	next := regexpFind(t, r.Body, `href="([^"]+)" id="next-page"`)
	c.mustGet(strings.ReplaceAll(next, "&amp;", "&"), escapeID(f.waiting[2]))
}

// regexpOr returns the error paragraph of a page, or the page.
func regexpOr(body string) string {
	if i := strings.Index(body, `id="error"`); i >= 0 {
		return body[i:min(len(body), i+300)]
	}
	return body
}

// TestInvisibleCharacters checks that right-to-left overrides and other
// invisible characters in payloads, headers, errors and names are shown
// escaped, never raw.
func TestInvisibleCharacters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := context.Background()
	const rlo, zwsp, nul = "\u202E", "\u200B", "\x00"
	idle := f.prefix + ":{idle}"
	id, err := f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: idle + ":stream", Values: []any{
		"v", "1", "payload", "invoice " + rlo + "gpj.exe", "headers", `{"file":"a` + rlo + `b","z` + zwsp + `":"1"}`,
	}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: idle + ":dead", Values: []any{
		"dl_queue", "idle", "dl_id", "1-1", "dl_reason", "permanent", "dl_error", "bad " + rlo + "txt.exe" + nul, "dl_attempts", "1",
		"dl_failed", "1700000000000", "v", "1", "payload", "x",
	}}).Err(); err != nil {
		t.Fatal(err)
	}
	name := "ops" + rlo + "txt"
	if err := f.rdb.HSet(ctx, f.prefix+":queues", name, "stream").Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	for _, p := range []string{"/", "/queues/idle", "/queues/idle/jobs/" + escapeID(id), "/queues/idle/dead", "/queues/" + url.PathEscape(name)} {
		r := c.mustGet(p)
		if strings.Contains(r.Body, rlo) || strings.Contains(r.Body, zwsp) || strings.Contains(r.Body, nul) {
			t.Errorf("%s shows an invisible character raw", p)
		}
		if !strings.Contains(r.Body, `\u202e`) {
			t.Errorf("%s does not show the override escaped", p)
		}
	}
	c.mustGet("/queues/idle/jobs/"+escapeID(id), `invoice \u202egpj.exe`, `a\u202eb`, `z\u200b`)
	c.mustGet("/queues/idle/dead", `bad \u202etxt.exe`)
}

// TestQueuePage_NoHistoryAsBacklog checks that the pages show waiting and
// running jobs, not the stream's length, which counts acknowledged history.
func TestQueuePage_NoHistoryAsBacklog(t *testing.T) {
	t.Parallel()
	f := newFixture(t, true)
	f.settle(t)
	ctx := context.Background()
	q, err := f.in.Queue(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	// The finished jobs' acknowledgements are batched: wait for them, so
	// that the stream holds acknowledged history.
	var ov *inspect.Overview
	redistest.WaitFor(t, waitTimeout, "the fixture's finished jobs to be acknowledged (history in the stream)", func() bool {
		o, err := q.Overview(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ov = o
		return ov.Length > ov.Waiting+ov.Running
	})
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	r := c.mustGet("/queues/work", fmt.Sprintf(`id="stat-waiting">%d<`, ov.Waiting), fmt.Sprintf(`id="stat-running">%d<`, ov.Running))
	if strings.Contains(r.Body, "Depth") {
		t.Error("the queue page shows Depth")
	}
	if r := c.mustGet("/"); strings.Contains(r.Body, "Depth") {
		t.Error("the overview shows Depth")
	}
}

// TestEscaping checks that markup in payloads, headers, errors, queue names
// and request parameters is shown as text, never run.
func TestEscaping(t *testing.T) {
	t.Parallel()
	f := newFixture(t, false)
	ctx := context.Background()
	const tag = `<img src=x onerror=alert(1)>`
	base := f.prefix + ":{idle}"
	id, err := f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: base + ":stream", Values: []any{
		"v", "1", "payload", "<script>alert(1)</script>", "headers", `{"x":"\"` + tag + `"}`,
	}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.XAdd(ctx, &redis.XAddArgs{Stream: base + ":dead", Values: []any{
		"dl_queue", "idle", "dl_id", "1-1", "dl_reason", "permanent", "dl_error", "failed: " + tag, "dl_attempts", "1",
		"dl_failed", "1700000000000", "v", "1", "payload", "x",
	}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.HSet(ctx, f.prefix+":queues", `q"`+tag, "stream").Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, newDashboard(t, f, dashboard.Options{}))
	for _, p := range []string{
		"/", "/queues/idle/jobs/" + escapeID(id), "/queues/idle", "/queues/idle/dead",
		"/queues/idle?q=" + url.QueryEscape(tag) + "&header=" + url.QueryEscape("a="+tag),
		"/queues/idle/dead?error=" + url.QueryEscape(`"`+tag),
		"/queues/" + url.PathEscape(tag), "/queues/idle/jobs/" + url.PathEscape(tag),
	} {
		r := c.get(p)
		if strings.Contains(r.Body, tag) || strings.Contains(r.Body, "<script>alert") {
			t.Errorf("GET %s: markup from data shown raw (status %d)", p, r.Status)
		}
	}
	c.mustGet("/queues/idle/jobs/"+escapeID(id), "&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;img src=x onerror=alert(1)&gt;")
}
