package streamqtest_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamq/streamq/streamqtest"
)

// TestMain uses streamqtest.Main as users do, and checks that no goroutine
// outlives the tests (a Worker joins everything it starts).
func TestMain(m *testing.M) {
	code := streamqtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fakeTB records failures instead of failing the test, so that the failure
// paths of the helpers can be tested; every other method is the real
// test's. Fatal calls end the goroutine of the helper, which therefore runs
// in its own (see runFake).
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	fatals []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// message returns the fatal message, or "" if the helper did not fail.
func (f *fakeTB) message() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.fatals, "\n")
}

// runFake runs fn with a fakeTB over t in a goroutine of its own and returns
// the fake once fn returned or failed.
func runFake(t *testing.T, fn func(tb testing.TB)) *fakeTB {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

// exampleT is the testing.TB of the examples, which have none: it panics on
// failure and runs the cleanups at finish. In a test, use t.
type exampleT struct {
	testing.TB
	ctx      context.Context
	cancel   context.CancelFunc
	cleanups []func()
}

func newExampleT() *exampleT {
	ctx, cancel := context.WithCancel(context.Background())
	return &exampleT{ctx: ctx, cancel: cancel}
}

func (e *exampleT) Helper()                           {}
func (e *exampleT) Name() string                      { return "Example" }
func (e *exampleT) Context() context.Context          { return e.ctx }
func (e *exampleT) Cleanup(f func())                  { e.cleanups = append(e.cleanups, f) }
func (e *exampleT) Logf(format string, args ...any)   { fmt.Printf(format+"\n", args...) }
func (e *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (e *exampleT) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (e *exampleT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// finish runs the cleanups, last registered first, as testing does.
func (e *exampleT) finish() {
	e.cancel()
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}
