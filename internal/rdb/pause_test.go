package rdb

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestQueue_StartLease: a lease is granted only while the queue runs and
// counted until it is given back (DropStartLease, Leave); a paused queue
// grants none and leaves the open ones alone (only their consumers give
// them back).
func TestQueue_StartLease(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	open := func() int64 {
		t.Helper()
		n, err := e.q.StartLeases(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, name := range []string{"a", "b"} {
		if flag, err := e.q.TakeStartLease(e.ctx, name); err != nil || flag != "" {
			t.Fatalf("lease of %s on a running queue: %q, %v", name, flag, err)
		}
	}
	if n := open(); n != 2 {
		t.Fatalf("%d leases open, want 2", n)
	}
	if end := e.c.ZScore(e.ctx, e.k.StartLeases, "a").Val(); end <= 0 {
		t.Fatalf("lease end %v", end)
	}
	if err := e.c.Set(e.ctx, e.k.Paused, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if flag, err := e.q.TakeStartLease(e.ctx, "c"); err != nil || flag != "1" {
		t.Fatalf("lease on a paused queue: %q, %v; want the flag", flag, err)
	}
	if n := open(); n != 2 {
		t.Fatalf("%d leases open after a refused one, want 2", n)
	}
	if err := e.q.DropStartLease(e.ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := e.q.Leave(e.ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if n := open(); n != 0 {
		t.Fatalf("%d leases open after both were given back", n)
	}
	// A lease whose end passed is not counted.
	if err := e.c.ZAdd(e.ctx, e.k.StartLeases, redis.Z{Score: 1, Member: "old"}).Err(); err != nil {
		t.Fatal(err)
	}
	if n := open(); n != 0 {
		t.Fatalf("an ended lease is counted (%d)", n)
	}
}
