package keyaudit

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Run(m)) }

// TestAudit runs three scripts under an audit of a server of the test's
// own: one that touches only its declared key, one that touches a key it
// derives and has a probed twin, one that derives a key without one. The
// check names the last alone.
func TestAudit(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	derive := "redis.call('SET', KEYS[1] .. ':derived', 1) return 1"
	scripts := map[string]*redis.Script{
		"declared":        redis.NewScript("redis.call('SET', KEYS[1], 1) return 1"),
		"probed":          redis.NewScript(derive),
		"probed@cluster":  redis.NewScript("-- probe\n" + derive),
		"derives-unaided": redis.NewScript("redis.call('INCR', KEYS[1] .. ':count') return 1"),
	}
	check := Around(scripts)(srv.Addr(), true)
	if check == nil {
		t.Fatal("no check for a private server")
	}
	ctx := context.Background()
	for _, name := range []string{"declared", "probed", "derives-unaided"} {
		if err := scripts[name].Run(ctx, c, []string{"{k}:" + name}).Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	err := check()
	if err == nil {
		t.Fatal("the audit let a script without a probe touch an undeclared key")
	}
	if msg := err.Error(); !strings.Contains(msg, "derives-unaided: INCR {k}:derives-unaided:count") ||
		strings.Contains(msg, "probed:") || strings.Contains(msg, "declared:") {
		t.Errorf("the audit's report names the wrong scripts: %v", err)
	}
	if Around(scripts)(srv.Addr(), false) != nil {
		t.Error("a shared server is audited")
	}
}

// TestMonitorArgs splits a MONITOR line with Redis's escapes.
func TestMonitorArgs(t *testing.T) {
	t.Parallel()
	got, err := monitorArgs(`"EVAL" "return \"x\"\n" "1" "a\\b" "\xff\x00" ""`)
	want := []string{"EVAL", "return \"x\"\n", "1", `a\b`, "\xff\x00", ""}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("monitorArgs = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{`EVAL`, `"unterminated`, `"\x1"`} {
		if _, err := monitorArgs(bad); err == nil {
			t.Errorf("monitorArgs(%q) succeeded", bad)
		}
	}
}
