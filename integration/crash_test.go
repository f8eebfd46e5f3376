package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/proctest"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/testworker"
)

// Crash test settings.
const (
	crashJobs        = 20_000
	crashWorkers     = 3
	crashConcurrency = 8
	crashMinIdle     = 500 * time.Millisecond
	crashWork        = "3ms-9ms"              // simulated work per job
	crashKillPhase   = 6 * time.Second        // how long workers are killed
	crashKillEvery   = 500 * time.Millisecond // mean time between kills (±20%)
	crashMaxKills    = 20                     // bound on kills, whatever the clock says
	crashDrain       = 60 * time.Second       // bound on finishing after the kills
	crashReady       = 30 * time.Second       // bound on a worker starting
	crashStop        = 30 * time.Second       // bound on a worker stopping after SIGTERM

	// crashWorkerPkg is the worker program the crash tests build and run.
	crashWorkerPkg = testworker.StreamqWorker
)

// crashStart starts a worker for q with consumer name name. The test's
// cleanup kills it if it still runs, and shows its stderr and the tail of its
// log if the test failed.
func crashStart(t *testing.T, bin string, q *streamq.Queue, name, logDir string, extraArgs ...string) *proctest.Proc {
	t.Helper()
	logFile := filepath.Join(logDir, name+".log")
	args := []string{
		"-addr", redistest.AddrOf(t, core.Of(q).RDB),
		"-queue", q.Name(),
		"-name", name,
		"-concurrency", strconv.Itoa(crashConcurrency),
		"-min-idle", crashMinIdle.String(),
		"-work", crashWork,
		"-log-file", logFile,
	}
	return proctest.Start(t, proctest.Options{
		Name:    name,
		Bin:     bin,
		Args:    append(args, extraArgs...), // later flags win
		LogFile: logFile,
	})
}

// crashKill is what one kill left behind.
type crashKill struct {
	worker   string
	pending  int64 // entries pending for the killed consumer: delivered, not acknowledged
	unfinish int64 // of which the job had started and not recorded its completion
}

// TestCrash_KillWorkersNoJobLost runs three worker processes, SIGKILLs a
// random one about every half second and restarts it, and checks that every
// job was handled, none was dead-lettered, and duplicates stay within what
// the killed workers held unacknowledged.
func TestCrash_KillWorkersNoJobLost(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, crashWorkerPkg)
	rdb := redistest.NewIsolatedClient(t) // workers killed every half second
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()
	logDir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("kill schedule seed %d", seed)

	gen := 0
	start := func(slot int) *proctest.Proc {
		gen++
		return crashStart(t, bin, q, fmt.Sprintf("w%d-g%d", slot, gen), logDir)
	}
	workers := make([]*proctest.Proc, crashWorkers)
	for i := range workers {
		workers[i] = start(i)
	}
	for _, w := range workers {
		w.WaitReady(t, crashReady)
	}

	handledKey := core.Of(q).Keys.Part("test:handled")
	handled := func() int64 {
		n, err := rdb.HLen(ctx, handledKey).Result()
		if err != nil {
			t.Errorf("HLEN %s: %v", handledKey, err)
		}
		return n
	}
	begin := time.Now()
	enqueueAll(t, p, numbers(0, crashJobs))

	// Kill phase: bounded by time and by count.
	var kills []crashKill
	deadline := time.Now().Add(crashKillPhase)
	for len(kills) < crashMaxKills && time.Now().Before(deadline) {
		wait := crashKillEvery*8/10 + time.Duration(rng.Int64N(int64(crashKillEvery*4/10)+1))
		timer := time.NewTimer(wait)
		<-timer.C // the kill schedule, not a synchronisation
		if handled() == crashJobs {
			break // nothing left to interrupt
		}
		slot := rng.IntN(len(workers))
		w := workers[slot]
		w.Kill()
		// Read what the dead consumer held before anyone can take it over
		// (takeovers wait for MinIdle, and its jobs were touched or
		// delivered less than MinIdle ago).
		k := crashKill{worker: w.Name()}
		cons, err := rdb.XInfoConsumers(ctx, core.Of(q).Keys.Stream, q.Group()).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cons {
			if c.Name == w.Name() {
				k.pending = c.Pending
			}
		}
		if k.unfinish, err = rdb.HLen(ctx, core.Of(q).Keys.Part("test:inflight:"+w.Name())).Result(); err != nil {
			t.Fatal(err)
		}
		kills = append(kills, k)
		workers[slot] = start(slot)
		workers[slot].WaitReady(t, crashReady)
	}
	killed := time.Since(begin)
	handledAtEnd := handled()

	redistest.WaitFor(t, crashDrain, fmt.Sprintf("all %d jobs handled", crashJobs), func() bool { return handled() == crashJobs })
	relSettled(t, q, 0, crashDrain)
	took := time.Since(begin)
	for _, w := range workers {
		w.Stop(t, crashStop)
	}

	// Count runs per job.
	counts, err := rdb.HGetAll(ctx, handledKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	duplicates, dupJobs := int64(0), 0
	for _, n := range numbers(0, crashJobs) {
		c, _ := strconv.ParseInt(counts[n], 10, 64)
		switch {
		case c == 0:
			missing = append(missing, n)
		case c > 1:
			duplicates += c - 1
			dupJobs++
		}
	}
	if len(counts) != crashJobs || len(missing) > 0 {
		t.Errorf("%d distinct jobs handled of %d; never handled: %d %v", len(counts), crashJobs, len(missing), head(missing))
	}
	if n, err := rdb.XLen(ctx, core.Of(q).Keys.Dead).Result(); err != nil || n != 0 {
		t.Errorf("dead letters: %d, %v; want none", n, err)
	}
	var pendingAtKills, unfinishedAtKills int64
	var perKill bytes.Buffer
	for _, k := range kills {
		pendingAtKills += k.pending
		unfinishedAtKills += k.unfinish
		fmt.Fprintf(&perKill, " %s:%d/%d", k.worker, k.pending, k.unfinish)
	}
	// A job runs twice only if a run finished and was not acknowledged, so
	// its entry was still pending for a killed consumer: duplicates cannot
	// exceed the entries the killed consumers held.
	if duplicates > pendingAtKills {
		t.Errorf("%d duplicate runs, more than the %d entries pending for the killed consumers", duplicates, pendingAtKills)
	}
	if len(kills) < 3 {
		t.Errorf("only %d kills happened before all jobs were handled: make the work slower so the test kills mid-run", len(kills))
	}
	t.Logf("%d jobs, %d workers x %d: %d kills in %s (%d jobs handled by then); "+
		"at the kills %d entries were pending for the killed consumers, %d of them started and unfinished; "+
		"%d duplicate runs (%d jobs); all handled and acknowledged after %s",
		crashJobs, crashWorkers, crashConcurrency, len(kills), killed.Round(time.Millisecond), handledAtEnd,
		pendingAtKills, unfinishedAtKills, duplicates, dupJobs, took.Round(time.Millisecond))
	t.Logf("per kill (consumer:pending/unfinished):%s", perKill.String())
}

// TestCrash_PoisonPillDeadLettered runs worker processes that die (SIGKILL on
// themselves) whenever they start one poison job, restarts them, and checks
// that crashes count towards MaxDeliveries: the job is dead-lettered after
// exactly MaxDeliveries crashed attempts, and every other job is handled,
// although the jobs running beside the pill died with it each time (their
// last attempt runs alone; without that they are dead-lettered too).
func TestCrash_PoisonPillDeadLettered(t *testing.T) {
	t.Parallel()
	const (
		maxDeliveries = 3
		jobs          = 200
		pill          = 100
		maxRestarts   = 3 * maxDeliveries // bound; exactly maxDeliveries expected
	)
	bin := proctest.Build(t, crashWorkerPkg)
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()
	logDir := t.TempDir()
	extra := []string{"-max-deliveries", strconv.Itoa(maxDeliveries), "-crash-on", strconv.Itoa(pill), "-work", "1ms-2ms"}

	gen := 0
	start := func(slot int) *proctest.Proc {
		gen++
		return crashStart(t, bin, q, fmt.Sprintf("p%d-g%d", slot, gen), logDir, extra...)
	}
	workers := []*proctest.Proc{start(0), start(1)}
	for _, w := range workers {
		w.WaitReady(t, crashReady)
	}
	begin := time.Now()
	enqueueAll(t, p, numbers(0, jobs))

	restarts := 0
	redistest.WaitFor(t, crashDrain, "the pill dead-lettered and every other job handled", func() bool {
		for i, w := range workers {
			if w.Exited() {
				if restarts++; restarts > maxRestarts {
					t.Fatalf("workers died %d times, want %d crashes for the pill with MaxDeliveries %d", restarts, maxDeliveries, maxDeliveries)
				}
				workers[i] = start(i)
			}
		}
		dead, err1 := rdb.XLen(ctx, core.Of(q).Keys.Dead).Result()
		handled, err2 := rdb.HLen(ctx, core.Of(q).Keys.Part("test:handled")).Result()
		return err1 == nil && err2 == nil && dead == 1 && handled == jobs-1
	})
	relSettled(t, q, 1, crashDrain)
	for _, w := range workers {
		w.Stop(t, crashStop)
	}

	started, err := rdb.HGet(ctx, core.Of(q).Keys.Part("test:started"), strconv.Itoa(pill)).Int()
	if err != nil {
		t.Fatal(err)
	}
	if started != maxDeliveries || restarts != maxDeliveries {
		t.Errorf("the pill started %d times and killed %d workers, want %d (MaxDeliveries) each", started, restarts, maxDeliveries)
	}
	dls := allDeadLetters(t, q)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if string(dl.Payload) != strconv.Itoa(pill) || dl.Reason != streamq.ReasonMaxDeliveries {
		t.Errorf("dead letter payload=%q reason=%q, want the pill with reason %q", dl.Payload, dl.Reason, streamq.ReasonMaxDeliveries)
	}
	if dl.Attempts != started {
		// The delivery that finds the job over its limit does not run the
		// handler, so it must not be counted as an attempt.
		t.Errorf("dead letter records %d attempts, but the job was attempted (started) %d times: error %q",
			dl.Attempts, started, dl.Error)
	}
	counts, err := rdb.HGetAll(ctx, core.Of(q).Keys.Part("test:handled")).Result()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, n := range numbers(0, jobs) {
		if n != strconv.Itoa(pill) && counts[n] == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 || counts[strconv.Itoa(pill)] != "" {
		t.Errorf("never handled: %v; pill handled %q times (want never)", missing, counts[strconv.Itoa(pill)])
	}
	t.Logf("pill: %d crashes, dead-lettered with %d attempts (%q) after %s",
		restarts, dl.Attempts, dl.Error, time.Since(begin).Round(time.Millisecond))
}
