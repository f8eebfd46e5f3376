package redistest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Runner is a Run method (of a consumer, worker or scheduler) running in
// the background of a test; see [Background].
type Runner struct {
	tb      testing.TB
	what    string
	timeout time.Duration
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // run's result, set before done is closed
	once    sync.Once
}

// Background runs run(ctx) in its own goroutine until [Runner.Stop] is
// called or the test ends. what names it in failure messages. Stopping
// cancels ctx and waits up to timeout for run to return; a run that does
// not return in time, or that returns an error when the test ends, fails
// the test.
func Background(tb testing.TB, what string, timeout time.Duration, run func(context.Context) error) *Runner {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{tb: tb, what: what, timeout: timeout, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = run(ctx)
	}()
	tb.Cleanup(func() {
		if err := r.Stop(); err != nil {
			tb.Errorf("%s returned %v, want nil after a cancel", what, err)
		}
	})
	return r
}

// Stop cancels the run, waits for it to return (failing the test if it does
// not within the timeout) and returns its error. Later calls return the
// same error without waiting again.
func (r *Runner) Stop() error {
	r.once.Do(func() {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(r.timeout):
			r.tb.Errorf("%s did not return within %s of its context being cancelled", r.what, r.timeout)
		}
	})
	select {
	case <-r.done:
		return r.err
	default:
		return nil // did not return: reported above
	}
}

// Cancel cancels the run's context without waiting for it to return.
func (r *Runner) Cancel() { r.cancel() }

// Done is closed when the run has returned, by itself or after Stop.
func (r *Runner) Done() <-chan struct{} { return r.done }

// Err is the run's result once Done is closed.
func (r *Runner) Err() error { return r.err }
