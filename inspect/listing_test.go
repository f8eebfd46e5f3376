package inspect_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/streamq/streamq/inspect"
)

// TestQueue_JobsInvalidCursor checks that a cursor that no page returned is
// refused with ErrInvalidCursor, before Redis sees it.
func TestQueue_JobsInvalidCursor(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.enqueue(t, "a")
	ctx := context.Background()
	for _, c := range []struct {
		state  inspect.State
		cursor string
	}{
		{inspect.StateWaiting, "zzz"},
		{inspect.StateWaiting, "1-2-3"},
		{inspect.StateWaiting, "99999999999999999999-0"},
		{inspect.StateWaiting, "1"},
		{inspect.StateRunning, "x-1"},
		{inspect.StateDelayed, "zzz"},
		{inspect.StateRetrying, "12 "},
		{inspect.StateRetrying, "NaN m"},
		{inspect.StateDead, "1 m"},
		{inspect.StateCancelled, "zzz"},
	} {
		_, err := e.iq.Jobs(ctx, inspect.ListOptions{State: c.state, Cursor: c.cursor})
		if !errors.Is(err, inspect.ErrInvalidCursor) || !strings.Contains(err.Error(), "previous page") {
			t.Errorf("Jobs(%s, cursor %q) = %v, want ErrInvalidCursor saying what to pass", c.state, c.cursor, err)
		}
	}
	for _, c := range []struct {
		state  inspect.State
		cursor string
	}{{inspect.StateWaiting, "1-0"}, {inspect.StateDelayed, "1700000000000 member"}, {inspect.StateDead, "0-1"}} {
		if _, err := e.iq.Jobs(ctx, inspect.ListOptions{State: c.state, Cursor: c.cursor}); err != nil {
			t.Errorf("Jobs(%s, cursor %q) = %v, want nil", c.state, c.cursor, err)
		}
	}
}

// TestQueue_JobsDeadFilter checks that a filtered dead-letter listing looks
// at up to ScanLimit letters to fill its page, not only the page's worth.
func TestQueue_JobsDeadFilter(t *testing.T) {
	t.Parallel()
	e := setup(t, &inspect.Options{ScanLimit: 1000})
	for range 600 {
		e.addDead(t, "noise", "max_deliveries", "timeout")
	}
	want := e.addDead(t, "needle", "permanent", "no such customer")
	e.addDead(t, "other", "permanent", "bad card")
	ctx := context.Background()
	p, err := e.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateDead, Limit: 10, Dead: inspect.DeadFilter{Reason: "permanent", Error: "customer"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Jobs) != 1 || p.Jobs[0].EntryID != want || p.Scanned != 602 || p.Cursor != "" {
		t.Errorf("filtered page: %d jobs, scanned %d, cursor %q; want the one match after examining all 602", len(p.Jobs), p.Scanned, p.Cursor)
	}
	// The bound still holds: past ScanLimit, a cursor to go on.
	p, err = e.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateDead, Limit: 10, Dead: inspect.DeadFilter{Reason: "permanent", Error: "nothing matches"}})
	if err != nil || p.Scanned != 602 || len(p.Jobs) != 0 {
		t.Errorf("no match: %+v, %v", p, err)
	}
	small := setup(t, &inspect.Options{ScanLimit: 100})
	for range 150 {
		small.addDead(t, "noise", "max_deliveries", "timeout")
	}
	p, err = small.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateDead, Dead: inspect.DeadFilter{Reason: "permanent"}})
	if err != nil || p.Scanned != 100 || p.Cursor == "" {
		t.Errorf("beyond ScanLimit: scanned %d, cursor %q, %v; want 100 and a cursor", p.Scanned, p.Cursor, err)
	}
}

func TestParseReason(t *testing.T) {
	t.Parallel()
	for _, r := range inspect.Reasons() {
		if got, err := inspect.ParseReason(r); err != nil || got != r {
			t.Errorf("ParseReason(%q) = %q, %v", r, got, err)
		}
	}
	_, err := inspect.ParseReason("bogus")
	if !errors.Is(err, inspect.ErrUnknownReason) || !strings.Contains(err.Error(), "max_deliveries, permanent, malformed, cancelled") {
		t.Errorf("ParseReason(bogus) = %v, want ErrUnknownReason listing the reasons", err)
	}
}
