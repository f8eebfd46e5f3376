package priority_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/proctest"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/testworker"
	"github.com/streamq/streamq/priority"
)

// Crash test settings.
const (
	crashReady = 30 * time.Second // bound on a helper starting
	crashStop  = 30 * time.Second // bound on a helper stopping after SIGTERM
	crashDrain = 60 * time.Second // bound on finishing after the kills

	// crashHelperPkg is the helper program the crash tests build and run.
	crashHelperPkg = testworker.PriorityWorker
)

// startProc starts a helper for queue q named name, with onLine (if not nil)
// called with its stdout lines. The test's cleanup kills it if it still runs
// and shows its logs if the test failed.
func startProc(t *testing.T, bin string, q *streamq.Queue, name, logDir string, onLine func(string), args ...string) *proctest.Proc {
	t.Helper()
	logFile := filepath.Join(logDir, name+".log")
	return proctest.Start(t, proctest.Options{
		Name:    name,
		Bin:     bin,
		Args:    append([]string{"-addr", redistest.AddrOf(t, core.Of(q).RDB), "-queue", q.Name(), "-name", name, "-log-file", logFile}, args...),
		LogFile: logFile,
		OnLine:  onLine,
	})
}

// leasedBy counts the leases of the worker named name.
func leasedBy(t *testing.T, e *env, name string) int64 {
	t.Helper()
	lms, err := e.rdb.ZRange(context.Background(), core.Of(e.q).Keys.Priority().Leases, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := int64(0)
	for _, lm := range lms {
		if strings.Contains(lm, "|"+name+":") {
			n++
		}
	}
	return n
}

// TestCrash_WorkerKilled runs two priority worker processes over a backlog,
// SIGKILLs one of them every few hundred milliseconds (bounded in count and
// time) and restarts it, and checks that every job was handled, none was
// lost or dead-lettered, and duplicate runs stay within what the killed
// workers held leased when they died.
func TestCrash_WorkerKilled(t *testing.T) {
	t.Parallel()
	const (
		jobs      = 5000
		workers   = 2
		maxKills  = 8
		killPhase = 8 * time.Second
		killEvery = 400 * time.Millisecond // mean, ±25%
	)
	bin := proctest.Build(t, crashHelperPkg)
	e := setupClient(t, redistest.NewIsolatedClient(t), nil) // helpers killed over a backlog
	ctx := context.Background()
	logDir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("seed %d", seed)

	batch := make([]priority.Job, jobs)
	for i := range batch {
		batch[i] = priority.Job{Priority: rng.IntN(10), Payload: []byte(strconv.Itoa(i))}
	}
	if _, err := e.pq.PushBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}

	gen := 0
	start := func(slot int) *proctest.Proc {
		gen++
		return startProc(t, bin, e.q, fmt.Sprintf("w%d-g%d", slot, gen), logDir, nil,
			"-mode", "work", "-concurrency", "8", "-lease", "500ms", "-work", "5ms-15ms")
	}
	procs := make([]*proctest.Proc, workers)
	for i := range procs {
		procs[i] = start(i)
	}
	for _, p := range procs {
		p.WaitReady(t, crashReady)
	}
	handledKey := core.Of(e.q).Keys.Part("test:handled")
	handled := func() int64 {
		n, err := e.rdb.HLen(ctx, handledKey).Result()
		if err != nil {
			t.Errorf("HLEN %s: %v", handledKey, err)
		}
		return n
	}

	begin := time.Now()
	type kill struct {
		name             string
		leased, unfinish int64
	}
	var kills []kill
	deadline := time.Now().Add(killPhase)
	for len(kills) < maxKills && time.Now().Before(deadline) {
		timer := time.NewTimer(killEvery*3/4 + rand.N(killEvery/2+1))
		<-timer.C // the kill schedule, not a synchronisation
		if handled() == jobs {
			break // nothing left to interrupt
		}
		slot := rng.IntN(workers)
		p := procs[slot]
		p.Kill()
		// Read what the dead worker held before its leases expire (500 ms).
		k := kill{name: p.Name(), leased: leasedBy(t, e, p.Name())}
		var err error
		if k.unfinish, err = e.rdb.HLen(ctx, core.Of(e.q).Keys.Part("test:inflight:"+p.Name())).Result(); err != nil {
			t.Fatal(err)
		}
		kills = append(kills, k)
		procs[slot] = start(slot)
		procs[slot].WaitReady(t, crashReady)
	}
	handledAtEnd := handled()

	redistest.WaitFor(t, crashDrain, fmt.Sprintf("all %d jobs handled", jobs), func() bool { return handled() == jobs })
	e.waitStats(t, priority.Stats{}) // nothing ready, leased or delayed
	took := time.Since(begin)
	for _, p := range procs {
		p.Stop(t, crashStop)
	}

	counts, err := e.rdb.HGetAll(ctx, handledKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	var missing []int
	duplicates := int64(0)
	for i := range jobs {
		c, _ := strconv.ParseInt(counts[strconv.Itoa(i)], 10, 64)
		switch {
		case c == 0:
			missing = append(missing, i)
		case c > 1:
			duplicates += c - 1
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d jobs never handled: %v", len(missing), missing[:min(len(missing), 20)])
	}
	if dl := deadLetters(t, e.q); len(dl) != 0 {
		t.Errorf("%d dead letters, want none", len(dl))
	}
	if n, _ := e.rdb.HLen(ctx, core.Of(e.q).Keys.Priority().Jobs).Result(); n != 0 {
		t.Errorf("%d job records left in %s, want none", n, core.Of(e.q).Keys.Priority().Jobs)
	}
	var leasedAtKills, unfinishedAtKills int64
	var perKill bytes.Buffer
	for _, k := range kills {
		leasedAtKills += k.leased
		unfinishedAtKills += k.unfinish
		fmt.Fprintf(&perKill, " %s:%d/%d", k.name, k.leased, k.unfinish)
	}
	// A job runs twice only if a run of it recorded its completion and its
	// finish did not reach Redis: its lease was held by a killed worker.
	if duplicates > leasedAtKills {
		t.Errorf("%d duplicate runs, more than the %d leases the killed workers held", duplicates, leasedAtKills)
	}
	if len(kills) < 3 {
		t.Errorf("only %d kills before all jobs were handled: make the work slower so the test kills mid-run", len(kills))
	}
	if leasedAtKills == 0 {
		t.Error("no kill left a job leased: the expiry of a crashed worker's leases was not exercised")
	}
	t.Logf("%d jobs, %d workers x 8: %d kills (%d jobs handled by the end of the kills); at the kills the killed workers "+
		"held %d leases, %d of them started and unfinished; %d duplicate runs; all handled after %s",
		jobs, workers, len(kills), handledAtEnd, leasedAtKills, unfinishedAtKills, duplicates, took.Round(time.Millisecond))
	t.Logf("per kill (worker:leased/unfinished):%s", perKill.String())
}

// TestCrash_ForwardKilled runs stream consumers with the Forward handler that
// SIGKILL themselves between reading an entry and forwarding it (and other
// entries of the same read are anywhere between the two), restarts them, and
// checks that every stream job ends up in the priority set exactly once, at
// its priority, with nothing left pending; then a worker runs each exactly
// once.
func TestCrash_ForwardKilled(t *testing.T) {
	t.Parallel()
	const (
		jobs  = 3000
		kills = 4
	)
	bin := proctest.Build(t, crashHelperPkg)
	e := setupClient(t, redistest.NewIsolatedClient(t), nil) // helpers killed over a backlog
	ctx := context.Background()
	logDir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("seed %d", seed)

	prio := func(i int) int { return i%7 - 3 }
	ids := make([]string, 0, jobs)
	for i := range jobs {
		id, err := e.p.Enqueue(ctx, []byte(strconv.Itoa(i)), priority.WithPriority(prio(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}

	args := []string{"-mode", "forward", "-concurrency", "8", "-min-idle", "300ms", "-forward-delay", "0s-2ms"}
	var pendingAtKills int64
	for k := range kills {
		name := fmt.Sprintf("f-g%d", k)
		dying := make(chan string, 1) // the entry ID of the "dying" line
		onLine := func(line string) {
			if id, ok := strings.CutPrefix(line, "dying "); ok {
				select {
				case dying <- id:
				default:
				}
			}
		}
		p := startProc(t, bin, e.q, name, logDir, onLine, append(args, "-die-at", strconv.Itoa(50+rng.IntN(300)))...)
		p.WaitReady(t, crashReady)
		entry := proctest.Await(t, p, dying, crashDrain, "its -die-at job")
		proctest.Await(t, p, p.Done(), crashDrain, "its death") // it SIGKILLs itself
		if p.Err() == nil {
			t.Errorf("%s exited cleanly after its dying line, want killed", name)
		}
		pending, err := e.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: core.Of(e.q).Keys.Stream, Group: e.q.Group(), Start: "-", End: "+", Count: 1000, Consumer: name,
		}).Result()
		if err != nil {
			t.Fatal(err)
		}
		found := slices.ContainsFunc(pending, func(p redis.XPendingExt) bool { return p.ID == entry })
		if !found {
			t.Errorf("kill %d: entry %s, read and not forwarded, is not pending for %s", k+1, entry, name)
		}
		pendingAtKills += int64(len(pending))
		t.Logf("kill %d: %s died before forwarding %s, leaving %d entries pending", k+1, name, entry, len(pending))
	}
	// A last consumer takes the abandoned entries over and forwards the rest.
	last := startProc(t, bin, e.q, "f-last", logDir, nil, args...)
	last.WaitReady(t, crashReady)
	redistest.WaitFor(t, crashDrain, "the stream worked off", func() bool { return streamSettled(t, e.q) })
	last.Stop(t, crashStop)

	// Every entry is in the priority set exactly once, under its own ID, at
	// its priority.
	members, err := e.rdb.ZRangeWithScores(ctx, core.Of(e.q).Keys.Priority().Ready, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	index := make(map[string]int, jobs)
	for i, id := range ids {
		index[id] = i
	}
	seen := make(map[string]int, jobs)
	bad := 0
	for _, m := range members {
		s := m.Member.(string)
		id := s[strings.LastIndexByte(s, ':')+1:]
		seen[id]++
		i, ok := index[id]
		if !ok || m.Score != float64(-prio(i)) {
			if bad++; bad <= 10 {
				t.Errorf("member %s (score %v): not an enqueued job, or not at its priority", s, m.Score)
			}
		}
	}
	var missing, doubled []string
	for _, id := range ids {
		switch seen[id] {
		case 0:
			missing = append(missing, id)
		case 1:
		default:
			doubled = append(doubled, id)
		}
	}
	if len(members) != jobs || len(missing) > 0 || len(doubled) > 0 {
		t.Errorf("%d members for %d jobs: %d missing %v, %d doubled %v", len(members), jobs,
			len(missing), missing[:min(len(missing), 10)], len(doubled), doubled[:min(len(doubled), 10)])
	}
	if s := e.stats(t); s != (priority.Stats{Ready: jobs}) {
		t.Errorf("priority set %+v, want %d ready and nothing else", s, jobs)
	}
	if dl := deadLetters(t, e.q); len(dl) != 0 {
		t.Errorf("%d dead letters, want none", len(dl))
	}
	if pendingAtKills < kills {
		t.Errorf("%d entries pending at %d kills: the crash between read and forward was not exercised", pendingAtKills, kills)
	}

	// And each runs exactly once.
	runs := make(map[string]int, jobs)
	var mu sync.Mutex
	w := e.newWorker(t, streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		mu.Lock()
		runs[string(msg.Payload)]++
		mu.Unlock()
		return nil
	}), priority.WorkerConfig{Concurrency: 32})
	stop := run(t, w)
	redistest.WaitFor(t, crashDrain, "every forwarded job run", func() bool { return w.Stats().Processed >= jobs })
	e.waitStats(t, priority.Stats{})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range jobs {
		if n := runs[strconv.Itoa(i)]; n != 1 {
			if bad++; bad <= 10 {
				t.Errorf("job %d ran %d times, want once", i, n)
			}
		}
	}
	t.Logf("%d jobs forwarded through %d kills between read and forward (%d entries pending at the kills): each in the set once and run once",
		jobs, kills, pendingAtKills)
}
