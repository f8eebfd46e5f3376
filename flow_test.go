package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
)

// gauge counts the jobs running at once, in all and per flow key, and
// remembers the most it saw.
type gauge struct {
	mu      sync.Mutex
	now     map[string]int
	most    map[string]int
	all     int
	mostAll int
}

func newGauge() *gauge { return &gauge{now: map[string]int{}, most: map[string]int{}} }

func (g *gauge) enter(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now[key]++
	g.most[key] = max(g.most[key], g.now[key])
	g.all++
	g.mostAll = max(g.mostAll, g.all)
}

func (g *gauge) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now[key]--
	g.all--
}

func (g *gauge) maxima() (map[string]int, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := make(map[string]int, len(g.most))
	for k, v := range g.most {
		m[k] = v
	}
	return m, g.mostAll
}

// flowJobs enqueues n jobs of each key, payload "<key>/<i>".
func flowJobs(t *testing.T, p *streamq.Producer, n int, keys ...string) {
	t.Helper()
	for i := range n {
		for _, k := range keys {
			var opts []streamq.EnqueueOption
			if k != "" {
				opts = append(opts, streamq.FlowKey(k))
			}
			if _, err := p.Enqueue(context.Background(), []byte(k+"/"+strconv.Itoa(i)), opts...); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// keyOf returns the key of a payload "<key>/<i>".
func keyOf(payload []byte) string {
	for i, b := range payload {
		if b == '/' {
			return string(payload[:i])
		}
	}
	return string(payload)
}

func TestFlow_Caps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		limits   streamq.FlowLimits
		keys     []string
		perKey   map[string]int // the most each key may run
		global   int
		reachAll bool // the global cap must be reached
	}{
		{"per key", streamq.FlowLimits{PerKey: 2, Keys: map[string]int{"b": 1}}, []string{"a", "b", "c"}, map[string]int{"a": 2, "b": 1, "c": 2}, 0, false},
		{"global", streamq.FlowLimits{Global: 3}, []string{"a", ""}, nil, 3, true},
		{"both", streamq.FlowLimits{Global: 4, PerKey: 1}, []string{"a", "b", "c", "d", "e", ""}, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, q, p, _ := ctlSetup(t)
			ctx := context.Background()
			if err := q.SetFlowLimits(ctx, tc.limits); err != nil {
				t.Fatal(err)
			}
			const perKey = 15
			flowJobs(t, p, perKey, tc.keys...)
			g := newGauge()
			var done atomic.Int64
			h := func(ctx context.Context, m *streamq.Message) error {
				k := keyOf(m.Payload)
				g.enter(k)
				time.Sleep(5 * time.Millisecond) // the work: long enough for jobs of a key to overlap
				g.leave(k)
				done.Add(1)
				return nil
			}
			for i := range 3 {
				ctlConsumer(t, q, h, streamq.ConsumerConfig{Name: fmt.Sprint("c", i), Concurrency: 8})
			}
			total := int64(perKey * len(tc.keys))
			redistest.WaitFor(t, 30*time.Second, "every job done", func() bool { return done.Load() == total })
			most, mostAll := g.maxima()
			for k, cap := range tc.perKey {
				if most[k] > cap {
					t.Errorf("key %q ran %d jobs at once, cap %d", k, most[k], cap)
				}
				if most[k] < cap {
					t.Errorf("key %q ran at most %d jobs at once: the cap %d was never reached, the test shows nothing", k, most[k], cap)
				}
			}
			if tc.global > 0 && mostAll > tc.global {
				t.Errorf("%d jobs ran at once, global cap %d", mostAll, tc.global)
			}
			if tc.reachAll && mostAll < tc.global {
				t.Errorf("at most %d jobs ran at once: the global cap %d was never reached", mostAll, tc.global)
			}
			// Every slot is given back once the last jobs are acknowledged.
			redistest.WaitFor(t, 10*time.Second, "every slot given back", func() bool {
				st := flowState(t, q)
				return st.Running == 0 && len(st.Waiting) == 0
			})
		})
	}
}

func TestFlow_StrictOrderAcrossRestarts(t *testing.T) {
	t.Parallel()
	_, q, p, _ := ctlSetup(t)
	ctx := context.Background()
	if err := q.SetFlowLimits(ctx, streamq.FlowLimits{PerKey: 1}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	flowJobs(t, p, n, "a", "b")
	var mu sync.Mutex
	seen := map[string][]int{}
	var done atomic.Int64
	g := newGauge()
	h := func(ctx context.Context, m *streamq.Message) error {
		k := keyOf(m.Payload)
		i, _ := strconv.Atoi(string(m.Payload[len(k)+1:]))
		g.enter(k)
		mu.Lock()
		seen[k] = append(seen[k], i)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		g.leave(k)
		done.Add(1)
		return nil
	}
	// Two consumers, stopped and replaced twice while the jobs run.
	for round := range 3 {
		var stops []func()
		for i := range 2 {
			_, stop := ctlConsumer(t, q, h, streamq.ConsumerConfig{Name: fmt.Sprintf("r%d-%d", round, i), Concurrency: 4})
			stops = append(stops, stop)
		}
		want := min(int64(2*n), int64(round+1)*2*n/3)
		redistest.WaitFor(t, 30*time.Second, "a third of the jobs done", func() bool { return done.Load() >= want })
		if round < 2 {
			for _, stop := range stops {
				stop()
			}
		}
	}
	redistest.WaitFor(t, 30*time.Second, "every job done", func() bool { return done.Load() == 2*n })
	mu.Lock()
	defer mu.Unlock()
	most, _ := g.maxima()
	for _, k := range []string{"a", "b"} {
		if most[k] != 1 {
			t.Errorf("key %s ran %d jobs at once, want 1", k, most[k])
		}
		for i, v := range seen[k] {
			if v != i {
				t.Fatalf("key %s ran %v: job %d ran as number %d (want enqueue order)", k, seen[k], v, i)
			}
		}
	}
}

func TestQueue_SetFlowLimits_Invalid(t *testing.T) {
	t.Parallel()
	q, err := streamq.NewQueue(redistest.NewClient(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []streamq.FlowLimits{{Global: -1}, {PerKey: -1}, {Keys: map[string]int{"a": 0}}, {Keys: map[string]int{"": 1}},
		{Kinds: map[string]int{"k": 0}}, {Kinds: map[string]int{"": 1}}, {KindPerKey: map[string]int{"a b": 1}}, {KindPerKey: map[string]int{"k": -1}},
		{Weights: map[string]int{"a": 0}}, {Weights: map[string]int{"": 2}}} {
		var ce *streamq.ConfigError
		if err := q.SetFlowLimits(context.Background(), l); !errors.As(err, &ce) {
			t.Errorf("%+v: err %v, want a ConfigError", l, err)
		}
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ce *streamq.ConfigError
	if _, err := p.Enqueue(context.Background(), nil, streamq.FlowKey("")); !errors.As(err, &ce) {
		t.Errorf("empty flow key: %v", err)
	}
	if _, err := p.Enqueue(context.Background(), nil, streamq.FlowKey("a\x00b")); !errors.As(err, &ce) {
		t.Errorf("flow key with a NUL byte: %v", err)
	}
}

// flowState reads the queue's flow state.
func flowState(t *testing.T, q *streamq.Queue) rdb.FlowState {
	t.Helper()
	st, err := core.Of(q).DB.FlowStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// fairnessRun enqueues backlog jobs of key A, then 20 of key B, on a queue
// of its own with limits l, runs one consumer of concurrency 16 whose
// handler works 1 ms, and returns how long after its enqueue B's first job
// started, and how many jobs of A started between B's first and last
// start. It gives up waiting at limit (the delay is then limit or more).
func fairnessRun(t *testing.T, c *redis.Client, name string, l streamq.FlowLimits, backlog int, limit time.Duration) (time.Duration, int) {
	t.Helper()
	prefix := "t-" + redistest.Name(t)
	q, err := streamq.NewQueue(c, name, &streamq.QueueConfig{KeyPrefix: prefix, MaxLen: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.SetFlowLimits(ctx, l); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]streamq.Job, backlog)
	for i := range jobs {
		jobs[i].Payload = []byte("A/" + strconv.Itoa(i))
	}
	for i := 0; i < backlog; i += 10_000 {
		if _, err := p.EnqueueBatch(ctx, jobs[i:min(i+10_000, backlog)], streamq.FlowKey("A")); err != nil {
			t.Fatal(err)
		}
	}
	const bJobs = 20
	var mu sync.Mutex
	var order []string
	firstB := make(chan time.Time, 1)
	allB := make(chan struct{})
	h := func(ctx context.Context, m *streamq.Message) error {
		k := keyOf(m.Payload)
		mu.Lock()
		order = append(order, k)
		nb := 0
		for _, o := range order {
			if o == "B" {
				nb++
			}
		}
		mu.Unlock()
		if k == "B" && nb == 1 {
			firstB <- time.Now()
		}
		if k == "B" && nb == bJobs {
			close(allB)
		}
		time.Sleep(time.Millisecond)
		return nil
	}
	cons, err := streamq.NewConsumer(q, streamq.HandlerFunc(h), &streamq.ConsumerConfig{Concurrency: 16, Block: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "Consumer.Run", 15*time.Second, cons.Run)
	defer func() { _ = r.Stop() }()
	enqB := time.Now()
	for i := range bJobs {
		if _, err := p.Enqueue(ctx, []byte("B/"+strconv.Itoa(i)), streamq.FlowKey("B")); err != nil {
			t.Fatal(err)
		}
	}
	var delay time.Duration
	select {
	case at := <-firstB:
		delay = at.Sub(enqB)
	case <-time.After(limit):
		return limit, -1
	}
	select {
	case <-allB:
	case <-time.After(limit):
		t.Fatalf("%s: the last jobs of B did not start within %s", name, limit)
	}
	mu.Lock()
	defer mu.Unlock()
	first, last := -1, 0
	for i, o := range order {
		if o == "B" {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	aBetween := 0
	for _, o := range order[first:last] {
		if o == "A" {
			aBetween++
		}
	}
	return delay, aBetween
}

// TestFlow_Fairness: key A enqueues 50,000 jobs, then key B 20. Without
// flow control B's first job waits for all of A's; with a global cap (at
// the consumer's concurrency) A's backlog waits aside and the waiting keys
// start round robin, so B's first job starts once the backlog ahead of it
// was set aside, and B's jobs alternate with A's.
func TestFlow_Fairness(t *testing.T) {
	t.Parallel()
	c := redistest.NewIsolatedClient(t) // 100,000 jobs
	const backlog = 50_000
	without, _ := fairnessRun(t, c, "plain", streamq.FlowLimits{}, backlog, 60*time.Second)
	with, aBetween := fairnessRun(t, c, "fair", streamq.FlowLimits{Global: 16}, backlog, 60*time.Second)
	t.Logf("B's first start after its enqueue: %s without flow control, %s with a global cap (round robin); %d jobs of A started among B's 20",
		without.Round(time.Millisecond), with.Round(time.Millisecond), aBetween)
	if with > without/4 {
		t.Errorf("B waited %s with flow control, %s without: want at most a quarter", with, without)
	}
	// Round robin between the two waiting keys: one of A per job of B, plus
	// the slots A held when B's first job started.
	if aBetween > 20+16 {
		t.Errorf("%d jobs of A started among B's 20: not round robin", aBetween)
	}
}

// TestFlow_RateLimitAcrossConsumers: two consumers share one key's rate of
// 20 jobs per second (burst 20): in every window the starts stay within the
// token bucket's bound, and the 60 jobs take at least (60-20)/20 s.
func TestFlow_RateLimitAcrossConsumers(t *testing.T) {
	t.Parallel()
	_, q, p, _ := ctlSetup(t)
	ctx := context.Background()
	const rate, jobs = 20.0, 60
	if err := q.SetFlowLimits(ctx, streamq.FlowLimits{Rate: rate}); err != nil {
		t.Fatal(err)
	}
	flowJobs(t, p, jobs, "a")
	var mu sync.Mutex
	var starts []time.Time
	h := func(ctx context.Context, m *streamq.Message) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil
	}
	begin := time.Now()
	for i := range 2 {
		ctlConsumer(t, q, h, streamq.ConsumerConfig{Name: fmt.Sprint("c", i), Concurrency: 8})
	}
	redistest.WaitFor(t, 30*time.Second, "every job started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(starts) == jobs
	})
	took := time.Since(begin)
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	// Token bucket: at most burst + rate × span starts in any span (one more
	// for the clocks of this process and of Redis).
	for i := range starts {
		for j := i; j < len(starts); j++ {
			span := starts[j].Sub(starts[i]).Seconds()
			if n := float64(j - i + 1); n > rate+rate*span+1 {
				t.Fatalf("%d jobs started within %.3f s: over the rate of %g/s (burst %g)", j-i+1, span, rate, rate)
			}
		}
	}
	if min := time.Duration((jobs - rate) / rate * float64(time.Second)); took < min*9/10 {
		t.Errorf("%d jobs took %s, want at least %s at %g/s", jobs, took, min, rate)
	}
	t.Logf("%d jobs at %g/s across two consumers took %s", jobs, rate, took.Round(time.Millisecond))
}
