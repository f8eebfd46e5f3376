package testworker

import (
	"context"
	"errors"
	"flag"
	"testing"
	"time"
)

func TestRange(t *testing.T) {
	for _, c := range []struct {
		in       string
		min, max time.Duration
		str      string
	}{
		{"5ms", 5 * time.Millisecond, 5 * time.Millisecond, "5ms"},
		{"0s", 0, 0, "0s"},
		{"1ms-5ms", time.Millisecond, 5 * time.Millisecond, "1ms-5ms"},
		{"2s-2s", 2 * time.Second, 2 * time.Second, "2s"},
	} {
		var r Range
		if err := r.Set(c.in); err != nil {
			t.Errorf("Set(%q): %v", c.in, err)
			continue
		}
		if r.Min != c.min || r.Max != c.max || r.String() != c.str {
			t.Errorf("Set(%q) = %v-%v %q, want %v-%v %q", c.in, r.Min, r.Max, r.String(), c.min, c.max, c.str)
		}
		for range 100 {
			if d := r.Pick(); d < r.Min || d > r.Max {
				t.Fatalf("%q: Pick() = %v, out of range", c.in, d)
			}
		}
	}
	for _, bad := range []string{"", "x", "5ms-", "5ms-1ms", "-1ms", "1ms-x"} {
		var r Range
		if err := r.Set(bad); err == nil {
			t.Errorf("Set(%q) = nil, want an error", bad)
		}
	}

	// As a flag, with its default shown as set.
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	r := Range{Min: time.Millisecond, Max: 5 * time.Millisecond}
	fs.Var(&r, "work", "")
	if def := fs.Lookup("work").DefValue; def != "1ms-5ms" {
		t.Errorf("default %q, want 1ms-5ms", def)
	}
	if err := fs.Parse([]string{"-work", "3ms-9ms"}); err != nil || r != (Range{3 * time.Millisecond, 9 * time.Millisecond}) {
		t.Errorf("-work 3ms-9ms: %v, %+v", err, r)
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep: %v", err)
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Errorf("Sleep(0): %v", err)
	}
	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := Sleep(ctx, time.Hour); !errors.Is(err, cause) {
		t.Errorf("Sleep after cancel = %v, want the cause", err)
	}
}
