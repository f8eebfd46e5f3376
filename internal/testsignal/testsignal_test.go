package testsignal

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeTB records a Fatalf instead of failing the test.
type fakeTB struct{ fatal string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
}

func TestSignal_NilFiresNothing(t *testing.T) {
	t.Parallel()
	var s *Signal[int]
	s.Fire(1) // no panic, no effect
	if got := From(context.Background()); got.Paused != nil || got.LoopDone != nil {
		t.Errorf("From(a context without signals) = %+v, want no signals", got)
	}
}

func TestSignal_WaitAndWaitFor(t *testing.T) {
	t.Parallel()
	s := New[string]()
	s.Fire("a")
	if got := s.Wait(t, time.Second, "a"); got != "a" {
		t.Errorf("Wait = %q, want a", got)
	}
	go func() {
		for _, v := range []string{"b", "c", "d"} {
			s.Fire(v)
		}
	}()
	if got := s.WaitFor(t, 10*time.Second, "c", func(v string) bool { return v == "c" }); got != "c" {
		t.Errorf("WaitFor = %q, want c", got)
	}
	if got := s.Wait(t, 10*time.Second, "d"); got != "d" {
		t.Errorf("Wait after WaitFor = %q, want d (the events before c were discarded)", got)
	}
	s.Fire("old")
	s.Clear()
	s.Fire("new")
	if got := s.Wait(t, time.Second, "new"); got != "new" {
		t.Errorf("Wait after Clear = %q, want new", got)
	}
}

func TestSignal_WaitTimesOut(t *testing.T) {
	t.Parallel()
	s := New[int]()
	var tb fakeTB
	start := time.Now()
	s.Wait(&tb, 20*time.Millisecond, "the moon to turn blue")
	if !strings.Contains(tb.fatal, "timed out after 20ms waiting for: the moon to turn blue") {
		t.Errorf("fatal message %q", tb.fatal)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Error("Wait gave up before its timeout")
	}
}

func TestSignal_OverflowFailsTheWait(t *testing.T) {
	t.Parallel()
	s := New[int]()
	for i := range bufferSize + 1 {
		s.Fire(i) // never blocks
	}
	var tb fakeTB
	s.Wait(&tb, time.Second, "anything")
	if !strings.Contains(tb.fatal, "dropped") {
		t.Errorf("fatal message %q, want one about dropped events", tb.fatal)
	}
	s.Clear()
	tb = fakeTB{}
	s.Fire(7)
	if got := s.Wait(&tb, time.Second, "7"); got != 7 || tb.fatal != "" {
		t.Errorf("after Clear: Wait = %d, fatal %q", got, tb.fatal)
	}
}

func TestSignals_Run(t *testing.T) {
	t.Parallel()
	sig := &Signals{Paused: New[struct{}]()}
	err := sig.Run(func(ctx context.Context) error {
		From(ctx).Paused.Fire(struct{}{})
		return nil
	})(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sig.Paused.Wait(t, time.Second, "the run's signal")
}
