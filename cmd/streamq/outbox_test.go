package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/outbox/sqlite"
	wbsqlite "github.com/streamq/streamq/writebehind/sqlite"
)

// TestOutbox: migrate creates the table, status shows the committed rows,
// relay --once moves them to the queue, and status then shows none; a
// command without its database or queues is a usage error.
func TestOutbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	file := filepath.Join(t.TempDir(), "app.db")
	if out := e.ok("outbox", "migrate", "--sqlite", file); !strings.Contains(out, "ready") {
		t.Errorf("migrate printed %q", out)
	}
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
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b", "c"} {
		if _, err := ob.Enqueue(ctx, tx, q, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	status := func() outboxStatusJSON {
		t.Helper()
		var s outboxStatusJSON
		if err := json.Unmarshal([]byte(e.ok("outbox", "status", "--sqlite", file, "--json")), &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := status(); s.Rows != 3 || len(s.Queues) != 1 || s.Queues[0].Queue != "orders" {
		t.Errorf("status before relaying: %+v, want 3 rows of orders", s)
	}
	if out := e.ok("outbox", "status", "--sqlite", file); !strings.Contains(out, "orders") {
		t.Errorf("status table: %q", out)
	}
	if out := e.ok("outbox", "relay", "--sqlite", file, "--queue", "orders", "--once"); !strings.Contains(out, "relayed 3 rows") {
		t.Errorf("relay --once printed %q", out)
	}
	if n := e.rdb.XLen(ctx, e.keys("orders").Stream).Val(); n != 3 {
		t.Errorf("stream holds %d jobs after the relay, want 3", n)
	}
	if s := status(); s.Rows != 0 {
		t.Errorf("status after relaying: %+v, want no rows", s)
	}
	r := runIn(t, "", []string{"REDIS_URL=" + badURLs["port"]}, "outbox", "relay", "--sqlite", file, "--queue", "orders", "--once")
	if r.code == 0 || !strings.Contains(r.stderr, "xxxxx") || strings.Contains(r.stdout+r.stderr, secret) {
		t.Errorf("relay with a malformed Redis URL: exit code %d, stderr %q; want an error naming the redacted URL", r.code, r.stderr)
	}
	for _, args := range [][]string{
		{"outbox", "status"},
		{"outbox", "status", "--sqlite", file, "--postgres", "postgres://x"},
		{"outbox", "relay", "--sqlite", file},
		{"outbox", "relay", "--sqlite", file, "--queue", "orders", "--batch", "-1"},
	} {
		if r := e.run("", args...); r.code != exitUsage {
			t.Errorf("streamq %s: exit code %d, want %d (usage)\n%s", strings.Join(args, " "), r.code, exitUsage, r.stderr)
		}
	}
}
