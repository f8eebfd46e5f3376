package inspect

import (
	"errors"
	"slices"
	"testing"
)

func TestSimilar(t *testing.T) {
	t.Parallel()
	names := []string{"emails", "email-digest", "orders", "reports", "mail"}
	tests := []struct {
		name string
		want []string
	}{
		{"email", []string{"emails", "mail", "email-digest"}},
		{"ordrs", []string{"orders"}},
		{"zzzzzz", []string{}},
	}
	for _, tt := range tests {
		if got := similar(tt.name, names); !slices.Equal(got, tt.want) {
			t.Errorf("similar(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	nf := &NotFoundError{What: "job", Name: "1-1"}
	if !errors.Is(nf, ErrJobNotFound) || errors.Is(nf, ErrQueueNotFound) {
		t.Errorf("%v: wrong Is", nf)
	}
	tests := []struct {
		err  StateError
		want string
	}{
		{StateError{ID: "7-0", State: StateRunning, Action: "delete"}, "inspect: job 7-0 is running: cannot delete; cancel it first"},
		{StateError{ID: "7-0", State: StateDone, Action: "cancel"}, "inspect: job 7-0 is done: cannot cancel"},
		{StateError{ID: "7-0", State: StateWaiting, Action: "run now"}, "inspect: job 7-0 is waiting: cannot run now; only delayed and retrying jobs can be run now"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%q, want %q", got, tt.want)
		}
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	for _, s := range states {
		if got, err := ParseState(string(s)); err != nil || got != s {
			t.Errorf("ParseState(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseState("sleeping"); err == nil {
		t.Error("sleeping parsed")
	}
}

func TestParsers(t *testing.T) {
	t.Parallel()
	if got := traceID("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("traceID = %q", got)
	}
	if got := traceID("garbage"); got != "" {
		t.Errorf("traceID(garbage) = %q", got)
	}
	lm := "00000000000000000007:-5:1795-0|worker:a:b.c:3"
	if got := leaseOwner(lm); got != "worker:a" {
		t.Errorf("leaseOwner = %q", got)
	}
	if got := memberID(lm); got != "1795-0" {
		t.Errorf("memberID = %q", got)
	}
	if !idLess("9-1", "10-0") || idLess("10-0", "9-9") || !idLess("5-2", "5-10") {
		t.Error("idLess")
	}
	for s, want := range map[string]bool{"1-2": true, "12": true, "d-abc": false, "1-": false, "": false} {
		if streamID(s) != want {
			t.Errorf("streamID(%q) != %v", s, want)
		}
	}
}
