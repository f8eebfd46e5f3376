package engine

import (
	"log/slog"
	"testing"
	"time"
)

// TestMonitor_StartLease: a read may skip the pause flag only while the
// lease lasts; a held lease cannot be revoked until the fetch loop released
// it (so a pause's end comes after the starts it allowed); a revoked or
// lapsed lease is not held.
func TestMonitor_StartLease(t *testing.T) {
	t.Parallel()
	m := NewMonitor("q", slog.New(slog.DiscardHandler), nil)
	l := &m.lease
	if m.Leased() || m.HoldLease() {
		t.Fatal("a new monitor holds a lease")
	}
	l.extend(time.Now().Add(time.Hour))
	if !m.Leased() {
		t.Fatal("no lease after extend")
	}
	if !m.HoldLease() {
		t.Fatal("a lasting lease cannot be held")
	}
	if l.mu.TryLock() {
		t.Fatal("a held lease could be revoked")
	}
	l.release()
	if !l.mu.TryLock() {
		t.Fatal("a released lease cannot be revoked")
	}
	l.mu.Unlock()
	l.release() // a second release does nothing
	l.revoke()
	if m.Leased() || m.HoldLease() {
		t.Fatal("a revoked lease still lasts")
	}
	l.extend(time.Now().Add(-time.Millisecond))
	if m.Leased() || m.HoldLease() {
		t.Fatal("a lapsed lease still lasts")
	}
}
