package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/redistest"
)

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

	cmd := exec.CommandContext(ctx, binary, "dashboard", "--listen", "127.0.0.1:0", "--read-only")
	cmd.Env = append(cleanEnv(), "REDIS_URL=redis://"+redistest.Addr(), "STREAMQ_PREFIX="+e.prefix)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()

	// The first line names the address it listens on.
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the dashboard's first line: %v (got %q)", err, line)
	}
	m := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/) \(prefix ` + regexp.QuoteMeta(e.prefix) + `, read-only\)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first line %q does not name the address, the prefix and read-only", line)
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m[1], nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "mail") {
		t.Fatalf("GET %s: %s, body without the queue \"mail\":\n%.2000s", m[1], resp.Status, body)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	exited = true
	var ee *exec.ExitError
	if errors.As(err, &ee) || err != nil {
		t.Fatalf("after an interrupt the dashboard exited with %v, want exit code 0", err)
	}
}

// TestCLI_DashboardRefusesOpenListen checks that the dashboard does not
// listen beyond loopback without authentication.
func TestCLI_DashboardRefusesOpenListen(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.run("", "dashboard", "--listen", "0.0.0.0:0")
	if r.code != 2 || !strings.Contains(r.stderr, "STREAMQ_DASHBOARD_TOKEN") {
		t.Fatalf("dashboard --listen 0.0.0.0:0 without auth: exit code %d (want 2), stderr:\n%s", r.code, r.stderr)
	}
}
