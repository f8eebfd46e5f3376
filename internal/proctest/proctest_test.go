package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// helperEnv selects, in a re-executed test binary, the helper behaviour to
// run instead of the tests (see helperMain).
const helperEnv = "PROCTEST_HELPER"

// testTimeout bounds every wait that is expected to succeed.
const testTimeout = 30 * time.Second

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	goleak.VerifyTestMain(m)
}

// helperMain is the test binary run as a helper process. Its modes:
//
//   - serve: prints "hello", "ready serve" and "after"; exits 0 on SIGTERM.
//   - fail-on-term: prints "ready failing"; exits 3 on SIGTERM.
//   - ignore-term: ignores SIGTERM, prints "ready ignoring"; runs until
//     killed.
//   - mute: prints "waiting" but no ready line; exits 0 on SIGTERM.
//   - lines: prints "a", "ready lines", "b\r", "dying 42" and an
//     unterminated "tail" in one write, and exits 0 at once.
//   - crash: writes "boom" on stderr and "logged" into the file named by
//     PROCTEST_LOG, and exits 7 before any ready line.
//   - spam: writes 200 KiB and "last" on stderr, prints "ready spam", exits 0
//     on SIGTERM.
//
// Every mode that waits for SIGTERM handles it before it prints a line.
func helperMain(mode string) int {
	say := func(s string) { _, _ = os.Stdout.WriteString(s) }
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	switch mode {
	case "serve":
		say("hello\n")
		say("ready serve\n")
		say("after\n")
		<-term
		return 0
	case "fail-on-term":
		say("ready failing\n")
		<-term
		return 3
	case "ignore-term":
		signal.Reset(syscall.SIGTERM)
		signal.Ignore(syscall.SIGTERM)
		say("ready ignoring\n")
		select {} // until SIGKILL
	case "mute":
		say("waiting\n")
		<-term
		return 0
	case "lines":
		say("a\nready lines\nb\r\ndying 42\ntail")
		return 0
	case "crash":
		fmt.Fprintln(os.Stderr, "boom")
		if err := os.WriteFile(os.Getenv("PROCTEST_LOG"), []byte("logged\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		return 7
	case "spam":
		line := strings.Repeat("x", 1023) + "\n"
		for range 200 {
			_, _ = os.Stderr.WriteString(line)
		}
		_, _ = os.Stderr.WriteString("last\n")
		say("ready spam\n")
		<-term
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown %s %q\n", helperEnv, mode)
	return 2
}

// startHelper starts the test binary in helper mode mode.
func startHelper(t testing.TB, mode string, o Options) *Proc {
	t.Helper()
	o.Bin = os.Args[0]
	o.Args = []string{"-test.run=^$"} // should the mode be ignored, run no test
	// A race-enabled binary sleeps a second at exit, for late reports.
	o.Env = append(o.Env, helperEnv+"="+mode, "GORACE=atexit_sleep_ms=0")
	if o.Name == "" {
		o.Name = mode
	}
	return Start(t, o)
}

// fakeTB records failures and cleanups instead of acting on the real test.
// Fatal and Fatalf end the calling goroutine, as testing.T's do, so code that
// may call them runs through [fakeTB.run]. Everything else goes to the
// embedded real test.
type fakeTB struct {
	testing.TB

	mu       sync.Mutex
	errors   []string
	fatal    string
	logs     []string
	failed   bool
	cleanups []func()
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = true
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

func (f *fakeTB) Log(args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprint(args...))
}

func (f *fakeTB) Logf(format string, args ...any) { f.Log(fmt.Sprintf(format, args...)) }

func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

// runCleanups runs the registered cleanups, last first, as testing does.
func (f *fakeTB) runCleanups() {
	f.mu.Lock()
	fns := f.cleanups
	f.cleanups = nil
	f.mu.Unlock()
	for _, fn := range slices.Backward(fns) {
		fn()
	}
}

// run calls fn in a goroutine, so that a Fatalf ends only that goroutine, and
// waits (bounded) until it returned or ended.
func (f *fakeTB) run(fn func()) {
	f.TB.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(2 * testTimeout):
		f.TB.Fatalf("the call did not return within %s", 2*testTimeout)
	}
}

func (f *fakeTB) result() (errors []string, fatal string, logs []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.errors), f.fatal, slices.Clone(f.logs)
}

// wantErrors checks that f recorded one t.Errorf per entry of want, each
// containing that entry, and no fatal failure.
func (f *fakeTB) wantErrors(t *testing.T, what string, want ...string) {
	t.Helper()
	errs, fatal, _ := f.result()
	ok := len(errs) == len(want) && fatal == ""
	for i := range min(len(errs), len(want)) {
		ok = ok && strings.Contains(errs[i], want[i])
	}
	if !ok {
		t.Errorf("%s: errors %q, fatal %q; want errors containing %q", what, errs, fatal, want)
	}
}

// wantFatal checks that f recorded a fatal failure containing want.
func (f *fakeTB) wantFatal(t *testing.T, what, want string) {
	t.Helper()
	if _, fatal, _ := f.result(); !strings.Contains(fatal, want) {
		t.Errorf("%s: fatal %q, want one containing %q", what, fatal, want)
	}
}

// newFake returns a fakeTB over t whose cleanups run at t's cleanup (so that
// no process outlives the test) unless the test ran them before.
func newFake(t *testing.T) *fakeTB {
	f := &fakeTB{TB: t}
	t.Cleanup(f.runCleanups)
	return f
}

// waitDone waits, bounded, until p has ended.
func waitDone(t *testing.T, p *Proc) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(testTimeout):
		t.Fatalf("%s did not end within %s", p.Name(), testTimeout)
	}
}

func TestStart_ReadyLinesAndStop(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		lines []string
	)
	p := startHelper(t, "serve", Options{OnLine: func(s string) {
		mu.Lock()
		lines = append(lines, s)
		mu.Unlock()
	}})
	if p.Name() != "serve" {
		t.Errorf("Name() = %q, want serve", p.Name())
	}
	p.WaitReady(t, testTimeout)
	select {
	case <-p.Ready():
	default:
		t.Fatal("Ready() not closed after WaitReady")
	}
	if p.Exited() {
		t.Fatal("Exited() = true for a running process")
	}
	if err := p.Err(); err != nil {
		t.Errorf("Err() = %v while running, want nil", err)
	}
	p.Stop(t, testTimeout) // fails t unless it exits 0
	if !p.Exited() {
		t.Error("Exited() = false after Stop")
	}
	if err := p.Err(); err != nil {
		t.Errorf("Err() = %v after a clean stop", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"hello", "ready serve", "after"}; !slices.Equal(lines, want) {
		t.Errorf("OnLine got %q, want %q", lines, want)
	}
}

func TestStart_EveryLineBeforeDone(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		lines []string
	)
	dying := make(chan string, 1)
	p := startHelper(t, "lines", Options{OnLine: func(s string) {
		mu.Lock()
		lines = append(lines, s)
		mu.Unlock()
		if id, ok := strings.CutPrefix(s, "dying "); ok {
			select {
			case dying <- id:
			default:
			}
		}
	}})
	waitDone(t, p)
	// The process has ended, and the line was sent before: Await must
	// return it rather than report the end.
	if id := Await(t, p, dying, testTimeout, "its dying line"); id != "42" {
		t.Errorf("Await = %q, want 42", id)
	}
	p.WaitReady(t, testTimeout) // ready was printed before the end: no failure
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a", "ready lines", "b", "dying 42", "tail"}; !slices.Equal(lines, want) {
		t.Errorf("OnLine got %q, want %q", lines, want)
	}
	if !p.Exited() || p.Err() != nil {
		t.Errorf("Exited() = %v, Err() = %v; want true, nil", p.Exited(), p.Err())
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	p := startHelper(f, "serve", Options{})
	p.WaitReady(t, testTimeout)
	p.Kill()
	select {
	case <-p.Done():
	default:
		t.Fatal("Done() not closed after Kill")
	}
	if !p.Exited() {
		t.Error("Exited() = false after Kill")
	}
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Err() = %v after Kill, want signal: killed", err)
	}
	p.Kill()               // again: nothing
	p.Stop(f, testTimeout) // after Kill: nothing
	f.runCleanups()
	f.wantErrors(t, "Kill, Kill, Stop, cleanup")
	if _, _, logs := f.result(); len(logs) > 0 {
		t.Errorf("Kill, Kill, Stop, cleanup logged %q", logs)
	}
}

func TestCleanup_KillsAndStaysQuietOnSuccess(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	p := startHelper(f, "serve", Options{})
	p.WaitReady(t, testTimeout)
	f.runCleanups()
	if !p.Exited() {
		t.Fatal("the process runs after the cleanup")
	}
	if _, _, logs := f.result(); len(logs) > 0 {
		t.Errorf("logs of a passing test: %q", logs)
	}
}

func TestCleanup_ReportsOnFailure(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	logFile := filepath.Join(t.TempDir(), "helper.log")
	p := startHelper(f, "crash", Options{Name: "crasher", LogFile: logFile, Env: []string{"PROCTEST_LOG=" + logFile}})
	f.run(func() { p.WaitReady(f, testTimeout) })
	f.wantFatal(t, "WaitReady", "crasher ended (exit status 7) while waiting for its ready line; stderr:\nboom")
	f.runCleanups()
	_, _, logs := f.result()
	if len(logs) != 1 {
		t.Fatalf("cleanup of a failed test logged %q, want one report", logs)
	}
	for _, want := range []string{"crasher (exit status 7)", "boom", "helper.log", "logged"} {
		if !strings.Contains(logs[0], want) {
			t.Errorf("report %q does not contain %q", logs[0], want)
		}
	}
}

func TestWaitReady_Timeout(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	waiting := make(chan struct{}, 1)
	p := startHelper(f, "mute", Options{OnLine: func(s string) {
		if s == "waiting" {
			waiting <- struct{}{}
		}
	}})
	f.run(func() { p.WaitReady(f, 50*time.Millisecond) })
	f.wantFatal(t, "WaitReady", "mute: waited 50ms for its ready line")
	Await(t, p, waiting, testTimeout, "its waiting line") // SIGTERM handler installed
	if p.Exited() {
		t.Error("WaitReady ended the process")
	}
	g := &fakeTB{TB: t}
	p.Stop(g, testTimeout)
	g.wantErrors(t, "Stop")
}

func TestStop_UncleanExit(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	p := startHelper(f, "fail-on-term", Options{})
	p.WaitReady(t, testTimeout)
	p.Stop(f, testTimeout)
	f.wantErrors(t, "Stop", "fail-on-term exited with exit status 3 after SIGTERM, want a clean exit")
}

func TestStop_Timeout(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	p := startHelper(f, "ignore-term", Options{})
	p.WaitReady(t, testTimeout)
	p.Stop(f, 100*time.Millisecond)
	f.wantErrors(t, "Stop", "ignore-term did not exit within 100ms of SIGTERM")
	if !p.Exited() {
		t.Error("Stop did not kill the process after the timeout")
	}
}

func TestStop_EndedBefore(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	p := startHelper(f, "lines", Options{})
	waitDone(t, p)
	p.Stop(f, testTimeout)
	f.wantErrors(t, "Stop", "lines had ended (exit status 0) before Stop")

	// Once Exited reported the end, Stop accepts it.
	g := newFake(t)
	q := startHelper(g, "lines", Options{})
	waitDone(t, q)
	if !q.Exited() {
		t.Fatal("Exited() = false after Done")
	}
	q.Stop(g, testTimeout)
	g.wantErrors(t, "Stop after Exited")
}

func TestStderr_KeepsTheTail(t *testing.T) {
	t.Parallel()
	p := startHelper(t, "spam", Options{})
	p.WaitReady(t, testTimeout)
	p.Stop(t, testTimeout) // after Done, all of stderr has been copied
	s := p.Stderr()
	if len(s) != DefaultTail || !strings.HasSuffix(s, "x\nlast\n") {
		t.Errorf("Stderr() has %d bytes ending %q, want %d ending in the last line", len(s), s[max(len(s)-20, 0):], DefaultTail)
	}
}

func TestStart_Errors(t *testing.T) {
	t.Parallel()
	f := newFake(t)
	f.run(func() { Start(f, Options{}) })
	f.wantFatal(t, "Start without Bin", "Bin is empty")
	g := newFake(t)
	g.run(func() { Start(g, Options{Name: "nothing", Bin: filepath.Join(t.TempDir(), "missing")}) })
	g.wantFatal(t, "Start of a missing file", "start nothing")
}

func TestBuild(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command in PATH")
	}
	bin := Build(t, "cmd/gofmt")
	if filepath.Base(bin) != "gofmt" {
		t.Errorf("Build returned %s, want a file named gofmt", bin)
	}
	out, err := exec.Command(bin, "-l", "proctest.go").CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Errorf("the built gofmt -l proctest.go: %v, %q", err, out)
	}

	f := newFake(t)
	f.run(func() { Build(f, "github.com/streamq/streamq/internal/proctest/nosuchpackage") })
	f.wantFatal(t, "Build of a missing package", "go build github.com/streamq/streamq/internal/proctest/nosuchpackage")
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	b := NewTailBuffer(8)
	for _, w := range []string{"abc", "defg", "hij"} {
		if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if got := b.String(); got != "cdefghij" {
		t.Errorf("after three writes: %q, want cdefghij", got)
	}
	_, _ = b.Write([]byte("0123456789"))
	if got := b.String(); got != "23456789" {
		t.Errorf("after a long write: %q, want 23456789", got)
	}

	var z TailBuffer // zero value: DefaultTail
	_, _ = z.Write([]byte(strings.Repeat("y", DefaultTail+10)))
	if got := len(z.String()); got != DefaultTail {
		t.Errorf("zero TailBuffer keeps %d bytes, want %d", got, DefaultTail)
	}

	// Concurrent writers and readers, for the race detector.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("xyz"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); len(got) != 8 {
		t.Errorf("after concurrent writes: %q, want 8 bytes", got)
	}
}

func TestLineSplitter(t *testing.T) {
	t.Parallel()
	var got []string
	s := &lineSplitter{onLine: func(l string) { got = append(got, l) }}
	for _, w := range []string{"one\ntw", "o\r\n", "", "\n", strings.Repeat("z", maxLine+5), "\nend"} {
		_, _ = s.Write([]byte(w))
	}
	s.flush()
	want := []string{"one", "two", "", strings.Repeat("z", maxLine), "end"}
	if !slices.Equal(got, want) {
		t.Errorf("lines %d: %.40q, want %d: %.40q", len(got), got, len(want), want)
	}
}
