package priority

// Tests of the scripts and of the worker's internals, against real Redis
// (the package's TestMain in main_test.go provides it).

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/wire"
)

var quietLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// newTestQueue returns a fresh priority queue whose keys are deleted when the
// test ends.
func newTestQueue(t testing.TB, cfg *QueueConfig) *Queue {
	t.Helper()
	client := redistest.NewClient(t)
	q, err := streamq.NewQueue(client, redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := client.Scan(ctx, 0, core.Of(q).Keys.Part("*"), 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val()) // a test's own few keys
		}
		if len(keys) > 0 {
			client.Unlink(ctx, keys...)
		}
	})
	pq, err := NewQueue(q, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pq
}

// testRun returns the backend of a worker run on pq, to pop jobs as a
// worker would (and then, for a test, crash: nothing finishes or extends
// them).
func testRun(t testing.TB, pq *Queue, cfg WorkerConfig) *backend {
	t.Helper()
	cfg.Logger = quietLogger
	w, err := NewWorker(pq, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &backend{w: w, pq: pq, run: randHex(3), credits: make([]int64, len(w.bands))}
}

// pop leases up to n jobs as the worker's fetch does (without waiting for
// work when there is none).
func pop(t testing.TB, b *backend, n int) []engine.Delivery {
	t.Helper()
	ds, err := b.Fetch(context.Background(), n, time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// payload returns the payload of a popped job.
func payload(t testing.TB, d engine.Delivery) string {
	t.Helper()
	f, err := wire.Unpack(d.Packed)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(f["payload"])
}

// popAll pops every ready job in order and returns the payloads.
func popAll(t testing.TB, b *backend) []string {
	t.Helper()
	var out []string
	for range 10_000 {
		ds := pop(t, b, 7) // odd batches: order across pops matters too
		if len(ds) == 0 {
			return out
		}
		for _, d := range ds {
			out = append(out, payload(t, d))
		}
	}
	t.Fatal("more than 70,000 jobs popped")
	return nil
}

// reapUntil reaps until a lease expired and returns the IDs reaped.
func reapUntil(t testing.TB, pq *Queue) []string {
	t.Helper()
	var ids []string
	redistest.WaitFor(t, 10*time.Second, "the lease to expire and be reaped", func() bool {
		var err error
		ids, _, err = pq.db.Reap(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(ids) > 0
	})
	return ids
}

// TestQueue_FIFOBeyond2to32 sets the sequence counter just below 2^32, 2^53
// (where doubles stop being exact) and 2^63 (the end of Redis integers) and
// pushes across each boundary, at the edges of the priority range and in
// between: within a priority jobs must leave in push order, and priorities
// must keep their order.
func TestQueue_FIFOBeyond2to32(t *testing.T) {
	t.Parallel()
	for _, lowerFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("LowerFirst=%v", lowerFirst), func(t *testing.T) {
			t.Parallel()
			pq := newTestQueue(t, &QueueConfig{LowerFirst: lowerFirst})
			ctx := context.Background()
			client := pq.core.RDB
			prios := []int{MaxPriority, MaxPriority - 1, 1, 0, -1, MinPriority + 1, MinPriority}
			type pushed struct {
				prio int
				name string
			}
			var all []pushed
			starts := []uint64{1<<32 - 3, 1<<53 - 3, math.MaxInt64 - 3*uint64(len(prios))}
			for si, start := range starts {
				if err := client.Set(ctx, pq.keys.Seq, strconv.FormatUint(start, 10), 0).Err(); err != nil {
					t.Fatal(err)
				}
				// Three rounds over every priority cross the boundary.
				var jobs []Job
				for round := range 3 {
					for _, p := range prios {
						name := fmt.Sprintf("s%d-r%d-p%d", si, round, p)
						jobs = append(jobs, Job{Priority: p, Payload: []byte(name)})
						all = append(all, pushed{p, name})
					}
				}
				ids, err := pq.PushBatch(ctx, jobs)
				if err != nil {
					t.Fatal(err)
				}
				if want := strconv.FormatUint(start+1, 10); ids[0] != want {
					t.Errorf("first ID after setting the counter to %d: %s, want %s", start, ids[0], want)
				}
			}
			if n, _ := client.Get(ctx, pq.keys.Seq).Uint64(); n <= 1<<62 {
				t.Fatalf("sequence counter %d: the test did not reach the int64 range end", n)
			}
			// Members hold exact 20-digit sequence numbers past 2^32 and 2^53.
			ms, err := client.ZRange(ctx, pq.keys.Ready, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"00000000004294967296:", "00009007199254740993:", "09223372036854775807:"} {
				found := false
				for _, m := range ms {
					found = found || strings.HasPrefix(m, want)
				}
				if !found {
					t.Errorf("no member starts with %s: %v", want, ms[:min(len(ms), 5)])
				}
			}

			var want []string
			order := prios
			if lowerFirst {
				order = make([]int, len(prios))
				for i, p := range prios {
					order[len(prios)-1-i] = p
				}
			}
			for _, p := range order {
				for _, j := range all {
					if j.prio == p {
						want = append(want, j.name)
					}
				}
			}
			got := popAll(t, testRun(t, pq, WorkerConfig{Concurrency: 7}))
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("pop order:\n%s\nwant:\n%s", strings.Join(got, " "), strings.Join(want, " "))
			}
		})
	}
}

// TestLease_ExpiryReturnsJobInPlace pops a job as a worker that then crashes
// would, and checks that after the lease expired the reaper puts it back with
// its original priority and its place among equal priorities, and that the
// next delivery is counted.
func TestLease_ExpiryReturnsJobInPlace(t *testing.T) {
	t.Parallel()
	pq := newTestQueue(t, nil)
	ctx := context.Background()
	client := pq.core.RDB
	if _, err := pq.PushBatch(ctx, []Job{{Priority: 5, Payload: []byte("a")}, {Priority: 5, Payload: []byte("b")}, {Priority: 1, Payload: []byte("c")}}); err != nil {
		t.Fatal(err)
	}
	before, _ := client.ZRangeWithScores(ctx, pq.keys.Ready, 0, -1).Result()
	crashed := testRun(t, pq, WorkerConfig{Lease: 30 * time.Millisecond})
	res := pop(t, crashed, 1)
	if len(res) != 1 || payload(t, res[0]) != "a" || res[0].Prior != 0 || !res[0].Charged {
		t.Fatalf("pop: %+v; want job a, charged, no crashed run before", res)
	}
	if n, _ := client.ZCard(ctx, pq.keys.Leases).Result(); n != 1 {
		t.Fatalf("%d leases, want 1", n)
	}
	if ids := reapUntil(t, pq); len(ids) != 1 || ids[0] != res[0].ID {
		t.Errorf("reaped %v, want [%s]", ids, res[0].ID)
	}
	after, _ := client.ZRangeWithScores(ctx, pq.keys.Ready, 0, -1).Result()
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("ready set after the expiry %v, want it as before the pop %v", after, before)
	}
	if n, _ := client.ZCard(ctx, pq.keys.Leases).Result(); n != 0 {
		t.Errorf("%d leases left, want 0", n)
	}
	next := testRun(t, pq, WorkerConfig{})
	res = pop(t, next, 1)
	if len(res) != 1 || payload(t, res[0]) != "a" || res[0].Prior != 1 || !res[0].Suspect {
		t.Errorf("pop after expiry: %+v; want job a again, its crashed run counted", res)
	}

	// A lease marked waiting (its job was to run alone and had not started)
	// expires without counting a crashed run: job b, popped by a worker
	// that then dies.
	waiting := testRun(t, pq, WorkerConfig{Lease: 30 * time.Millisecond})
	res = pop(t, waiting, 1)
	if held, err := waiting.Charge(ctx, &res[0], false); err != nil || !held {
		t.Fatalf("mark waiting: %v %v", held, err)
	}
	reapUntil(t, pq)
	if payload(t, res[0]) != "b" {
		t.Fatalf("popped %q, want b (a is leased)", payload(t, res[0]))
	}
	res = pop(t, testRun(t, pq, WorkerConfig{}), 1)
	if len(res) != 1 || payload(t, res[0]) != "b" || res[0].Prior != 0 {
		t.Errorf("pop after the waiting lease expired: %+v; want job b with no crashed run counted", res)
	}
	if n, _ := client.HLen(ctx, pq.keys.Waiting).Result(); n != 0 {
		t.Errorf("%d waiting marks left after the expiry, want 0", n)
	}
}

// TestFinish_Cases checks what finishing does in each state a job can be in
// when its handler returns.
func TestFinish_Cases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	finish := func(pq *Queue, j engine.Delivery) []int64 {
		t.Helper()
		done, left, err := pq.db.Finish(ctx, rdb.FinishParams{Leases: []string{j.Key}, IDs: []string{j.ID}})
		if err != nil {
			t.Fatal(err)
		}
		return []int64{done, left}
	}
	reap := func(pq *Queue) { t.Helper(); reapUntil(t, pq) }
	empty := func(pq *Queue) bool {
		n, _ := pq.core.RDB.Exists(ctx, pq.keys.Ready, pq.keys.Leases, pq.keys.Delayed, pq.keys.Jobs, pq.keys.Deliveries).Result()
		return n == 0
	}

	t.Run("held", func(t *testing.T) {
		t.Parallel()
		pq := newTestQueue(t, nil)
		if _, err := pq.Push(ctx, Job{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		res := pop(t, testRun(t, pq, WorkerConfig{}), 1)
		if got := finish(pq, res[0]); got[0] != 1 || !empty(pq) {
			t.Errorf("finish: %v, want 1 finished and nothing left", got)
		}
		if got := finish(pq, res[0]); got[0] != 0 || got[1] != 1 {
			t.Errorf("second finish: %v, want nothing done", got)
		}
	})
	t.Run("expired and waiting", func(t *testing.T) {
		t.Parallel()
		pq := newTestQueue(t, nil)
		if _, err := pq.Push(ctx, Job{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		res := pop(t, testRun(t, pq, WorkerConfig{Lease: minLease}), 1)
		reap(pq)
		// The job is done although its lease expired: it must not run again.
		if got := finish(pq, res[0]); got[0] != 1 || !empty(pq) {
			t.Errorf("finish after expiry: %v, want 1 finished and nothing left", got)
		}
	})
	t.Run("expired and taken by another", func(t *testing.T) {
		t.Parallel()
		pq := newTestQueue(t, nil)
		if _, err := pq.Push(ctx, Job{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		old := pop(t, testRun(t, pq, WorkerConfig{Lease: minLease}), 1)
		reap(pq)
		cur := pop(t, testRun(t, pq, WorkerConfig{}), 1)
		if len(cur) != 1 || cur[0].Key == old[0].Key {
			t.Fatalf("second pop %+v: want the job under a new lease", cur)
		}
		if got := finish(pq, old[0]); got[0] != 0 || got[1] != 1 {
			t.Errorf("stale finish: %v, want it left to the new holder", got)
		}
		// Neither can the stale holder extend, retry or dead-letter it.
		lost, _ := pq.db.KeepAlive(ctx, rdb.KeepAliveParams{Lease: time.Second, Leases: []string{old[0].Key, cur[0].Key}})
		if len(lost) != 1 || lost[0] != old[0].Key {
			t.Errorf("keep-alive reported %v lost, want only the stale lease", lost)
		}
		if moved, _ := pq.db.Retry(ctx, rdb.RetryParams{Lease: old[0].Key, Data: wire.Pack([]any{"v", "1", "payload", "changed"})}); moved {
			t.Error("a stale lease retried the job")
		}
		if id, err := pq.db.DeadLetter(ctx, rdb.PriorityDeadLetterParams{Lease: old[0].Key, Fields: []any{"dl_reason", "x"}}); id != "" || err != nil {
			t.Errorf("stale dead letter: %q %v, want nothing done", id, err)
		}
		if got := finish(pq, cur[0]); got[0] != 1 || !empty(pq) {
			t.Errorf("finish by the holder: %v, want 1 finished and nothing left", got)
		}
	})
}

// TestWorker_ExpiredLeaseRunsAgain leaves a popped job to expire, as after a
// SIGKILL, and checks that a worker then runs it with the crashed delivery
// counted, and that a job over MaxDeliveries is dead-lettered without
// running.
func TestWorker_ExpiredLeaseRunsAgain(t *testing.T) {
	t.Parallel()
	pq := newTestQueue(t, nil)
	ctx := context.Background()
	if _, err := pq.PushBatch(ctx, []Job{{Priority: 2, Payload: []byte("again")}, {Priority: 1, Payload: []byte("over")}}); err != nil {
		t.Fatal(err)
	}
	crashed := testRun(t, pq, WorkerConfig{Lease: minLease})
	// "again" crashed once; "over" crashed twice (MaxDeliveries 2).
	if res := pop(t, crashed, 2); len(res) != 2 {
		t.Fatalf("pop: %+v", res)
	}
	// A delivery of "over" before this one was cut short too.
	if err := pq.core.RDB.HIncrBy(ctx, pq.keys.Deliveries, "2", 1).Err(); err != nil {
		t.Fatal(err)
	}
	ran := make(chan *streamq.Message, 2)
	w, err := NewWorker(pq, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		ran <- m
		return nil
	}), &WorkerConfig{Lease: time.Second, ReapInterval: 5 * time.Millisecond, MaxDeliveries: 2, Concurrency: 1, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case m := <-ran:
		if string(m.Payload) != "again" || m.Attempt != 2 {
			t.Errorf("rerun %q: attempt %d, want job again on its second attempt", m.Payload, m.Attempt)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the expired job did not run again")
	}
	redistest.WaitFor(t, 30*time.Second, "the exhausted job dead-lettered", func() bool { return w.Stats().DeadLettered == 1 })
	dls, _, err := pq.q.DeadLetters().List(ctx, "", 10)
	if err != nil || len(dls) != 1 || string(dls[0].Payload) != "over" || dls[0].Reason != streamq.ReasonMaxDeliveries || dls[0].Attempts != 2 {
		t.Errorf("dead letters %+v (%v), want job over with 2 attempts", dls, err)
	}
	select {
	case m := <-ran:
		t.Errorf("job %q ran although it was over MaxDeliveries", m.Payload)
	default:
	}
	if s := w.Stats(); s.Reclaimed != 2 {
		t.Errorf("stats %+v, want 2 expired leases reaped", s)
	}
}

// TestWorker_Malformed stores a job that does not follow the wire format
// (written by another client) and checks it is dead-lettered with the reason.
func TestWorker_Malformed(t *testing.T) {
	t.Parallel()
	pq := newTestQueue(t, nil)
	ctx := context.Background()
	// As scriptPush would store it, but with format version 9.
	var pp rdb.PushParams
	pp.Add("0", wire.Pack([]any{"v", "9", "payload", "p"}))
	if _, err := pq.db.Push(ctx, &pp); err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(pq, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		t.Error("a malformed job ran")
		return nil
	}), &WorkerConfig{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	redistest.WaitFor(t, 30*time.Second, "the malformed job dead-lettered", func() bool { return w.Stats().DeadLettered == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	dls, _, err := pq.q.DeadLetters().List(ctx, "", 10)
	if err != nil || len(dls) != 1 || dls[0].Reason != streamq.ReasonMalformed || dls[0].Fields["v"] != "9" {
		t.Errorf("dead letters %+v (%v), want the job with reason malformed and its raw fields", dls, err)
	}
}

// TestPopWeighted_Proportions pops from three full bands weighted 6:3:1 and
// checks the exact shares, across pops of different sizes (the credits carry
// over), and that an empty band's share goes to the others.
func TestPopWeighted_Proportions(t *testing.T) {
	t.Parallel()
	pq := newTestQueue(t, nil)
	ctx := context.Background()
	var jobs []Job
	for i := range 300 {
		for _, p := range []int{20, 10, 0} {
			jobs = append(jobs, Job{Priority: p + i%3, Payload: []byte(strconv.Itoa(p))})
		}
	}
	if _, err := pq.PushBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	r := testRun(t, pq, WorkerConfig{Bands: []Band{
		{Min: 20, Max: MaxPriority, Weight: 6}, {Min: 10, Max: 19, Weight: 3}, {Min: MinPriority, Max: 9, Weight: 1},
	}})
	count := map[string]int{}
	taken := 0
	for _, n := range []int{1, 2, 3, 4, 10, 30, 50} { // 100 in all
		res := pop(t, r, n)
		if len(res) != n {
			t.Fatalf("pop %d: %d jobs", n, len(res))
		}
		for _, j := range res {
			count[payload(t, j)]++
		}
		taken += int(n)
	}
	if count["20"] != 60 || count["10"] != 30 || count["0"] != 10 {
		t.Errorf("first 100 pops by band: %v, want 60/30/10", count)
	}
	// Take the rest: band 20 (300) runs out first; then 10 and 0 share 3:1.
	clear(count)
	for range 1000 {
		res := pop(t, r, 10)
		if len(res) == 0 {
			break
		}
		for _, j := range res {
			count[payload(t, j)]++
		}
	}
	if count["20"] != 240 || count["10"] != 270 || count["0"] != 290 {
		t.Errorf("the rest by band: %v, want every remaining job (240/270/290)", count)
	}
}

func TestBandRanges(t *testing.T) {
	t.Parallel()
	bands := []Band{{Min: MinPriority, Max: 0, Weight: 1}, {Min: 10, Max: MaxPriority, Weight: 6}, {Min: 1, Max: 9, Weight: 3}}
	got, err := bandRanges(bands, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "[{-2147483647 -10 6} {-9 -1 3} {0 2147483648 1}]"
	if fmt.Sprint(got) != want {
		t.Errorf("higher first: %v, want %v (scores -priority, most urgent first)", got, want)
	}
	got, err = bandRanges(bands, true)
	if err != nil {
		t.Fatal(err)
	}
	want = "[{-2147483648 0 1} {1 9 3} {10 2147483647 6}]"
	if fmt.Sprint(got) != want {
		t.Errorf("lower first: %v, want %v", got, want)
	}
}

func TestParseLease(t *testing.T) {
	t.Parallel()
	for lm, want := range map[string]string{
		"00000000000000000042:-5:42|w1:abc.1:3":               "42 -5",
		"00000000000000000043:7:1712345678901-0|w-1:x.2f:1":   "1712345678901-0 7",
		"00000000000000000044:-2147483647:17-3|name:with:c:2": "17-3 -2147483647",
		"00000000000000000045:2147483648:9|n:r.1:1":           "9 2147483648",
	} {
		if id, score := parseLease(lm); fmt.Sprint(id, " ", score) != want {
			t.Errorf("parseLease(%q) = %s %d, want %s", lm, id, score, want)
		}
	}
}

// TestPackFields checks that job data round-trips and is what Lua's
// cmsgpack makes of a table of strings, both ways, for every string length
// class.
// TestWorker_LastAttemptRunsAlone gives a job as many cut-short runs as make
// its next run the last one MaxDeliveries allows: the worker runs it alone,
// after the jobs popped with it finished and before it takes any other. The
// runs are either counted by the delivery counter (taken over after lease
// expiries) or carried by a copy handed back without charge at a shutdown
// (attempt 2 and the crashed mark, with a fresh delivery counter).
func TestWorker_LastAttemptRunsAlone(t *testing.T) {
	t.Parallel()
	for _, handedBack := range []bool{false, true} {
		name := "taken over"
		if handedBack {
			name = "handed back after crashes"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testLastAttemptRunsAlone(t, handedBack)
		})
	}
}

func testLastAttemptRunsAlone(t *testing.T, handedBack bool) {
	pq := newTestQueue(t, nil)
	ctx := context.Background()
	jobs := []Job{{Priority: 9, Payload: []byte("last")}}
	for i := range 12 {
		jobs = append(jobs, Job{Priority: 1, Payload: []byte(strconv.Itoa(i))})
	}
	ids, err := pq.PushBatch(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	// Two runs of "last" were cut short: its next run is its third.
	if handedBack {
		data := wire.Pack([]any{"v", "1", "payload", "last", "attempt", "2", "crashed", "1"})
		if err := pq.core.RDB.HSet(ctx, pq.keys.Jobs, ids[0], data).Err(); err != nil {
			t.Fatal(err)
		}
	} else if err := pq.core.RDB.HSet(ctx, pq.keys.Deliveries, ids[0], 2).Err(); err != nil {
		t.Fatal(err)
	}
	var running, overlap atomic.Int64
	var lastRan atomic.Bool
	var othersBefore atomic.Int64
	done := make(chan struct{}, len(jobs))
	h := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		n := running.Add(1)
		defer running.Add(-1)
		if string(m.Payload) == "last" {
			if n != 1 || m.Attempt != 3 {
				overlap.Add(1)
			}
			lastRan.Store(true)
		} else if !lastRan.Load() {
			othersBefore.Add(1)
		}
		time.Sleep(2 * time.Millisecond) // simulated work, so runs could overlap
		if string(m.Payload) == "last" && running.Load() != 1 {
			overlap.Add(1)
		}
		done <- struct{}{}
		return nil
	})
	w, err := NewWorker(pq, h, &WorkerConfig{Concurrency: 4, MaxDeliveries: 3, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(rctx) }()
	for range jobs {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("jobs did not all run")
		}
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if overlap.Load() != 0 {
		t.Error("the last attempt ran beside other jobs (or not as attempt 3)")
	}
	// It was popped with 3 others (4 free slots), which ran before it.
	if n := othersBefore.Load(); n != 3 {
		t.Errorf("%d jobs ran before the last attempt, want the 3 popped with it", n)
	}
}
