package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/proctest"
	"github.com/streamq/streamq/internal/redistest"
)

// Job IDs and dedup modes through the public API, against a real Redis:
// one ID through a job's life, a chosen ID taken while the job lives and
// after it finished, and every dedup mode under concurrent enqueues from
// goroutines and processes and under a proxy that drops replies.

// TestJobID_WholeLife: a job enqueued with a chosen ID is seen under it by
// every attempt (EntryID changes with each copy), a duplicate while it lives
// and after it finished, and the inspector finds it by that ID alone.
func TestJobID_WholeLife(t *testing.T) {
	t.Parallel()
	rdb, q, p := cqSetup(t, nil)
	ctx := context.Background()
	type seen struct{ id, entry string }
	attempts := make(chan seen, 4)
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
		attempts <- seen{m.ID, m.EntryID}
		if m.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}), fastConsumer(streamq.ConsumerConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Enqueue(ctx, []byte("a"), streamq.WithJobID("order-1"))
	if err != nil || id != "order-1" {
		t.Fatalf("Enqueue: %q, %v; want order-1", id, err)
	}
	if dup, err := p.Enqueue(ctx, []byte("b"), streamq.WithJobID("order-1"), streamq.ProcessIn(time.Hour)); !errors.Is(err, streamq.ErrDuplicate) || dup != "order-1" {
		t.Fatalf("the ID again while waiting: %q, %v; want order-1 and ErrDuplicate", dup, err)
	}
	stop := cqRun(t, c)
	var got []seen
	for range 2 {
		select {
		case s := <-attempts:
			got = append(got, s)
		case <-time.After(relWait):
			t.Fatalf("attempts seen: %v, want 2", got)
		}
	}
	if got[0].id != "order-1" || got[1].id != "order-1" || got[0].entry == got[1].entry {
		t.Fatalf("attempts saw %v: want ID order-1 in both, and two entry IDs", got)
	}
	redistest.WaitFor(t, relWait, "the job acknowledged", func() bool { return c.Stats().Processed == 1 })
	stop()
	if dup, err := p.Enqueue(ctx, []byte("c"), streamq.WithJobID("order-1")); !errors.Is(err, streamq.ErrDuplicate) || dup != "order-1" {
		t.Fatalf("the ID again after it finished: %q, %v; want order-1 and ErrDuplicate", dup, err)
	}
	in, err := inspect.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	iq, err := in.Queue(ctx, q.Name())
	if err != nil {
		t.Fatal(err)
	}
	if j, err := iq.Job(ctx, "order-1"); err != nil || j.State != inspect.StateDone {
		t.Fatalf("inspect of the finished job: %+v, %v; want done", j, err)
	}

	// Delayed: found under its ID, cancelled by it, and the ID is free again.
	if _, err := p.Enqueue(ctx, []byte("d"), streamq.WithJobID("later-1"), streamq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if j, err := iq.Job(ctx, "later-1"); err != nil || j.State != inspect.StateDelayed || j.ID != "later-1" {
		t.Fatalf("inspect of the delayed job: %+v, %v", j, err)
	}
	if ok, err := q.CancelDelayed(ctx, "later-1"); err != nil || !ok {
		t.Fatalf("CancelDelayed: %v, %v", ok, err)
	}
	if _, err := p.Enqueue(ctx, []byte("e"), streamq.WithJobID("later-1")); err != nil {
		t.Fatalf("the ID of a cancelled job: %v, want it free", err)
	}
}

// TestJobID_Batch: EnqueueBatch with Job.ID stores each job under its ID
// (in the stream, or delayed), skips the jobs whose IDs are taken (by a
// living job or an earlier job of the batch) with ErrDuplicate and "" in
// their places, and refuses a batch where some jobs have no ID, a bad ID,
// or an ID with WithJobID; the inspector finds the jobs by their IDs.
func TestJobID_Batch(t *testing.T) {
	t.Parallel()
	rdb, q, p := cqSetup(t, nil)
	ctx := context.Background()
	if _, err := p.Enqueue(ctx, []byte("old"), streamq.WithJobID("b-2")); err != nil {
		t.Fatal(err)
	}
	jobs := []streamq.Job{{ID: "b-1", Payload: []byte("1")}, {ID: "b-2", Payload: []byte("2")}, {ID: "b-1", Payload: []byte("again")}, {ID: "b-3", Payload: []byte("3")}}
	ids, err := p.EnqueueBatch(ctx, jobs)
	if !errors.Is(err, streamq.ErrDuplicate) || strings.Join(ids, ",") != "b-1,,,b-3" {
		t.Fatalf("EnqueueBatch: %q, %v; want [b-1 \"\" \"\" b-3] and ErrDuplicate", ids, err)
	}
	later, err := p.EnqueueBatch(ctx, []streamq.Job{{ID: "b-4", Payload: []byte("4")}}, streamq.ProcessIn(time.Hour))
	if err != nil || later[0] != "b-4" {
		t.Fatalf("delayed EnqueueBatch: %q, %v", later, err)
	}
	in, err := inspect.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	iq, err := in.Queue(ctx, q.Name())
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]inspect.State{"b-1": inspect.StateWaiting, "b-3": inspect.StateWaiting, "b-4": inspect.StateDelayed} {
		if j, err := iq.Job(ctx, id); err != nil || j.State != want || j.ID != id {
			t.Errorf("inspect of %s: %+v, %v; want %s", id, j, err, want)
		}
	}
	for name, tc := range map[string]struct {
		jobs []streamq.Job
		opts []streamq.EnqueueOption
		want string
	}{
		"some without":   {[]streamq.Job{{ID: "c-1"}, {}}, nil, "jobs[1].ID"},
		"bad ID":         {[]streamq.Job{{ID: "c 1"}}, nil, "jobs[0].ID"},
		"with WithJobID": {[]streamq.Job{{ID: "c-1"}}, []streamq.EnqueueOption{streamq.WithJobID("c-2")}, "Job.ID"},
		"with Throttle":  {[]streamq.Job{{ID: "c-1"}}, []streamq.EnqueueOption{streamq.Throttle("k", time.Minute)}, "Throttle"},
	} {
		if _, err := p.EnqueueBatch(ctx, tc.jobs, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, tc.want)
		}
	}
	if n := rdb.XLen(ctx, core.Of(q).Keys.Stream).Val(); n != 3 {
		t.Errorf("%d jobs in the stream, want 3 (old, b-1, b-3)", n)
	}
}

// TestJobID_Invalid: a bad ID is refused with a clear error, nothing written.
func TestJobID_Invalid(t *testing.T) {
	t.Parallel()
	rdb, q, p := cqSetup(t, nil)
	ctx := context.Background()
	for _, id := range []string{"", "1700000000000-0", "a b", strings.Repeat("x", streamq.MaxJobIDLen+1)} {
		if _, err := p.Enqueue(ctx, []byte("x"), streamq.WithJobID(id)); err == nil || !strings.Contains(err.Error(), "WithJobID") {
			t.Errorf("WithJobID(%q): %v, want an error naming WithJobID", id, err)
		}
	}
	if _, err := p.EnqueueBatch(ctx, []streamq.Job{{Payload: []byte("a")}, {Payload: []byte("b")}}, streamq.WithJobID("batch-1")); err == nil {
		t.Error("EnqueueBatch with WithJobID: no error")
	}
	if n := rdb.XLen(ctx, core.Of(q).Keys.Stream).Val(); n != 0 {
		t.Errorf("%d jobs written by refused calls", n)
	}
}

// dedupCase is one dedup mode for the concurrency tests: its options, and
// whether a losing enqueue returns ErrDuplicate (Debounce returns nil).
type dedupCase struct {
	name string
	opts []streamq.EnqueueOption
	dup  bool
}

func dedupCases() []dedupCase {
	return []dedupCase{
		{"WithJobID", []streamq.EnqueueOption{streamq.WithJobID("job-x")}, true},
		{"Unique", []streamq.EnqueueOption{streamq.Unique("k", time.Minute)}, true},
		{"UniqueWhile", []streamq.EnqueueOption{streamq.UniqueWhile("k", time.Minute, streamq.UniqueWaiting)}, true},
		{"UniqueByArgs", []streamq.EnqueueOption{streamq.WithKind("report"), streamq.UniqueByArgs(time.Minute)}, true},
		{"Throttle", []streamq.EnqueueOption{streamq.Throttle("k", time.Minute)}, true},
		{"Debounce", []streamq.EnqueueOption{streamq.Debounce("k", time.Minute)}, false},
	}
}

// TestDedup_ConcurrentEnqueues: for every mode, 4 clients with 8
// goroutines each enqueue the same job at once: one job is stored, and
// every call returns its ID.
func TestDedup_ConcurrentEnqueues(t *testing.T) {
	t.Parallel()
	for _, tc := range dedupCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb, q, _ := cqSetup(t, nil)
			ctx := context.Background()
			var wg sync.WaitGroup
			var stored, dups atomic.Int64
			ids := make([]string, 32)
			start := make(chan struct{})
			for c := range 4 {
				client := redistest.NewClient(t)
				cq, err := streamq.NewQueue(client, q.Name(), nil)
				if err != nil {
					t.Fatal(err)
				}
				p, err := streamq.NewProducer(cq, nil)
				if err != nil {
					t.Fatal(err)
				}
				for g := range 8 {
					wg.Go(func() {
						<-start
						id, err := p.Enqueue(ctx, []byte("same"), tc.opts...)
						ids[c*8+g] = id
						switch {
						case errors.Is(err, streamq.ErrDuplicate):
							dups.Add(1)
						case err == nil:
							stored.Add(1)
						default:
							t.Errorf("enqueue: %v", err)
						}
					})
				}
			}
			close(start)
			wg.Wait()
			if want := int64(31); tc.dup && (stored.Load() != 1 || dups.Load() != want) {
				t.Errorf("%d stored, %d duplicates; want 1 and %d", stored.Load(), dups.Load(), want)
			}
			for i, id := range ids {
				if id != ids[0] || id == "" {
					t.Fatalf("enqueue %d returned %q, want the one job's ID %q", i, id, ids[0])
				}
			}
			k := core.Of(q).Keys
			if n := rdb.XLen(ctx, k.Stream).Val() + rdb.ZCard(ctx, k.Delayed).Val(); n != 1 {
				t.Errorf("%d jobs stored, want 1", n)
			}
		})
	}
}

// dedupChildEnv makes the integration test binary a child enqueuer (see
// dedupChild): its value is "<queue>:<mode>:<n>".
const dedupChildEnv = "STREAMQ_DEDUP_CHILD"

// dedupChild enqueues n jobs named job-0 ... job-<n-1> with the mode's
// option, from 8 goroutines, and prints "ok <i> <id>" or "dup <i> <id>"
// per job, then "done". It returns the exit code.
func dedupChild(spec string) int {
	parts := strings.SplitN(spec, ":", 3)
	var n int
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "bad", dedupChildEnv, spec)
		return 2
	}
	fmt.Sscan(parts[2], &n)
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close()
	q, err := streamq.NewQueue(client, parts[0], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ready enqueuer")
	// Start with the others: the test pushes one token per child.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := client.BLPop(ctx, time.Minute, core.Of(q).Keys.Part("test:go")).Err(); err != nil {
		fmt.Fprintln(os.Stderr, "wait for the start:", err)
		return 2
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				opt := streamq.WithJobID(fmt.Sprintf("job-%d", i))
				if parts[1] == "throttle" {
					opt = streamq.Throttle(fmt.Sprintf("job-%d", i), time.Minute)
				}
				id, err := p.Enqueue(ctx, []byte("x"), opt)
				verdict := "ok"
				if errors.Is(err, streamq.ErrDuplicate) {
					verdict = "dup"
				} else if err != nil {
					verdict = "err"
				}
				mu.Lock()
				fmt.Fprintf(out, "%s %d %s\n", verdict, i, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Fprintln(out, "done")
	out.Flush()
	return 0
}

// TestDedup_ConcurrentProcesses: three processes (children of this test
// binary, started together) enqueue the same 200 job IDs (and throttle keys) at
// once: each is stored by exactly one enqueue of one process.
func TestDedup_ConcurrentProcesses(t *testing.T) {
	t.Parallel()
	const n = 200
	for _, mode := range []string{"id", "throttle"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			rdb, q, _ := cqSetup(t, nil)
			var mu sync.Mutex
			wins := map[string]int{}
			lines := func(line string) {
				f := strings.Fields(line)
				if len(f) == 3 {
					mu.Lock()
					if f[0] == "ok" {
						wins[f[1]]++
					} else if f[0] != "dup" {
						t.Errorf("child: %s", line)
					}
					mu.Unlock()
				}
			}
			var procs []*proctest.Proc
			for i := range 3 {
				procs = append(procs, proctest.Start(t, proctest.Options{
					Name: fmt.Sprintf("enqueuer-%d", i), Bin: os.Args[0], Args: []string{"-test.run=^$"},
					Env:    []string{dedupChildEnv + "=" + q.Name() + ":" + mode + ":" + fmt.Sprint(n), "REDIS_ADDR=" + redistest.Addr()},
					OnLine: lines,
				}))
			}
			ctx := context.Background()
			for _, p := range procs {
				p.WaitReady(t, relWait)
			}
			if err := rdb.RPush(ctx, core.Of(q).Keys.Part("test:go"), 1, 2, 3).Err(); err != nil {
				t.Fatal(err)
			}
			for _, p := range procs {
				select {
				case <-p.Done():
				case <-time.After(relWait):
					t.Fatalf("%s did not finish", p.Name())
				}
				if err := p.Err(); err != nil {
					t.Fatalf("%s: %v; stderr:\n%s", p.Name(), err, p.Stderr())
				}
			}
			if got := rdb.XLen(ctx, core.Of(q).Keys.Stream).Val(); got != n {
				t.Errorf("%d jobs stored, want %d", got, n)
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range n {
				if w := wins[fmt.Sprint(i)]; w != 1 {
					t.Errorf("job-%d stored by %d enqueues, want 1", i, w)
				}
			}
		})
	}
}

// TestResend_Dedup: the reply of each mode's enqueue is dropped and
// go-redis sends the call again: the call returns its own job (not a
// duplicate of it), and one job is stored.
func TestResend_Dedup(t *testing.T) {
	t.Parallel()
	for _, tc := range dedupCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newResend(t)
			ctx := context.Background()
			check := r.drop("enqueue_one")
			id, err := r.producer().Enqueue(ctx, []byte("same"), tc.opts...)
			check()
			if err != nil || id == "" {
				t.Fatalf("Enqueue through a dropped reply: %q, %v; want the job's ID and no error", id, err)
			}
			if n := r.direct.XLen(ctx, r.keys.Stream).Val() + r.card(r.keys.Delayed); n != 1 {
				t.Errorf("%d jobs stored, want 1", n)
			}
		})
	}
}

// TestDedup_Debounce: a second enqueue while the job waits replaces its
// payload and moves its start; the job runs once, with the last payload.
func TestDedup_Debounce(t *testing.T) {
	t.Parallel()
	_, q, p := cqSetup(t, nil)
	ctx := context.Background()
	ran := make(chan *streamq.Message, 4)
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
		ran <- m
		return nil
	}), fastConsumer(streamq.ConsumerConfig{SchedulerInterval: 20 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Enqueue(ctx, []byte("v1"), streamq.Debounce("recalc:7", 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Enqueue(ctx, []byte("v2"), streamq.Debounce("recalc:7", 300*time.Millisecond))
	if err != nil || second != first {
		t.Fatalf("second enqueue: %q, %v; want %q", second, err, first)
	}
	stop := cqRun(t, c)
	defer stop()
	select {
	case m := <-ran:
		if string(m.Payload) != "v2" || m.ID != first {
			t.Fatalf("ran %q as %s, want v2 as %s", m.Payload, m.ID, first)
		}
	case <-time.After(relWait):
		t.Fatal("the debounced job never ran")
	}
	third, err := p.Enqueue(ctx, []byte("v3"), streamq.Debounce("recalc:7", time.Millisecond))
	if err != nil || third == first {
		t.Fatalf("enqueue after it ran: %q, %v; want a new job", third, err)
	}
	select {
	case m := <-ran:
		if string(m.Payload) != "v3" {
			t.Fatalf("ran %q, want v3", m.Payload)
		}
	case <-time.After(relWait):
		t.Fatal("the new debounced job never ran")
	}
}

// TestDedup_UniqueWhileWaiting: a key held only while waiting passes to a
// new job once its holder runs.
func TestDedup_UniqueWhileWaiting(t *testing.T) {
	t.Parallel()
	_, q, p := cqSetup(t, nil)
	ctx := context.Background()
	running, release := make(chan string, 2), make(chan struct{})
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
		running <- m.ID
		<-release
		return nil
	}), fastConsumer(streamq.ConsumerConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	opt := streamq.UniqueWhile("sync:7", time.Minute, streamq.UniqueWaiting)
	first, err := p.Enqueue(ctx, []byte("a"), opt)
	if err != nil {
		t.Fatal(err)
	}
	if dup, err := p.Enqueue(ctx, []byte("b"), opt); !errors.Is(err, streamq.ErrDuplicate) || dup != first {
		t.Fatalf("while waiting: %q, %v; want %q and ErrDuplicate", dup, err, first)
	}
	stop := cqRun(t, c)
	defer stop()
	defer close(release)
	select {
	case <-running:
	case <-time.After(relWait):
		t.Fatal("the job never ran")
	}
	if second, err := p.Enqueue(ctx, []byte("c"), opt); err != nil || second == first {
		t.Fatalf("while the holder runs: %q, %v; want a new job", second, err)
	}
}

// TestDedup_Misuse: modes that cannot go together are refused, nothing
// written.
func TestDedup_Misuse(t *testing.T) {
	t.Parallel()
	rdb, q, p := cqSetup(t, nil)
	ctx := context.Background()
	for name, opts := range map[string][]streamq.EnqueueOption{
		"two modes":          {streamq.Unique("k", time.Minute), streamq.Throttle("k", time.Minute)},
		"debounce and delay": {streamq.Debounce("k", time.Minute), streamq.ProcessIn(time.Minute)},
		"debounce and ID":    {streamq.Debounce("k", time.Minute), streamq.WithJobID("job-1")},
		"empty key":          {streamq.Throttle("", time.Minute)},
		"unknown state":      {streamq.UniqueWhile("k", time.Minute, "x")},
	} {
		if _, err := p.Enqueue(ctx, []byte("x"), opts...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if n := rdb.XLen(ctx, core.Of(q).Keys.Stream).Val(); n != 0 {
		t.Errorf("%d jobs written by refused calls", n)
	}
}

// TestJobID_DeadAndRequeued: a dead job keeps its chosen ID taken and is
// found by it; requeued, it runs under the same ID, and the ID stays taken
// after it succeeded.
func TestJobID_DeadAndRequeued(t *testing.T) {
	t.Parallel()
	rdb, q, p := cqSetup(t, nil)
	ctx := context.Background()
	var fail atomic.Bool
	fail.Store(true)
	ran := make(chan string, 4)
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
		ran <- m.ID
		if fail.Load() {
			return streamq.Permanent(errors.New("no"))
		}
		return nil
	}), fastConsumer(streamq.ConsumerConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	stop := cqRun(t, c)
	defer stop()
	if _, err := p.Enqueue(ctx, []byte("a"), streamq.WithJobID("dead-1")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, relWait, "the dead letter", func() bool { return c.Stats().DeadLettered == 1 })
	if _, err := p.Enqueue(ctx, []byte("b"), streamq.WithJobID("dead-1")); !errors.Is(err, streamq.ErrDuplicate) {
		t.Fatalf("the ID of a dead job: %v, want ErrDuplicate", err)
	}
	in, err := inspect.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	iq, err := in.Queue(ctx, q.Name())
	if err != nil {
		t.Fatal(err)
	}
	j, err := iq.Job(ctx, "dead-1")
	if err != nil || j.State != inspect.StateDead || j.ID != "dead-1" {
		t.Fatalf("inspect of the dead job: %+v, %v", j, err)
	}
	fail.Store(false)
	if _, err := q.DeadLetters().Requeue(ctx, j.EntryID); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, relWait, "the requeued job handled", func() bool { return c.Stats().Processed == 1 })
	for range 2 {
		if id := <-ran; id != "dead-1" {
			t.Errorf("a run saw ID %q, want dead-1", id)
		}
	}
	if _, err := p.Enqueue(ctx, []byte("c"), streamq.WithJobID("dead-1")); !errors.Is(err, streamq.ErrDuplicate) {
		t.Fatalf("the ID after the requeued job succeeded: %v, want ErrDuplicate", err)
	}
}
