package testworker

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/streamq/streamq"
)

// Exit statuses of a worker process that an exit pill ended (see [Pills]).
const (
	// ExitPill: the pill exited after Quiesce succeeded (or without one).
	ExitPill = 3
	// ExitUnquiesced: Quiesce gave up; jobs may have been charged a start
	// that never happened.
	ExitUnquiesced = 4
)

// quiescePoll is how often [Quiesce] looks at the worker's state.
const quiescePoll = time.Millisecond

// Numbers is a set of job numbers. As a flag.Value it reads a
// comma-separated list of numbers and ranges: "7", "1000-1024,1030". The
// zero value is the empty set.
type Numbers struct {
	spans [][2]int // inclusive
}

// String returns the set in the form that Set reads.
func (n *Numbers) String() string {
	parts := make([]string, len(n.spans))
	for i, s := range n.spans {
		parts[i] = strconv.Itoa(s[0])
		if s[1] != s[0] {
			parts[i] += "-" + strconv.Itoa(s[1])
		}
	}
	return strings.Join(parts, ",")
}

// Set adds the numbers and ranges of s ("a", "a-b" with 0 <= a <= b,
// separated by commas) to the set.
func (n *Numbers) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		a, b, isRange := strings.Cut(part, "-")
		lo, err := strconv.Atoi(a)
		if err != nil {
			return fmt.Errorf("%q: %w", part, err)
		}
		hi := lo
		if isRange {
			if hi, err = strconv.Atoi(b); err != nil {
				return fmt.Errorf("%q: %w", part, err)
			}
		}
		if lo < 0 || hi < lo {
			return fmt.Errorf("%q: want 0 <= a <= b", part)
		}
		n.spans = append(n.spans, [2]int{lo, hi})
	}
	return nil
}

// Has reports whether x is in the set.
func (n *Numbers) Has(x int) bool {
	for _, s := range n.spans {
		if s[0] <= x && x <= s[1] {
			return true
		}
	}
	return false
}

// Pills are poison jobs for [Books]: at every start, after the start was
// recorded, a job numbered in Exit ends the process (os.Exit with status
// [ExitPill], after Quiesce), one in Panic panics and one in Fail returns
// an error.
type Pills struct {
	Exit, Panic, Fail Numbers
	// Quiesce, if set, runs before an exit pill exits; if it reports false
	// the exit status is [ExitUnquiesced]. See [Quiesce].
	Quiesce func() bool
}

// PillFlags are the command-line flags that make [Pills]: -exit-on,
// -panic-on, -fail-on and -quiesce.
type PillFlags struct {
	pills   Pills
	quiesce time.Duration
}

// RegisterPillFlags defines the pill flags on the command line's flag set
// and returns where they land once [Main] parsed it.
func RegisterPillFlags() *PillFlags {
	f := &PillFlags{}
	flag.Var(&f.pills.Exit, "exit-on", "jobs (numbers and ranges, e.g. 1000-1024,1030) that end the process with os.Exit at every start, after recording it")
	flag.Var(&f.pills.Panic, "panic-on", "jobs that panic at every start")
	flag.Var(&f.pills.Fail, "fail-on", "jobs that return an error at every start")
	flag.DurationVar(&f.quiesce, "quiesce", 10*time.Second, "how long an exit pill waits for every job its worker holds to start or wait to run alone before it exits (0: exit at once)")
	return f
}

// Arm gives b the pills of the command line. Unless -quiesce is 0, an exit
// pill first quiesces its worker (see [Quiesce]) with stop, which must
// cancel the worker's Run context, and health, the worker's Health method.
// Call it before Run.
func (f *PillFlags) Arm(b *Books, log *slog.Logger, stop func(), health func() streamq.Health) {
	p := f.pills
	if f.quiesce > 0 {
		p.Quiesce = func() bool {
			log.Info("testworker: exit pill started; quiescing the worker before exiting")
			return Quiesce(stop, health, b.Running, f.quiesce)
		}
	}
	b.SetPills(p)
}

// act does what the pill numbered n does, if n is one.
func (p *Pills) act(n int) error {
	switch {
	case p.Exit.Has(n):
		code := ExitPill
		if p.Quiesce != nil && !p.Quiesce() {
			code = ExitUnquiesced
		}
		os.Exit(code)
	case p.Panic.Has(n):
		panic(fmt.Sprintf("poison job %d panics", n))
	case p.Fail.Has(n):
		return fmt.Errorf("poison job %d fails", n)
	}
	return nil
}

// Quiesce brings a worker to a state in which its process can exit without
// a job being charged a start that never happened, and reports whether it
// got there within timeout.
//
// Redis counts a job's start when it sends the reply of the read that
// delivers it (XREADGROUP, a priority pop), or when the engine charges a
// job it took over, right before its handler runs. A process that dies
// between that moment and the handler's entry leaves a charge without a
// start: a window the library cannot close. So Quiesce calls stop, which
// must cancel the worker's Run context (the fetch loop stops; jobs it
// fetched meanwhile are launched or wait to run alone), and then waits
// until health reports that the fetch loop has returned and every job the
// worker holds either waits to run alone (its fetch's charge was taken
// back) or is counted by running: its handler started and recorded the
// start (see [Books.Running]). Jobs that finished wait until they are
// settled.
//
// health is read before running: a job can only move from "held, not yet
// started" to "started" once the fetch loop has returned, so the
// comparison cannot miss one.
func Quiesce(stop func(), health func() streamq.Health, running func() int64, timeout time.Duration) bool {
	stop()
	quiet := func() bool {
		h := health()
		return !h.Fetching && int64(h.Jobs-h.Waiting) == running()
	}
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(quiescePoll)
	defer t.Stop()
	for !quiet() {
		if time.Now().After(deadline) {
			return false
		}
		<-t.C
	}
	return true
}
