package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/proctest"
	"github.com/streamq/streamq/internal/redistest"
)

// Pause test settings.
const (
	pauseRounds  = 3
	pauseWorkers = 2
	pauseJobs    = 400
	pauseWork    = "100ms-200ms" // long enough that the workers hold jobs when killed
	// pauseWatch is how long each round watches the paused queue: several
	// MinIdle (the takeover of the killed workers' jobs) and control
	// intervals, and the first fetch of every restarted worker.
	pauseWatch = 4 * crashMinIdle
)

// TestPause_ExactAcrossKillsAndRestarts pauses a queue while worker
// processes run jobs, SIGKILLs every worker, starts fresh ones during the
// pause (their first fetch, their takeover of the killed workers' jobs, and
// new jobs enqueued during the pause are all refused), and checks that no
// job starts until the resume; then it resumes and the jobs run again.
// Several rounds; every job is handled in the end.
func TestPause_ExactAcrossKillsAndRestarts(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, crashWorkerPkg)
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()
	logDir := t.TempDir()
	in, err := inspect.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	iq, err := in.Queue(ctx, q.Name())
	if err != nil {
		t.Fatal(err)
	}

	startedKey := core.Of(q).Keys.Part("test:started")
	starts := func() int64 {
		m, err := rdb.HGetAll(ctx, startedKey).Result()
		if err != nil {
			t.Fatalf("HGETALL %s: %v", startedKey, err)
		}
		var n int64
		for _, v := range m {
			c, _ := strconv.ParseInt(v, 10, 64)
			n += c
		}
		return n
	}
	gen := 0
	startAll := func() []*proctest.Proc {
		ws := make([]*proctest.Proc, pauseWorkers)
		for i := range ws {
			gen++
			ws[i] = crashStart(t, bin, q, fmt.Sprintf("w%d-g%d", i, gen), logDir, "-work", pauseWork)
		}
		for _, w := range ws {
			w.WaitReady(t, crashReady)
		}
		return ws
	}

	enqueueAll(t, p, numbers(0, pauseJobs))
	workers := startAll()
	for round := range pauseRounds {
		before := starts()
		redistest.WaitFor(t, 30*time.Second, "jobs starting before the pause", func() bool { return starts() > before })
		if err := iq.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		for _, w := range workers {
			w.Kill()
		}
		// Nothing can start from here on but through the fresh workers.
		frozen := starts()
		enqueueAll(t, p, numbers(pauseJobs+round*10, 10)) // wakes every waiting worker
		workers = startAll()
		watch := time.NewTimer(pauseWatch)
		<-watch.C // an observation window: nothing may happen in it
		if n := starts(); n != frozen {
			t.Fatalf("round %d: %d jobs started during the pause (fresh workers, takeovers of the killed workers' jobs, or jobs enqueued during the pause)", round, n-frozen)
		}
		if err := iq.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, 30*time.Second, "jobs starting after the resume", func() bool { return starts() > frozen })
	}
	total := int64(pauseJobs + pauseRounds*10)
	handledKey := core.Of(q).Keys.Part("test:handled")
	redistest.WaitFor(t, crashDrain, fmt.Sprintf("all %d jobs handled", total), func() bool {
		return rdb.HLen(ctx, handledKey).Val() == total
	})
	relSettled(t, q, 0, crashDrain)
	for _, w := range workers {
		w.Stop(t, crashStop)
	}
}
