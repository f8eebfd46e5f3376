package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// secret is the password of the malformed URLs of TestCLI_RedactsURL.
const secret = "Tr0ub4dor-and-3"

// badURLs are Redis URLs that do not parse, each with the password.
var badURLs = map[string]string{
	"port":     "redis://ops:" + secret + "@127.0.0.1:63x9/0",
	"database": "redis://ops:" + secret + "@127.0.0.1:6379/zero",
	"option":   "redis://ops:" + secret + "@127.0.0.1:6379/0?dial_timout=1s",
	"scheme":   "http://ops:" + secret + "@127.0.0.1:6379",
	"slash":    "redis://ops:" + secret + "/x@127.0.0.1:6379",
}

// commandLines returns one command line for every subcommand of the root
// command, with its required arguments filled in.
func commandLines(t *testing.T) [][]string {
	t.Helper()
	root := newRoot(&app{env: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	var lines [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		for _, sub := range c.Commands() {
			p := append(append([]string(nil), path...), sub.Name())
			walk(sub, p)
			if sub.HasSubCommands() && !strings.Contains(sub.Use, "<queue>") {
				continue // a group: it prints its help
			}
			line := append([]string(nil), p...)
			for _, w := range strings.Fields(sub.Use)[1:] {
				switch {
				case strings.HasPrefix(w, "<queue>"):
					line = append(line, "orders")
				case strings.HasPrefix(w, "<id>"), strings.HasPrefix(w, "[id"):
					line = append(line, "1-1")
				case strings.HasPrefix(w, "[payload"):
					line = append(line, "{}")
				case w == "<n>":
					line = append(line, "2")
				}
			}
			lines = append(lines, line)
		}
	}
	walk(root, nil)
	if len(lines) < 20 {
		t.Fatalf("found %d command lines, want every subcommand: %v", len(lines), lines)
	}
	return lines
}

// TestCLI_RedactsURL runs every subcommand with malformed Redis URLs that
// hold a password, in REDIS_URL and in --url: the password is never shown,
// and the commands that connect say what is wrong with the URL.
func TestCLI_RedactsURL(t *testing.T) {
	t.Parallel()
	for _, line := range commandLines(t) {
		for kind, u := range badURLs {
			for _, viaFlag := range []bool{false, true} {
				args, env := line, "REDIS_URL="+u
				if viaFlag {
					args, env = append([]string{"--url", u}, line...), "REDIS_URL="
				}
				r := runIn(t, "", []string{env}, args...)
				if strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("streamq %s (%s, flag %v) shows the password:\nstdout: %s\nstderr: %s", strings.Join(args, " "), kind, viaFlag, r.stdout, r.stderr)
				}
				// version and outbox status|migrate never connect; outbox
				// relay checks its flags first (TestOutbox checks its URL).
				if line[0] != "version" && line[0] != "outbox" && (r.code == 0 || !strings.Contains(r.stderr, "xxxxx")) {
					t.Errorf("streamq %s (%s): exit code %d, stderr %q; want an error naming the redacted URL", strings.Join(args, " "), kind, r.code, r.stderr)
				}
			}
		}
	}
}

// TestDemo_RedactsURL runs the demo (cmd/worker-example) with the same
// malformed REDIS_URLs. The demo uses public packages only, so it does not
// show the URL at all.
func TestDemo_RedactsURL(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "worker-example")
	if out, err := exec.Command("go", "build", "-o", bin, "../worker-example").CombinedOutput(); err != nil {
		t.Fatalf("go build worker-example: %v\n%s", err, out)
	}
	for kind, u := range badURLs {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(cleanEnv(), "REDIS_URL="+u)
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil || strings.Contains(string(out), secret) || !strings.Contains(string(out), "not shown") {
			t.Errorf("demo with a bad %s in REDIS_URL: err %v, output:\n%s\nwant a failure saying the URL is not shown, without the password", kind, err, out)
		}
	}
}
