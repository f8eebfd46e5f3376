package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
)

// Deployment tests: Sentinel failovers, Cluster master kills and slot
// migrations, under a backlog and a steady producer, each on a topology of
// its own that the test starts and stops.

// Traffic settings of the deployment tests.
const (
	deployBacklog  = 3000                    // jobs enqueued before the fault
	deployEvery    = 5 * time.Millisecond    // the steady producer's pace
	deployDuration = 6 * time.Second         // how long the steady producer runs
	deployFaultAt  = 1500 * time.Millisecond // when the fault happens
	deploySettle   = 25 * time.Second        // bound on handling what was acknowledged
	// deployCallTimeout bounds one Enqueue: longer than the default
	// ProducerConfig.ReplicaRetry, so that the producer's own bound shows.
	deployCallTimeout = streamq.DefaultReplicaRetry + 15*time.Second
)

// traffic runs a backlog, a steady producer and a consumer on a queue and
// counts what happened to every job.
type traffic struct {
	t        *testing.T
	q        *streamq.Queue
	p        *streamq.Producer
	mu       sync.Mutex
	acked    map[string]bool // payloads whose Enqueue returned nil
	handled  map[string]int  // payloads by handler runs
	failed   int             // Enqueue calls that returned an error
	errs     []string        // the first of those errors
	okAt     []time.Time     // when each successful Enqueue returned
	handleAt []time.Time     // when each handler ran
	opts     []streamq.EnqueueOption
	logs     relLogs // the consumer's logs
}

func newTraffic(t *testing.T, q *streamq.Queue, pcfg *streamq.ProducerConfig) *traffic {
	t.Helper()
	p, err := streamq.NewProducer(q, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	return &traffic{t: t, q: q, p: p, acked: map[string]bool{}, handled: map[string]int{}}
}

func (tr *traffic) handle(_ context.Context, m *streamq.Message) error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.handled[string(m.Payload)]++
	tr.handleAt = append(tr.handleAt, time.Now())
	return nil
}

func (tr *traffic) enqueued(payload string, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if err != nil {
		tr.failed++
		if len(tr.errs) < 5 {
			tr.errs = append(tr.errs, err.Error())
		}
		return
	}
	tr.acked[payload] = true
	tr.okAt = append(tr.okAt, time.Now())
}

// run enqueues the backlog, starts a consumer and the steady producer,
// calls fault at deployFaultAt, and returns once the producer stopped and
// every acknowledged job was handled or deploySettle passed. It returns
// when the fault happened.
func (tr *traffic) run(fault func()) time.Time {
	t := tr.t
	ctx := context.Background()
	jobs := make([]streamq.Job, deployBacklog)
	for i := range jobs {
		jobs[i].Payload = fmt.Appendf(nil, "b-%d", i)
	}
	ids, err := tr.p.EnqueueBatch(ctx, jobs)
	for i, id := range ids {
		if id != "" {
			tr.enqueued(string(jobs[i].Payload), nil)
		}
	}
	if err != nil {
		t.Fatalf("backlog: %v", err)
	}
	c := relConsumer(t, tr.q, tr.handle, streamq.ConsumerConfig{Concurrency: 16, MinIdle: time.Second, ReclaimInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&tr.logs, nil))})
	cr := relRun(t, c)
	defer cr.stop()

	start := time.Now()
	prod := redistest.Background(t, "steady producer", deployDuration+time.Minute, func(ctx context.Context) error {
		tick := time.NewTicker(deployEvery)
		defer tick.Stop()
		for i := 0; time.Since(start) < deployDuration; i++ {
			payload := fmt.Sprintf("s-%d", i)
			cctx, cancel := context.WithTimeout(ctx, deployCallTimeout)
			_, err := tr.p.Enqueue(cctx, []byte(payload), tr.opts...)
			cancel()
			tr.enqueued(payload, err)
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		return nil
	})
	timer := time.NewTimer(deployFaultAt)
	<-timer.C
	faultAt := time.Now()
	fault()
	select {
	case <-prod.Done():
	case <-time.After(deployDuration + time.Minute):
		t.Fatal("the steady producer did not stop")
	}
	if err := prod.Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(deploySettle)
	for time.Now().Before(deadline) && len(tr.lost()) > 0 {
		wait := time.NewTimer(50 * time.Millisecond)
		<-wait.C
	}
	return faultAt
}

// lost returns the acknowledged payloads that were not handled (yet).
func (tr *traffic) lost() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for p := range tr.acked {
		if tr.handled[p] == 0 {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// outcome is what a fault did to the traffic.
type outcome struct {
	acked, failed int      // Enqueue calls that returned nil, and an error
	errs          []string // the first errors
	lost          []string // acknowledged payloads never handled
	doubled       int      // payloads handled more than once
	enqueueStall  time.Duration
	handleStall   time.Duration
}

// String is the outcome in one line, as docs/deployment.md quotes it.
func (o outcome) String() string {
	return fmt.Sprintf("acknowledged %d, lost %d, run again %d, failed calls %d (e.g. %q), enqueue stalled %s, handling stalled %s",
		o.acked, len(o.lost), o.doubled, o.failed, o.errs, o.enqueueStall, o.handleStall)
}

// report logs the counts and returns them.
func (tr *traffic) report(faultAt time.Time) outcome {
	lost := tr.lost()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	o := outcome{acked: len(tr.acked), failed: tr.failed, errs: tr.errs, lost: lost,
		enqueueStall: gapAfter(tr.okAt, faultAt), handleStall: gapAfter(tr.handleAt, faultAt)}
	for _, n := range tr.handled {
		if n > 1 {
			o.doubled++
		}
	}
	tr.t.Logf("%s: %s", tr.t.Name(), o)
	return o
}

// gapAfter returns the longest time without an event from just before t
// until the end: how long the fault at t stopped the queue.
func gapAfter(at []time.Time, t time.Time) time.Duration {
	at = slices.Clone(at)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	prev := t
	for _, a := range at {
		if a.Before(t) {
			prev = a
			continue
		}
		gap = max(gap, a.Sub(prev))
		prev = a
	}
	return gap.Round(time.Millisecond)
}

// TestSentinel_FailoverMidRun runs a backlog and a steady producer through
// a planned SENTINEL FAILOVER and prints what it cost (the figures of
// docs/deployment.md, "Failover"):
//
//	go test ./integration -run TestSentinel_FailoverMidRun -v -count 1 | grep outcome
//
// With ProducerConfig.MinReplicas (and the default ReplicaRetry) no
// acknowledged job is lost and no Enqueue fails: the enqueues that the new
// master cannot replicate until the old one resynced wait and succeed.
// Without it, the old master takes writes for seconds after the replica
// was promoted, and loses them when it becomes a replica: the default
// configuration can lose jobs, and the consumer says so when it starts.
func TestSentinel_FailoverMidRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		replicated bool // the producer sets MinReplicas 1
		// stale makes the producer write through a client of the first
		// master's address, like a client that has not heard of the
		// switch (a plain client, a proxy, a failover client whose
		// sentinel connection was down).
		stale bool
	}{
		{name: "MinReplicas=true", replicated: true},
		{name: "MinReplicas=false"},
		{name: "MinReplicas=false,stale-client", stale: true},
		{name: "MinReplicas=true,stale-client", replicated: true, stale: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.StartSentinel(t, redistest.SentinelOptions{})
			rdb := redis.NewFailoverClient(s.FailoverOptions())
			t.Cleanup(func() { _ = rdb.Close() })
			name := redistest.Name(t)
			q, err := streamq.NewQueue(rdb, name, nil)
			if err != nil {
				t.Fatal(err)
			}
			var pcfg *streamq.ProducerConfig
			if tc.replicated {
				pcfg = &streamq.ProducerConfig{MinReplicas: 1}
			}
			pq := q
			if tc.stale {
				old := redis.NewClient(&redis.Options{Addr: s.Servers()[0].Addr()})
				t.Cleanup(func() { _ = old.Close() })
				if pq, err = streamq.NewQueue(old, name, nil); err != nil {
					t.Fatal(err)
				}
			}
			tr := newTraffic(t, q, pcfg)
			if tr.p, err = streamq.NewProducer(pq, pcfg); err != nil {
				t.Fatal(err)
			}
			faultAt := tr.run(func() {
				ctx, cancel := context.WithTimeout(context.Background(), redistest.TopologyTimeout)
				defer cancel()
				if _, err := s.Failover(ctx); err != nil {
					t.Errorf("failover: %v", err)
				}
			})
			o := tr.report(faultAt)
			fmt.Printf("outcome %s: %s\n", t.Name(), o)
			warned := strings.Contains(tr.logs.String(), failoverWarning)
			switch {
			case tc.replicated && (len(o.lost) > 0 || o.failed > 0 && !tc.stale):
				// A stale client cannot reach the new master: its calls
				// fail (ErrNotReplicated, READONLY), they do not lose jobs.
				t.Fatalf("with MinReplicas, %d Enqueue calls failed (%q) and %d jobs whose Enqueue returned nil were never handled: %v",
					o.failed, o.errs, len(o.lost), head(o.lost))
			case !warned:
				t.Fatalf("the consumer did not warn that a failover can lose jobs; its logs:\n%s", tr.logs.String())
			}
		})
	}
}

// startClusterQueue starts a cluster and returns a cluster client with
// go-redis's default options (streamq must recover with them) and a queue.
func startClusterQueue(t *testing.T) (*redistest.Cluster, *redis.ClusterClient, *streamq.Queue) {
	t.Helper()
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	q, err := streamq.NewQueue(rdb, redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, rdb, q
}

// TestCluster_MasterKilledMidRun kills -9 the master that serves the
// queue's slot while a backlog is handled and a producer runs: its replica
// takes over, streamq's clients find it at once (the slot map is reloaded
// on the first refused connection), and no acknowledged job is lost.
func TestCluster_MasterKilledMidRun(t *testing.T) {
	t.Parallel()
	c, _, q := startClusterQueue(t)
	ctx := context.Background()
	master, err := c.MasterOfKey(ctx, core.Of(q).Keys.Stream)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTraffic(t, q, nil)
	faultAt := tr.run(func() { c.Kill(master) })
	if lost := tr.report(faultAt).lost; len(lost) > 0 {
		t.Fatalf("%d acknowledged jobs were never handled after the master was killed: %v", len(lost), head(lost))
	}
	tr.mu.Lock()
	stop := gapAfter(tr.okAt, faultAt)
	tr.mu.Unlock()
	fmt.Printf("TestCluster_MasterKilledMidRun: enqueue stopped for %s after kill -9 of the queue's master\n", stop)
}

// TestCluster_SlotMigratedMidRun moves the queue's slot to another master
// (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) while jobs,
// delayed jobs among them, are enqueued and handled: no Enqueue fails and no
// job is lost.
func TestCluster_SlotMigratedMidRun(t *testing.T) {
	t.Parallel()
	c, _, q := startClusterQueue(t)
	ctx := context.Background()
	slot, to := migrationTarget(t, c, q)
	tr := newTraffic(t, q, nil)
	tr.opts = []streamq.EnqueueOption{streamq.ProcessIn(20 * time.Millisecond)}
	faultAt := tr.run(func() { migrateSlowly(t, c, slot, to) })
	lost := tr.report(faultAt).lost
	tr.mu.Lock()
	failed, errs := tr.failed, tr.errs
	tr.mu.Unlock()
	if failed > 0 || len(lost) > 0 {
		t.Fatalf("during the migration of slot %d, %d Enqueue calls failed (%q) and %d acknowledged jobs were lost: %v", slot, failed, errs, len(lost), head(lost))
	}
	if now, err := c.MasterOfSlot(ctx, slot); err != nil || now.ID != to.ID {
		t.Fatalf("slot %d is served by %v (%v), want %s", slot, now, err, to.Addr())
	}
}

// migrationTarget returns the slot of q's keys and a master other than
// the one serving it, to move the slot to; it fails the test if there is
// none.
func migrationTarget(t *testing.T, c *redistest.Cluster, q *streamq.Queue) (int, *redistest.ClusterNode) {
	t.Helper()
	ctx := context.Background()
	slot, err := c.KeySlot(ctx, core.Of(q).Keys.Stream)
	if err != nil {
		t.Fatal(err)
	}
	from, err := c.MasterOfSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if n.ID != from.ID && isMaster(ctx, n) {
			return slot, n
		}
	}
	t.Fatalf("no other master than %s to move slot %d to", from.Addr(), slot)
	return 0, nil
}

func isMaster(ctx context.Context, n *redistest.ClusterNode) bool {
	rdb := redis.NewClient(&redis.Options{Addr: n.Addr()})
	defer rdb.Close()
	role, err := rdb.Do(ctx, "ROLE").Slice()
	return err == nil && len(role) > 0 && role[0] == "master"
}

// TestTLS_RedissURL runs a producer and a consumer on a TLS-only server
// reached with a rediss:// URL.
func TestTLS_RedissURL(t *testing.T) {
	t.Parallel()
	s := redistest.StartTLSServer(t)
	opts, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	if opts.TLSConfig == nil {
		t.Fatalf("redis.ParseURL(%q) gave no TLS configuration", s.URL())
	}
	opts.TLSConfig.RootCAs = s.TLSConfig().RootCAs // the test's throwaway CA
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	q, err := streamq.NewQueue(rdb, "tls", nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTraffic(t, q, &streamq.ProducerConfig{})
	for i := range 100 {
		_, err := tr.p.Enqueue(context.Background(), fmt.Appendf(nil, "j-%d", i))
		tr.enqueued(fmt.Sprintf("j-%d", i), err)
	}
	if tr.failed > 0 {
		t.Fatalf("Enqueue over TLS: %q", tr.errs)
	}
	cr := relRun(t, relConsumer(t, q, tr.handle, streamq.ConsumerConfig{}))
	defer cr.stop()
	redistest.WaitFor(t, relWait, "100 jobs handled over TLS", func() bool { return len(tr.lost()) == 0 })
}

// BenchmarkProducer_Replicated measures what ProducerConfig.MinReplicas
// costs: Enqueue and EnqueueBatch of 100 jobs on a master with one replica,
// without and with waiting for it.
//
//	go test ./integration -run '^$' -bench Replicated -benchtime 3s
func BenchmarkProducer_Replicated(b *testing.B) {
	master := redistest.StartServer(b)
	redistest.StartReplica(b, master)
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	b.Cleanup(func() { _ = rdb.Close() })
	payload := make([]byte, 128)
	for _, n := range []int{0, 1} {
		for _, batch := range []int{1, 100} {
			b.Run(fmt.Sprintf("MinReplicas=%d/batch=%d", n, batch), func(b *testing.B) {
				q, err := streamq.NewQueue(rdb, fmt.Sprintf("bench-%d-%d", n, batch), &streamq.QueueConfig{MaxLen: -1})
				if err != nil {
					b.Fatal(err)
				}
				p, err := streamq.NewProducer(q, &streamq.ProducerConfig{MinReplicas: n})
				if err != nil {
					b.Fatal(err)
				}
				jobs := make([]streamq.Job, batch)
				for i := range jobs {
					jobs[i].Payload = payload
				}
				ctx := context.Background()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := p.EnqueueBatch(ctx, jobs); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
			})
		}
	}
}

// TestCluster_SettleWaitsOutMigration holds the queue's slot in migration
// (MIGRATING on its master, IMPORTING on the other, no key moved yet) for
// longer than one settling call may take, while a job finishes, one fails
// to be retried and one fails for good. While the slot migrates, Redis
// answers TRYAGAIN to every script whose keys are not all there (a memo
// hash never is): the settles must wait the migration out, keeping their
// claims, and land once it ends, not leave the jobs to the reaper, which
// would take them over only MinIdle later and run them again.
func TestCluster_SettleWaitsOutMigration(t *testing.T) {
	t.Parallel()
	c, _, q := startClusterQueue(t)
	ctx := context.Background()
	slot, to := migrationTarget(t, c, q)
	var (
		mu      sync.Mutex
		tries   = map[string]int{}
		started = make(chan struct{}, 3)
		release = make(chan struct{})
	)
	handle := func(_ context.Context, m *streamq.Message) error {
		p := string(m.Payload)
		mu.Lock()
		tries[p]++
		n := tries[p]
		mu.Unlock()
		if n == 1 {
			started <- struct{}{}
			<-release
		}
		switch {
		case p == "retry" && n == 1:
			return streamq.RetryAfter(10*time.Millisecond, errors.New("first try fails"))
		case p == "dead":
			return streamq.Permanent(errors.New("always fails"))
		}
		return nil
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, payload := range []string{"ok", "retry", "dead"} {
		if _, err := p.Enqueue(ctx, []byte(payload)); err != nil {
			t.Fatal(err)
		}
	}
	// The default MinIdle (30s): a settle left to the reaper shows.
	cr := relRun(t, relConsumer(t, q, handle, streamq.ConsumerConfig{Concurrency: 3}))
	defer cr.stop()
	for range 3 {
		select {
		case <-started:
		case <-time.After(relWait):
			t.Fatal("the three handlers did not start")
		}
	}
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	m, err := c.BeginMigration(mctx, slot, to)
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	// The fault: the slot stays in migration for 7s, longer than one
	// settling call's 5s timeout.
	hold := time.NewTimer(7 * time.Second)
	<-hold.C
	for range 1000 { // a queue has a few dozen keys
		n, err := m.MoveKeys(mctx, 10)
		if err != nil {
			t.Fatalf("move keys: %v", err)
		}
		if n == 0 {
			break
		}
	}
	if err := m.Finish(mctx); err != nil {
		t.Fatal(err)
	}
	// Well within MinIdle: only settles that waited the migration out
	// make it.
	var s streamq.QueueStats
	redistest.WaitFor(t, 15*time.Second, "every job settled after the migration", func() bool {
		s, err = q.Stats(ctx)
		mu.Lock()
		defer mu.Unlock()
		return err == nil && s.Pending == 0 && s.Lag == 0 && s.Delayed == 0 && s.DeadLetters == 1 && tries["retry"] == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if tries["ok"] != 1 || tries["dead"] != 1 || tries["retry"] != 2 {
		t.Fatalf("handler runs %v, want ok and dead once, retry twice", tries)
	}
}

// TestCluster_FlowCapsHoldThroughMigration moves the slot of a queue under
// flow control (2 running jobs per flow key, 6 in all) to another master
// while a consumer runs its backlog, some jobs failing once. Every job is
// handled exactly once, no cap is ever exceeded (counted in the handler),
// and nothing is left running, waiting aside or pending. (The flow scripts
// touch keys they derive, and refuse to run while the slot migrates; the
// mechanism itself is proved in internal/rdb,
// TestCluster_DerivedKeysDuringMigration: this test passed without it too,
// in three runs.)
func TestCluster_FlowCapsHoldThroughMigration(t *testing.T) {
	t.Parallel()
	const (
		jobs, keys     = 1200, 6 // 10 ms each, 6 at a time: 2 s of work at least
		perKey, global = 2, 6
	)
	c, _, q := startClusterQueue(t)
	ctx := context.Background()
	if err := q.SetFlowLimits(ctx, streamq.FlowLimits{PerKey: perKey, Global: global}); err != nil {
		t.Fatal(err)
	}
	slot, to := migrationTarget(t, c, q)
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu                sync.Mutex
		tries, handled    = map[string]int{}, map[string]int{}
		running           = map[string]int{}
		inAll, most, over int
	)
	handle := func(_ context.Context, m *streamq.Message) error {
		payload := string(m.Payload)
		key, _, _ := strings.Cut(payload, "/")
		mu.Lock()
		tries[payload]++
		try := tries[payload]
		running[key]++
		inAll++
		most = max(most, inAll)
		if running[key] > perKey || inAll > global {
			over++
		}
		mu.Unlock()
		work := time.NewTimer(10 * time.Millisecond) // the job's work
		<-work.C
		mu.Lock()
		defer mu.Unlock()
		running[key]--
		inAll--
		if strings.HasSuffix(payload, "/retry") && try == 1 {
			return streamq.RetryAfter(10*time.Millisecond, errors.New("first try fails"))
		}
		handled[payload]++
		return nil
	}
	var want []string
	for k := range keys {
		var payloads []string
		for n := range jobs / keys {
			s := fmt.Sprintf("k%d/%d", k, n)
			if n%10 == 0 {
				s += "/retry"
			}
			payloads = append(payloads, s)
		}
		enqueueAll(t, p, payloads, streamq.FlowKey(fmt.Sprintf("k%d", k)))
		want = append(want, payloads...)
	}
	cr := relRun(t, relConsumer(t, q, handle, streamq.ConsumerConfig{Concurrency: 16}))
	defer cr.stop()
	redistest.WaitFor(t, relWait, "the consumer to start on the backlog", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) > 0
	})
	mu.Lock()
	before := len(handled)
	mu.Unlock()
	if moved := migrateSlowly(t, c, slot, to); moved < 0 {
		t.Fatal("the migration did not finish")
	}
	mu.Lock()
	during := len(handled) - before
	mu.Unlock()
	var s streamq.QueueStats
	redistest.WaitFor(t, deploySettle, "every job handled and settled after the migration", func() bool {
		s, err = q.Stats(ctx)
		mu.Lock()
		defer mu.Unlock()
		return err == nil && len(handled) == len(want) && s.Pending == 0 && s.Lag == 0 && s.Delayed == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for _, w := range want {
		if handled[w] != 1 {
			t.Errorf("%s handled %d times", w, handled[w])
		}
	}
	if over > 0 {
		t.Errorf("a flow cap was exceeded %d times (most running at once: %d, cap %d)", over, most, global)
	}
	if most < global/2 {
		t.Errorf("at most %d jobs ran at once: the caps (%d per key, %d in all) never bound", most, perKey, global)
	}
	if s.DeadLetters != 0 {
		t.Errorf("%d jobs were dead-lettered", s.DeadLetters)
	}
	if left := len(want) - before - during; left == 0 {
		t.Errorf("every job was handled before the migration ended (%d before it began): nothing ran across it", before)
	}
	fmt.Printf("TestCluster_FlowCapsHoldThroughMigration: %d jobs under flow control, each handled once; %d before the move of slot %d, %d during it, the rest after; at most %d ran at once\n",
		len(want), before, slot, during, most)
}
