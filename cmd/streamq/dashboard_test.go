package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/outbox/sqlite"
	wbsqlite "github.com/streamq/streamq/writebehind/sqlite"
)

// dashboardProc is a `streamq dashboard` process of a test.
type dashboardProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string // the address it printed, like http://127.0.0.1:1234/
	first  string // its first line
	mu     sync.Mutex
	stderr bytes.Buffer // the rest of its stderr
	copied chan struct{}
	exited bool
}

// startDashboard runs `streamq dashboard args...` on a free loopback port
// with the test's Redis and prefix and the extra environment, and waits for
// the line that names its address.
func (e *env) startDashboard(ctx context.Context, extraEnv []string, args ...string) *dashboardProc {
	e.t.Helper()
	t := e.t
	cmd := exec.CommandContext(ctx, binary, append([]string{"dashboard", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(cleanEnv(), "REDIS_URL=redis://"+redistest.Addr(), "STREAMQ_PREFIX="+e.prefix), extraEnv...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &dashboardProc{t: t, cmd: cmd, copied: make(chan struct{})}
	t.Cleanup(func() {
		if !p.exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	rd := bufio.NewReader(stderr)
	if p.first, err = rd.ReadString('\n'); err != nil {
		t.Fatalf("reading the dashboard's first line: %v (got %q)", err, p.first)
	}
	m := regexp.MustCompile(`on (https?://127\.0\.0\.1:\d+/) \(prefix ` + regexp.QuoteMeta(e.prefix)).FindStringSubmatch(p.first)
	if m == nil {
		t.Fatalf("first line %q does not name the address and the prefix", p.first)
	}
	p.url = m[1]
	go func() {
		defer close(p.copied)
		_, _ = io.Copy(p, rd)
	}()
	return p
}

func (p *dashboardProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

// stop interrupts the process, checks that it exits with code 0, and
// returns what it wrote on stderr after its first line.
func (p *dashboardProc) stop() string {
	p.t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		p.t.Fatal(err)
	}
	// Read stderr to its end before Wait, which closes the pipe once the
	// process exited and would drop what the copy has not read yet.
	<-p.copied
	err := p.cmd.Wait()
	p.exited = true
	if err != nil {
		p.t.Fatalf("after an interrupt the dashboard exited with %v, want exit code 0", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// TestCLI_Dashboard serves the dashboard as a process on a free loopback
// port, loads its overview (which lists the test's queue), and stops it with
// an interrupt: it shuts down cleanly with exit code 0.
func TestCLI_Dashboard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := mustQueue(t, e.rdb, e.prefix, "mail").Setup(ctx); err != nil {
		t.Fatal(err)
	}
	p := e.startDashboard(ctx, nil, "--read-only")
	if !strings.Contains(p.first, "read-only)") {
		t.Errorf("first line %q does not say read-only", p.first)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "mail") {
		t.Fatalf("GET %s: %s, body without the queue \"mail\":\n%.2000s", p.url, resp.Status, body)
	}
	// A name that only resolves to loopback (DNS rebinding) is refused.
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	req.Host = "rebind.example:8080"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("Host rebind.example: %v, %v; want 421", resp, err)
	} else {
		resp.Body.Close()
	}
	p.stop()
}

// TestCLI_DashboardTLS serves HTTPS with a certificate of a throwaway CA,
// with a token, an allowed host and hidden payloads: cookies are Secure,
// actions and failed sign-ins are logged on stderr, payloads are hidden.
func TestCLI_DashboardTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	q := mustQueue(t, e.rdb, e.prefix, "mail")
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	e.ok("enqueue", "mail", `{"to":"secret-recipient@example.com"}`)
	cert, key, clientConf := redistest.TLSCertificate(t)
	const token = "a-token-of-32-random-characters!"
	p := e.startDashboard(ctx, []string{envDashboardToken + "=" + token},
		"--tls-cert", cert, "--tls-key", key, "--allowed-host", "jobs.test", "--hide-payloads", "--session-ttl", "2h")
	if !strings.HasPrefix(p.url, "https://") || !strings.Contains(p.first, "payloads hidden") {
		t.Fatalf("first line %q: want https and payloads hidden", p.first)
	}
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Transport: &http.Transport{TLSClientConfig: clientConf},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, host string, form url.Values, bearer string) (*http.Response, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(p.url, "/")+path, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", strings.TrimSuffix(p.url, "/"))
		}
		if host != "" {
			req.Host = host
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, _ := do("GET", "/", "jobs.test", nil, token); resp.StatusCode != http.StatusOK {
		t.Errorf("GET / as jobs.test with the token: %s", resp.Status)
	}
	if resp, _ := do("GET", "/", "other.test", nil, token); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("GET / as other.test: %s, want 421", resp.Status)
	}
	resp, _ := do("POST", "/login", "", url.Values{"token": {token}}, "")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: %s", resp.Status)
	}
	for _, c := range resp.Cookies() {
		if !c.Secure || c.MaxAge != 7200 {
			t.Errorf("cookie %s: Secure %v, Max-Age %d; want Secure, 2h", c.Name, c.Secure, c.MaxAge)
		}
	}
	resp, page := do("GET", "/queues/mail", "", nil, "")
	if resp.StatusCode != http.StatusOK || strings.Contains(page, "secret-recipient") || !strings.Contains(page, `id="logout"`) {
		t.Fatalf("the queue page in the session: %s; payload shown or no sign-out:\n%.1500s", resp.Status, page)
	}
	csrf := regexp.MustCompile(`name="csrf" (?:value|content)="([0-9a-f]+)"`).FindStringSubmatch(page)
	if csrf == nil {
		t.Fatal("no CSRF token on the page")
	}
	if resp, _ := do("POST", "/queues/mail/pause", "", url.Values{"csrf": {csrf[1]}}, ""); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("pause: %s", resp.Status)
	}
	hc.Jar = nil // a client without the session
	if resp, _ := do("GET", "/", "", nil, "not-the-token"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token: %s, want 401", resp.Status)
	}
	log := p.stop()
	for _, want := range []string{"dashboard: audit", "action=pause", "user=token", "queue=mail", "dashboard: failed sign-in", "method=bearer"} {
		if !strings.Contains(log, want) {
			t.Errorf("stderr lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "not-the-token") || strings.Contains(log, token) {
		t.Errorf("stderr shows a token:\n%s", log)
	}
}

// TestCLI_DashboardRefusesOpenListen checks that the dashboard does not
// listen beyond loopback without authentication, and refuses weak
// passwords and half a TLS setup.
func TestCLI_DashboardRefusesOpenListen(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("", "dashboard", "--listen", "0.0.0.0:0")
	if r.code != 2 || !strings.Contains(r.stderr, "STREAMQ_DASHBOARD_TOKEN") {
		t.Fatalf("dashboard --listen 0.0.0.0:0 without auth: exit code %d (want 2), stderr:\n%s", r.code, r.stderr)
	}
	r = runIn(t, "", []string{"REDIS_URL=redis://" + redistest.Addr(), envDashboardUser + "=ops", envDashboardPassword + "=hunter2"}, "dashboard", "--listen", "0.0.0.0:0")
	if r.code != 2 || !strings.Contains(r.stderr, "at least 15") {
		t.Errorf("a weak password: exit code %d (want 2), stderr:\n%s", r.code, r.stderr)
	}
	if r := e.run("", "dashboard", "--tls-cert", "x.pem"); r.code != 2 || !strings.Contains(r.stderr, "--tls-key") {
		t.Errorf("--tls-cert alone: exit code %d, stderr %s", r.code, r.stderr)
	}
}

// TestCLI_DashboardOutbox serves the dashboard with --outbox-sqlite: the
// Outbox page shows the table's rows waiting; both databases at once are a
// usage error naming the dashboard's flags.
func TestCLI_DashboardOutbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	file := filepath.Join(t.TempDir(), "app.db")
	e.ok("outbox", "migrate", "--sqlite", file)
	db, err := wbsqlite.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ob, err := sqlite.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := mustQueue(t, e.rdb, e.prefix, "orders")
	for _, p := range []string{"a", "b"} {
		if _, err := ob.Enqueue(ctx, db, q, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	p := e.startDashboard(ctx, nil, "--outbox-sqlite", file)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"outbox", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `<b class="outbox-rows">2</b>`) || !strings.Contains(string(body), "streamq_outbox ("+file+")") {
		t.Errorf("GET %soutbox: %s:\n%.3000s", p.url, resp.Status, body)
	}
	p.stop()
	r := e.run("", "dashboard", "--listen", "127.0.0.1:0", "--outbox-sqlite", file, "--outbox-postgres", "postgres://127.0.0.1/test")
	if r.code != 2 || !strings.Contains(r.stderr, "--outbox-postgres DSN or --outbox-sqlite FILE") {
		t.Errorf("both outbox databases: exit code %d, stderr %q; want a usage error naming the flags", r.code, r.stderr)
	}
}
