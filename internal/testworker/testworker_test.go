package testworker

import (
	"context"
	"errors"
	"flag"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
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

func TestNumbers(t *testing.T) {
	var n Numbers
	if n.Has(0) || n.String() != "" {
		t.Errorf("zero Numbers: Has(0)=%v String()=%q, want the empty set", n.Has(0), n.String())
	}
	for _, c := range []struct {
		in      string
		str     string
		in1     []int
		notIn   []int
		wantErr bool
	}{
		{in: "7", str: "7", in1: []int{7}, notIn: []int{6, 8}},
		{in: "1000-1024,1030", str: "1000-1024,1030", in1: []int{1000, 1012, 1024, 1030}, notIn: []int{999, 1025, 1029}},
		{in: "0-0", str: "0", in1: []int{0}, notIn: []int{1}},
		{in: "", wantErr: true},
		{in: "x", wantErr: true},
		{in: "5-", wantErr: true},
		{in: "5-1", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "1,,2", wantErr: true},
	} {
		var n Numbers
		err := n.Set(c.in)
		if c.wantErr {
			if err == nil {
				t.Errorf("Set(%q) = nil, want an error", c.in)
			}
			continue
		}
		if err != nil || n.String() != c.str {
			t.Errorf("Set(%q): %v, String() = %q, want %q", c.in, err, n.String(), c.str)
		}
		for _, x := range c.in1 {
			if !n.Has(x) {
				t.Errorf("Set(%q): Has(%d) = false", c.in, x)
			}
		}
		for _, x := range c.notIn {
			if n.Has(x) {
				t.Errorf("Set(%q): Has(%d) = true", c.in, x)
			}
		}
	}
}

func TestQuiesce(t *testing.T) {
	var stopped, fetching, jobs, waiting, running atomic.Int64
	fetching.Store(1)
	jobs.Store(3) // one started, one waiting to run alone, one not yet started
	waiting.Store(1)
	running.Store(1)
	health := func() streamq.Health {
		return streamq.Health{Fetching: fetching.Load() == 1, Jobs: int(jobs.Load()), Waiting: int(waiting.Load())}
	}
	stop := func() { stopped.Add(1); fetching.Store(0) }
	if Quiesce(stop, health, running.Load, 20*time.Millisecond) {
		t.Error("Quiesce = true while a held job has not started")
	}
	if stopped.Load() != 1 {
		t.Errorf("stop called %d times, want 1", stopped.Load())
	}
	done := make(chan bool)
	go func() { done <- Quiesce(stop, health, running.Load, 10*time.Second) }()
	running.Add(1) // the last job starts
	if !<-done {
		t.Error("Quiesce = false once every held job started or waits")
	}
}
