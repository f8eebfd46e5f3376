// Package proctest runs helper programs as child processes of a test: the
// worker processes that crash tests start, SIGKILL and restart.
//
// A test builds the helper once with [Build] and starts processes of it with
// [Start]:
//
//	bin := proctest.Build(t, testworker.StreamqWorker)
//	p := proctest.Start(t, proctest.Options{Name: "w1", Bin: bin, Args: args, LogFile: logFile})
//	p.WaitReady(t, 30*time.Second)
//	p.Kill()                    // a crash: SIGKILL, and wait until it is reaped
//	...
//	p.Stop(t, 30*time.Second)   // a graceful stop: SIGTERM, and a clean exit expected
//
// The protocol between test and helper is line-based on the helper's stdout:
// the helper prints "ready <something>" once it runs, and any other lines a
// test wants to react to, which it receives through [Options.OnLine]. Stderr
// is kept (its tail) in a [TailBuffer]. When the test has failed, the cleanup
// that Start registers logs the end of the helper's stderr and of its log
// file; it also SIGKILLs every helper still running, so none outlives its
// test. On Linux a helper is also SIGKILLed when the test binary dies without
// running its cleanups (a -timeout panic, a SIGKILL).
//
// Every wait is bounded. A Proc's methods may be called from any goroutine,
// except those that take a testing.TB, which follow the rules of t.Fatalf
// (the test's goroutine) where they may fail the test fatally.
package proctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	// BuildTimeout bounds [Build]: one go build of a helper program.
	BuildTimeout = 5 * time.Minute
	// DefaultTail is how many bytes of a helper's stderr a [Proc] keeps, and
	// the capacity of a zero [TailBuffer].
	DefaultTail = 64 << 10
	// ReadyPrefix starts the line a helper prints on stdout once it runs; the
	// first such line closes [Proc.Ready].
	ReadyPrefix = "ready "

	// logFileTail is how much of the log file the failure report shows.
	logFileTail = 4 << 10
	// maxLine bounds one stdout line; the rest of a longer line is dropped.
	maxLine = 64 << 10
	// pipeWait bounds the wait for the helper's stdout and stderr to close
	// after it exited (a process it started may hold them open).
	pipeWait = 5 * time.Second
	// killWait bounds the wait for a SIGKILLed helper to be reaped.
	killWait = 30 * time.Second
)

// Build compiles the main package pkg (an import path, or anything else
// go build accepts as one package) into a fresh t.TempDir() and returns the
// binary's path. It fails the test with the compiler's output if the build
// fails or takes longer than [BuildTimeout]. The go command is looked up in
// PATH; the build runs in the test's working directory, so a path of the
// test's own module builds what is checked out.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), path.Base(pkg))
	ctx, cancel := context.WithTimeout(t.Context(), BuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.WaitDelay = pipeWait // the compiler's children may hold the output open
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (bound %s)", ctx.Err(), BuildTimeout)
		}
		t.Fatalf("proctest: go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// Options describe a process for [Start].
type Options struct {
	// Name names the process in messages (a consumer name, say). Default:
	// the base name of Bin.
	Name string
	// Bin is the program to run, typically from [Build]. Required.
	Bin string
	// Args are the program's arguments.
	Args []string
	// Env, if not empty, is added to the test's environment for the
	// process ("KEY=value" each; later entries win).
	Env []string
	// LogFile, if set, is a file the process writes its log to (passing its
	// name in Args is up to the caller): its tail is logged, next to the
	// stderr tail, when the test failed.
	LogFile string
	// OnLine, if set, is called with every line the process prints on
	// stdout (without the line end), the ready line included: in order, one
	// call at a time, from a goroutine other than the test's. Every call
	// returns before [Proc.Done] is closed. It must not block for long: the
	// process blocks on a full stdout meanwhile. Sending to a buffered
	// channel with a select default, or under a mutex, is the usual body.
	OnLine func(line string)
}

// Proc is one running helper process, from [Start].
type Proc struct {
	t       testing.TB
	name    string
	logFile string
	cmd     *exec.Cmd
	stderr  *TailBuffer
	onLine  func(string)

	ready   chan struct{} // closed on the first ready line
	isReady bool          // owned by the stdout goroutine, then by wait

	done chan struct{} // closed once the process is reaped and its stdout read
	err  error         // what Wait returned; written before done is closed

	// settled is set once Kill, Stop or a true Exited accounted for the
	// end of the process, so that Stop does not expect it to run.
	settled atomic.Bool
}

// Start starts the process that o describes, and a goroutine that reads its
// stdout and reaps it when it ends. It fails the test if the process cannot
// be started.
//
// Start registers a cleanup that SIGKILLs the process if it still runs and,
// if the test failed, logs its exit status, the tail of its stderr and of
// o.LogFile.
func Start(t testing.TB, o Options) *Proc {
	t.Helper()
	if o.Bin == "" {
		t.Fatal("proctest.Start: Options.Bin is empty")
	}
	p := &Proc{
		t:       t,
		name:    o.Name,
		logFile: o.LogFile,
		stderr:  NewTailBuffer(DefaultTail),
		onLine:  o.OnLine,
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	if p.name == "" {
		p.name = filepath.Base(o.Bin)
	}
	out := &lineSplitter{onLine: p.line}
	p.cmd = exec.Command(o.Bin, o.Args...)
	if len(o.Env) > 0 {
		p.cmd.Env = append(os.Environ(), o.Env...)
	}
	p.cmd.Stdout = out // not an *os.File: os/exec copies from a pipe into it
	p.cmd.Stderr = p.stderr
	p.cmd.WaitDelay = pipeWait
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("proctest: start %s: %v", p.name, err)
	}
	go p.wait(out)
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			p.report(t)
		}
	})
	return p
}

// wait reaps the process, hands over an unterminated last line, and closes
// done.
func (p *Proc) wait(out *lineSplitter) {
	err := p.cmd.Wait() // returns after the stdout copy has ended
	out.flush()
	p.err = err
	close(p.done)
}

// line handles one stdout line. Calls come one at a time, in order.
func (p *Proc) line(s string) {
	if !p.isReady && strings.HasPrefix(s, ReadyPrefix) {
		p.isReady = true
		close(p.ready)
	}
	if p.onLine != nil {
		p.onLine(s)
	}
}

// report logs what the process left behind, for a failed test.
func (p *Proc) report(t testing.TB) {
	msg := fmt.Sprintf("%s (%s): stderr (tail):\n%s", p.name, p.exitStatus(), p.Stderr())
	if p.logFile != "" {
		msg += fmt.Sprintf("\nlog %s (tail):\n%s", p.logFile, fileTail(p.logFile, logFileTail))
	}
	t.Log(msg)
}

// Name returns the process's name: [Options.Name], or the binary's base
// name.
func (p *Proc) Name() string { return p.name }

// Ready returns a channel that is closed when the process prints its first
// line starting with [ReadyPrefix].
func (p *Proc) Ready() <-chan struct{} { return p.ready }

// Done returns a channel that is closed once the process has ended and been
// reaped, and every stdout line has been handled ([Options.OnLine] included).
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns the process's exit error (as from exec.Cmd.Wait: nil for a
// zero exit status, an *exec.ExitError otherwise) once [Proc.Done] is
// closed, and nil before.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Stderr returns the tail (up to [DefaultTail] bytes) of what the process
// wrote on stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// WaitReady waits until the process printed its ready line, and fails the
// test (t.Fatalf) with the tail of its stderr if it exits first, or if
// timeout passes first.
func (p *Proc) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	Await(t, p, p.Ready(), timeout, "its ready line")
}

// Exited reports whether the process has ended (by itself or killed) and
// been reaped. Once it reported true, [Proc.Stop] does nothing.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		p.settled.Store(true)
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL, as a crash would, and waits until the process has been
// reaped and its stdout handled. It does nothing if the process has ended
// already, and may be called any number of times. If the process is not
// reaped within 30 s, it fails the test that started it (t.Errorf) and
// returns.
func (p *Proc) Kill() {
	p.settled.Store(true)
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill() // os.ErrProcessDone if it ended just now
	timer := time.NewTimer(killWait)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.t.Errorf("proctest: %s not reaped within %s of SIGKILL", p.name, killWait)
	}
}

// Stop sends SIGTERM and expects a clean exit (status 0) within timeout; it
// fails the test (t.Errorf) otherwise: if the process exits with an error,
// if it had ended before Stop (it was expected to run until told to stop),
// or if it is still running after timeout, in which case Stop SIGKILLs it.
// After [Proc.Kill], or after [Proc.Exited] reported true, Stop does nothing.
func (p *Proc) Stop(t testing.TB, timeout time.Duration) {
	t.Helper()
	if p.settled.Swap(true) {
		return
	}
	endedBefore := false
	select {
	case <-p.done:
		endedBefore = true
	default:
		if err := p.cmd.Process.Signal(syscall.SIGTERM); errors.Is(err, os.ErrProcessDone) {
			endedBefore = true
		} else if err != nil {
			t.Errorf("proctest: SIGTERM to %s: %v", p.name, err)
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		switch {
		case endedBefore:
			t.Errorf("%s had ended (%s) before Stop, want it running until SIGTERM; stderr:\n%s", p.name, p.exitStatus(), p.Stderr())
		case p.err != nil:
			t.Errorf("%s exited with %v after SIGTERM, want a clean exit; stderr:\n%s", p.name, p.err, p.Stderr())
		}
	case <-timer.C:
		t.Errorf("%s did not exit within %s of SIGTERM", p.name, timeout)
		p.Kill()
	}
}

// Await waits for a value on ch, typically one that an [Options.OnLine]
// function sends, and returns it. It fails the test (t.Fatalf) with the tail
// of p's stderr if p ends first, or if timeout passes first; what names the
// awaited event in those messages ("its ready line"). A value sent before
// the process ended is returned even when Await only looks after the end.
func Await[T any](t testing.TB, p *Proc, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-p.done:
		select {
		case v := <-ch: // every OnLine call returned before done was closed
			return v
		default:
		}
		t.Fatalf("%s ended (%s) while waiting for %s; stderr:\n%s", p.name, p.exitStatus(), what, p.Stderr())
	case <-timer.C:
		t.Fatalf("%s: waited %s for %s", p.name, timeout, what)
	}
	var zero T
	return zero
}

// exitStatus describes how the process ended, or says it runs.
func (p *Proc) exitStatus() string {
	select {
	case <-p.done:
	default:
		return "running"
	}
	if p.err == nil {
		return "exit status 0"
	}
	return p.err.Error()
}

// lineSplitter is a process's stdout: it cuts what is written into lines
// and hands each to onLine. os/exec calls Write from one goroutine, and Wait
// returns after that goroutine ended, so flush (called after Wait) needs no
// lock.
type lineSplitter struct {
	onLine  func(string)
	partial []byte
}

// Write hands over every line that b completes and keeps the rest.
func (s *lineSplitter) Write(b []byte) (int, error) {
	n := len(b)
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.add(b)
			return n, nil
		}
		s.add(b[:i])
		s.emit()
		b = b[i+1:]
	}
}

// add appends b to the current line, up to maxLine bytes.
func (s *lineSplitter) add(b []byte) {
	if room := maxLine - len(s.partial); room > 0 {
		s.partial = append(s.partial, b[:min(len(b), room)]...)
	}
}

// emit hands over the current line, without a trailing "\r".
func (s *lineSplitter) emit() {
	line := strings.TrimSuffix(string(s.partial), "\r")
	s.partial = s.partial[:0]
	s.onLine(line)
}

// flush hands over an unterminated last line.
func (s *lineSplitter) flush() {
	if len(s.partial) > 0 {
		s.emit()
	}
}

// TailBuffer is an io.Writer that keeps the last bytes written to it: up to
// the capacity given to [NewTailBuffer], or [DefaultTail] for a zero
// TailBuffer. It is safe for concurrent use.
type TailBuffer struct {
	max int

	mu  sync.Mutex
	buf []byte
}

// NewTailBuffer returns a TailBuffer that keeps the last n bytes (n > 0).
func NewTailBuffer(n int) *TailBuffer {
	if n <= 0 {
		panic("proctest: NewTailBuffer needs n > 0")
	}
	return &TailBuffer{max: n}
}

// Write keeps the end of p; it never fails.
func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := b.max
	if limit == 0 {
		limit = DefaultTail
	}
	n := len(p)
	if len(p) >= limit {
		b.buf = append(b.buf[:0], p[len(p)-limit:]...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// String returns what is kept.
func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// fileTail returns up to the last n bytes of a file, or the error that
// prevented reading it.
func fileTail(name string, n int64) string {
	f, err := os.Open(name)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
		return err.Error()
	}
	return string(b)
}
