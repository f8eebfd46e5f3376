// Package testsignal lets tests wait for events inside the engine instead
// of polling Redis for their effects (River's rivershared/testsignal is the
// model): the engine fires a signal when its fetch loop stops for a pause,
// or when a maintenance loop (moving due jobs, pruning consumers, reaping
// leases) finished a tick, and a test waits for it with a timeout.
//
// A test asks for signals by putting them in the context of a run:
//
//	sig := &testsignal.Signals{Paused: testsignal.New[struct{}]()}
//	redistest.Background(t, "consumer", time.Minute, sig.Run(c.Run))
//	...
//	sig.Paused.Wait(t, 10*time.Second, "the fetch loop to stop for the pause")
//
// A signal nobody asked for is a nil pointer: firing it costs one nil check,
// and a run reads the context once, when it starts. Users cannot ask for
// signals (the package is internal), so the engine behaves the same with or
// without them.
package testsignal

import (
	"context"
	"sync/atomic"
	"time"
)

// bufferSize bounds the events a signal keeps until a test takes them.
const bufferSize = 1024

// TB is the part of testing.TB that waiting uses. (This package does not
// import testing: the engine links it into every program.)
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Signal is one kind of event, with a value of type T. Create it with
// [New]. Firing a nil *Signal does nothing, so production code fires
// signals without checking whether a test asked for them.
type Signal[T any] struct {
	ch       chan T
	overflow atomic.Bool
}

// New returns a signal that keeps up to 1,024 events until they are waited
// for.
func New[T any]() *Signal[T] { return &Signal[T]{ch: make(chan T, bufferSize)} }

// Fire records an event with value v. It never blocks: when the buffer is
// full the event is dropped and the next wait fails the test.
func (s *Signal[T]) Fire(v T) {
	if s == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		s.overflow.Store(true)
	}
}

// Wait returns the value of the next event, waiting for one if none was
// fired yet, or fails the test with msg once timeout has passed. Like
// t.Fatalf, it must be called from the test's goroutine.
func (s *Signal[T]) Wait(tb TB, timeout time.Duration, msg string) T {
	tb.Helper()
	return s.WaitFor(tb, timeout, msg, func(T) bool { return true })
}

// WaitFor returns the value of the first event for which cond is true,
// discarding the events before it, or fails the test with msg once timeout
// has passed.
func (s *Signal[T]) WaitFor(tb TB, timeout time.Duration, msg string, cond func(T) bool) T {
	tb.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.checkOverflow(tb)
		select {
		case v := <-s.ch:
			if cond(v) {
				return v
			}
		case <-timer.C:
			var zero T
			tb.Fatalf("testsignal: timed out after %v waiting for: %s", timeout, msg)
			return zero
		}
	}
}

// Clear discards the events fired so far, so that the next wait returns an
// event fired after it.
func (s *Signal[T]) Clear() {
	for {
		select {
		case <-s.ch:
		default:
			s.overflow.Store(false)
			return
		}
	}
}

func (s *Signal[T]) checkOverflow(tb TB) {
	tb.Helper()
	if s.overflow.Load() {
		tb.Fatalf("testsignal: more than %d events were fired before the test took them, and some were dropped: wait (or Clear) more often", bufferSize)
	}
}

// Signals are the events of one run (a consumer's or a priority worker's)
// that a test can wait for. A nil field is not fired.
type Signals struct {
	// Paused fires each time the fetch loop stops because the queue is
	// paused: from then on the run fetches nothing until the queue is
	// resumed. (Jobs fetched before may still be starting or running.)
	Paused *Signal[struct{}]
	// LoopDone fires when one of the backend's maintenance loops finished a
	// tick, with the loop's name ("move due jobs", "prune consumers",
	// "reap expired leases and due retries"), after its work and whether
	// or not it failed.
	LoopDone *Signal[string]
}

// signalsKey is the context key of a run's *Signals.
type signalsKey struct{}

// With returns a context that asks the run it is passed to for the signals
// in s.
func With(ctx context.Context, s *Signals) context.Context {
	return context.WithValue(ctx, signalsKey{}, s)
}

// From returns the signals ctx asks for; none (every field nil) if it was
// not made by [With].
func From(ctx context.Context) Signals {
	if s, ok := ctx.Value(signalsKey{}).(*Signals); ok && s != nil {
		return *s
	}
	return Signals{}
}

// Run returns run with the signals in s added to its context: for
// redistest.Background, say, sig.Run(consumer.Run).
func (s *Signals) Run(run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error { return run(With(ctx, s)) }
}
