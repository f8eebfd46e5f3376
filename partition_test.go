package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/faultproxy"
	"github.com/streamq/streamq/internal/redistest"
)

// partSetup returns a partitioned queue of n partitions under the test's
// own key prefix, with cfg's other settings.
func partSetup(t testing.TB, c redis.UniversalClient, n int, cfg *streamq.PartitionedQueueConfig) *streamq.PartitionedQueue {
	t.Helper()
	prefix := "t-" + redistest.Name(t)
	redistest.DeleteKeysAtCleanup(t, c, prefix+":*")
	var pc streamq.PartitionedQueueConfig
	if cfg != nil {
		pc = *cfg
	}
	qc := streamq.QueueConfig{KeyPrefix: prefix}
	if pc.Queue != nil {
		qc = *pc.Queue
		qc.KeyPrefix = prefix
	}
	pc.Queue = &qc
	pq, err := streamq.NewPartitionedQueue(c, "orders", &pc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := pq.SetPartitions(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := pq.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	return pq
}

// seen records handled jobs by payload, and the order of each key.
type seen struct {
	mu     sync.Mutex
	count  map[string]int
	byKey  map[string][]int
	queue  map[string]string // key -> partition queue that ran it
	total  int
	want   int
	enough chan struct{}
	bad    []string
}

func newSeen(want int) *seen {
	return &seen{count: map[string]int{}, byKey: map[string][]int{}, queue: map[string]string{}, want: want, enough: make(chan struct{})}
}

// add records a payload "<key>/<seq>".
func (s *seen) add(m *streamq.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := string(m.Payload)
	s.count[p]++
	if s.count[p] > 1 {
		s.bad = append(s.bad, "twice: "+p)
	}
	if key, seq, ok := strings.Cut(p, "/"); ok {
		n, _ := strconv.Atoi(seq)
		s.byKey[key] = append(s.byKey[key], n)
		if q, ok := s.queue[key]; ok && q != m.Queue {
			s.bad = append(s.bad, fmt.Sprintf("key %s ran in %s and %s", key, q, m.Queue))
		}
		s.queue[key] = m.Queue
	}
	s.total++
	if s.total == s.want {
		close(s.enough)
	}
}

func (s *seen) wait(t *testing.T) {
	t.Helper()
	select {
	case <-s.enough:
	case <-time.After(workerWait):
		s.mu.Lock()
		defer s.mu.Unlock()
		t.Fatalf("handled %d jobs of %d", s.total, s.want)
	}
}

// check fails the test on a duplicate, a key in two partitions, or a key
// out of order.
func (s *seen) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) > 0 {
		t.Fatalf("%d problems, first: %s", len(s.bad), s.bad[0])
	}
	for k, seqs := range s.byKey {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				t.Fatalf("key %s ran out of order: %v", k, seqs)
			}
		}
	}
}

// runWorker runs a partitioned worker of h until the test ends.
func runWorker(t *testing.T, pq *streamq.PartitionedQueue, h streamq.HandlerFunc, cfg *streamq.PartitionedWorkerConfig) *streamq.PartitionedWorker {
	t.Helper()
	w, err := streamq.NewPartitionedWorker(pq, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return w
}

// keyedJobs returns keys*per jobs "k<i>/<seq>" in order of seq.
func keyedJobs(keys, per int) []streamq.KeyedJob {
	var jobs []streamq.KeyedJob
	for s := range per {
		for k := range keys {
			key := "k" + strconv.Itoa(k)
			jobs = append(jobs, streamq.KeyedJob{Key: key, Job: streamq.Job{Payload: []byte(key + "/" + strconv.Itoa(s))}})
		}
	}
	return jobs
}

func TestPartitionedProducer_Routing(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	pq := partSetup(t, c, 4, nil)
	ctx := context.Background()
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnqueueKeyed(ctx, keyedJobs(100, 3)); err != nil {
		t.Fatal(err)
	}
	jobs := make([]streamq.Job, 400)
	for i := range jobs {
		jobs[i].Payload = []byte("free-" + strconv.Itoa(i))
	}
	if _, err := p.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := p.Enqueue(ctx, []byte("one-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	keyed := make([]int64, 4)
	for k := range 100 {
		keyed[streamq.PartitionOf("k"+strconv.Itoa(k), 4)] += 3
	}
	for k := range 4 {
		q, _ := pq.Partition(k)
		n, err := c.XLen(ctx, streamq.StreamKeyOf(q)).Result()
		if err != nil {
			t.Fatal(err)
		}
		// 400 keyless batch jobs spread in runs of 100, 40 single ones
		// round robin: 110 per partition, besides the keyed ones.
		if n-keyed[k] != 110 {
			t.Errorf("partition %d holds %d jobs, %d of them keyed: want 110 keyless", k, n, keyed[k])
		}
	}
	s, err := pq.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Lag != 740 {
		t.Fatalf("Stats().Lag = %d, want 740", s.Lag)
	}
}

func TestPartitionedWorker_Run(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	pq := partSetup(t, c, 4, nil)
	ctx := context.Background()
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	jobs := keyedJobs(50, 4)
	s := newSeen(len(jobs) + 2)
	failed := map[string]bool{}
	var mu sync.Mutex
	runWorker(t, pq, func(_ context.Context, m *streamq.Message) error {
		if string(m.Payload) == "fail-once" {
			mu.Lock()
			first := !failed["x"]
			failed["x"] = true
			mu.Unlock()
			if first {
				return streamq.RetryAfter(time.Millisecond, errors.New("first try fails"))
			}
		}
		s.add(m)
		return nil
	}, &streamq.PartitionedWorkerConfig{Concurrency: 8, Consumer: &streamq.ConsumerConfig{Concurrency: 1, SchedulerInterval: 20 * time.Millisecond}})
	if _, err := p.EnqueueKeyed(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, []byte("later"), streamq.ProcessIn(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, []byte("fail-once"), streamq.PartitionKey("k7")); err != nil {
		t.Fatal(err)
	}
	s.wait(t)
	s.check(t)
}

func TestPartitionedProducer_Unique(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	pq := partSetup(t, c, 8, nil)
	ctx := context.Background()
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		key := "invoice:" + strconv.Itoa(i)
		id, err := p.Enqueue(ctx, []byte("a"), streamq.Unique(key, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		// Many producers, one key: every one routes to the same partition.
		p2, _ := streamq.NewPartitionedProducer(pq, nil)
		id2, err := p2.Enqueue(ctx, []byte("b"), streamq.Unique(key, time.Minute))
		if !errors.Is(err, streamq.ErrDuplicate) || id2 != id {
			t.Fatalf("second enqueue of %s: %q, %v; want %q, ErrDuplicate", key, id2, err, id)
		}
	}
}

func TestPartitionedQueue_Resize(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	pq := partSetup(t, c, 4, &streamq.PartitionedQueueConfig{Refresh: 20 * time.Millisecond, DrainGrace: 100 * time.Millisecond})
	ctx := context.Background()
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := keyedJobs(40, 5)
	if _, err := p.EnqueueKeyed(ctx, first); err != nil {
		t.Fatal(err)
	}
	// Shrink to 2 before any worker ran: partitions 2 and 3 hold jobs.
	l, err := pq.SetPartitions(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if l.N != 2 || l.Draining != 4 || l.Read() != 4 {
		t.Fatalf("layout after shrinking: %+v", l)
	}
	if _, err := pq.FinishDrain(ctx); !errors.Is(err, streamq.ErrDraining) {
		t.Fatalf("FinishDrain with jobs in dropped partitions: %v, want ErrDraining", err)
	}
	second := make([]streamq.Job, 100)
	for i := range second {
		second[i].Payload = []byte("after-" + strconv.Itoa(i))
	}
	s := newSeen(len(first) + len(second))
	// One job at a time per partition: jobs of a key run in their order.
	w := runWorker(t, pq, func(_ context.Context, m *streamq.Message) error {
		s.add(m)
		return nil
	}, &streamq.PartitionedWorkerConfig{Consumer: &streamq.ConsumerConfig{Concurrency: 1}})
	// Grow to 8 while the worker runs; it follows.
	if _, err := pq.SetPartitions(ctx, 8); err != nil {
		t.Fatal(err)
	}
	for i := 0; w.Partitions() != 8; i++ {
		if i > 1000 {
			t.Fatalf("worker reads %d partitions, want 8", w.Partitions())
		}
		time.Sleep(10 * time.Millisecond) // bounded wait for the worker's refresh
	}
	if _, err := p.EnqueueBatch(ctx, second); err != nil {
		t.Fatal(err)
	}
	s.wait(t)
	s.check(t)
	if _, err := pq.SetPartitions(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var fin streamq.PartitionLayout
	for i := 0; ; i++ {
		fin, err = pq.FinishDrain(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, streamq.ErrDraining) || i > 500 {
			t.Fatalf("FinishDrain: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fin.N != 3 || fin.Draining != 0 {
		t.Fatalf("layout after FinishDrain: %+v", fin)
	}
}

func TestPartitionedQueue_SetFlowLimits(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	pq := partSetup(t, c, 3, nil)
	ctx := context.Background()
	if err := pq.SetFlowLimits(ctx, streamq.FlowLimits{Global: 2}); err == nil {
		t.Fatal("SetFlowLimits with a global cap below the partitions: no error")
	}
	if err := pq.SetFlowLimits(ctx, streamq.FlowLimits{Global: 10, PerKey: 1}); err != nil {
		t.Fatal(err)
	}
	sum := 0
	for k := range 3 {
		q, _ := pq.Partition(k)
		l, err := q.FlowLimits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.PerKey != 1 || l.Global < 3 || l.Global > 4 {
			t.Fatalf("partition %d: limits %+v, want PerKey 1 and Global 3 or 4", k, l)
		}
		sum += l.Global
	}
	if sum != 10 {
		t.Fatalf("global caps sum to %d, want 10", sum)
	}
}

// TestPartitionedQueue_JobIDs checks that the IDs of a partitioned queue
// name their partitions, so that a cancel by such an ID talks to that
// partition alone, while a bare ID (from before) is still found by asking
// the partitions in turn; and that every dedup key routes to one
// partition, so that a duplicate is found whichever producer sends it.
func TestPartitionedQueue_JobIDs(t *testing.T) {
	t.Parallel()
	tags, pq, p := taggedProducer(t, 8)
	ctx := context.Background()
	var ids []string
	for i := range 16 {
		id, err := p.Enqueue(ctx, []byte("later-"+strconv.Itoa(i)), streamq.ProcessIn(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	parts := map[string]bool{}
	for _, id := range ids {
		num, bare, ok := strings.Cut(id, "~")
		if !ok || !strings.HasPrefix(num, "p") || strings.Contains(bare, "~") {
			t.Fatalf("Enqueue returned %q, want p<partition>~<ID>", id)
		}
		parts[num] = true
	}
	if len(parts) != 8 {
		t.Fatalf("16 keyless jobs went to partitions %v, want all 8", parts)
	}
	// A cancel by an ID that names its partition talks to it alone.
	for _, id := range ids[:8] {
		k, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(id, "~", 2)[0], "p"))
		q, _ := pq.Partition(k)
		tags.Start()
		ok, err := pq.Cancel(ctx, id)
		got, cmds := tags.Stop()
		if err != nil || !ok {
			t.Fatalf("Cancel(%s) = %v, %v; want true", id, ok, err)
		}
		if want := "{" + q.Name() + "}"; len(got) != 1 || got[0] != want {
			t.Fatalf("Cancel(%s) sent %d commands naming %v, want only %s", id, cmds, got, want)
		}
	}
	// A bare ID is found too, by asking the partitions in turn.
	for _, id := range ids[8:] {
		_, bare, _ := strings.Cut(id, "~")
		if ok, err := pq.Cancel(ctx, bare); err != nil || !ok {
			t.Fatalf("Cancel(%s) of a bare ID = %v, %v; want true", bare, ok, err)
		}
	}
	if s, err := pq.Stats(ctx); err != nil || s.Delayed != 0 {
		t.Fatalf("after cancelling every job: %d delayed (%v), want 0", s.Delayed, err)
	}
	// A chosen ID stays as chosen and routes by its hash.
	id, err := p.Enqueue(ctx, []byte("chosen"), streamq.WithJobID("invoice-42"), streamq.ProcessIn(time.Hour))
	if err != nil || id != "invoice-42" {
		t.Fatalf("Enqueue WithJobID = %q, %v; want invoice-42", id, err)
	}
	// Every dedup key routes to one partition: a second enqueue from
	// another producer, round robin elsewhere, finds the first.
	p2, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	dedups := map[string][]streamq.EnqueueOption{
		"WithJobID":    {streamq.WithJobID("invoice-42")},
		"Throttle":     {streamq.Throttle("report:7", time.Minute)},
		"Debounce":     {streamq.Debounce("sync:9", time.Hour)},
		"UniqueByArgs": {streamq.UniqueByArgs(time.Minute)},
	}
	for name, opts := range dedups {
		first, err := p.Enqueue(ctx, []byte(name), opts...)
		if err != nil && !errors.Is(err, streamq.ErrDuplicate) {
			t.Fatal(err)
		}
		for i := range 8 {
			again, err := p2.Enqueue(ctx, []byte(name), opts...)
			// Debounce answers a later enqueue with the waiting job's ID.
			if again != first || (name == "Debounce") != (err == nil) || (err != nil && !errors.Is(err, streamq.ErrDuplicate)) {
				t.Fatalf("%s: enqueue %d of a job enqueued as %s: %q, %v; want its ID (and ErrDuplicate)", name, i+2, first, again, err)
			}
		}
	}
}

// TestPartitionedProducer_BatchRoundTrips checks that a keyless batch over
// 8 partitions costs one script call per partition.
func TestPartitionedProducer_BatchRoundTrips(t *testing.T) {
	t.Parallel()
	tags, _, p := taggedProducer(t, 8)
	ctx := context.Background()
	jobs := make([]streamq.Job, 800)
	for i := range jobs {
		jobs[i].Payload = []byte("j-" + strconv.Itoa(i))
	}
	if _, err := p.EnqueueBatch(ctx, jobs); err != nil { // reads the layout, loads the script
		t.Fatal(err)
	}
	tags.Start()
	ids, err := p.EnqueueBatch(ctx, jobs)
	got, cmds := tags.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 800 || len(got) != 8 || cmds != 8 {
		t.Fatalf("a batch of 800 jobs over 8 partitions: %d IDs, %d commands naming %v; want 800 IDs, 8 commands, one per partition; commands: %q", len(ids), cmds, got, tags.Log())
	}
	// The 8 calls go to one server in one pipeline: one round trip.
	var trips roundTrips
	p2 := taggedProducerOn(t, &trips)
	if _, err := p2.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	trips.reset()
	if _, err := p2.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if single, pipes, piped := trips.counts(); single != 0 || pipes != 1 || piped != 8 {
		t.Fatalf("a batch over 8 partitions on one server: %d single commands, %d pipelines of %d commands; want 0, 1 of 8", single, pipes, piped)
	}
	// A share of more than 1,000 jobs (two calls) is not pipelined: a call
	// that fails must stop the one after it, to keep a key's order.
	big := make([]streamq.Job, 8*1001)
	for i := range big {
		big[i].Payload = []byte("b")
	}
	trips.reset()
	if _, err := p2.EnqueueBatch(ctx, big); err != nil {
		t.Fatal(err)
	}
	if single, piped := trips.evals(); single != 16 || piped != 0 {
		t.Fatalf("a batch of 8 shares of 1,001 jobs: %d scripts sent alone, %d in pipelines; want 16 alone", single, piped)
	}
}

// A batch whose pipelined calls fail (the scripts were flushed from the
// server, so every EVALSHA is refused) writes each call again on its own:
// every job is stored once and has its ID.
func TestPartitionedProducer_BatchPipelineFallsBack(t *testing.T) {
	t.Parallel()
	c := redistest.NewIsolatedClient(t) // SCRIPT FLUSH: a server of its own
	pq := partSetup(t, c, 4, nil)
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	jobs := make([]streamq.Job, 2500) // 3 calls in the largest share
	for i := range jobs {
		jobs[i].Payload = []byte("j-" + strconv.Itoa(i))
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ids, err := p.EnqueueBatch(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		if id == "" || seen[id] {
			t.Fatalf("job %d: ID %q (empty or repeated)", i, id)
		}
		seen[id] = true
	}
	s, err := pq.Stats(ctx)
	if err != nil || s.Length != int64(len(jobs)) || s.Lag != int64(len(jobs)) {
		t.Fatalf("stats %+v (%v), want %d entries, all undelivered: each job once", s, err, len(jobs))
	}
}

// A batch whose pipeline loses a reply (the connection ends after Redis
// ran a call) stores every job once: the calls are sent again with their
// memos, which answer the first run's IDs.
func TestPartitionedProducer_BatchPipelineLostReply(t *testing.T) {
	t.Parallel()
	direct := redistest.NewClient(t)
	proxy, err := faultproxy.New(redistest.AddrOf(t, direct))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	via := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = via.Close() })
	pq := partSetup(t, via, 4, nil)
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	jobs := make([]streamq.Job, 400)
	for i := range jobs {
		jobs[i].Payload = []byte("j-" + strconv.Itoa(i))
	}
	if _, err := p.EnqueueBatch(ctx, jobs[:4]); err != nil { // loads the scripts
		t.Fatal(err)
	}
	dropped := proxy.DropReply(faultproxy.Command("EVALSHA"))
	ids, err := p.EnqueueBatch(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	select { // the client can see the cut before the proxy reports it
	case <-dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("no reply was dropped")
	}
	seen := map[string]bool{}
	for i, id := range ids {
		if id == "" || seen[id] {
			t.Fatalf("job %d: ID %q (empty or repeated)", i, id)
		}
		seen[id] = true
	}
	if s, err := pq.Stats(ctx); err != nil || s.Length != 404 {
		t.Fatalf("stats %+v (%v), want 404 entries: each job once", s, err)
	}
}

// A share refused by its partition's cap fails alone: its jobs have no
// IDs, the others are stored, and the batch reports ErrQueueFull.
func TestPartitionedProducer_BatchPipelineShareRefused(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	pq := partSetup(t, c, 2, &streamq.PartitionedQueueConfig{Queue: &streamq.QueueConfig{MaxLen: 100}})
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	part1, err := pq.Partition(1)
	if err != nil {
		t.Fatal(err)
	}
	fill, err := streamq.NewProducer(part1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fill.EnqueueBatch(ctx, make([]streamq.Job, 90)); err != nil {
		t.Fatal(err)
	}
	jobs := make([]streamq.Job, 40) // 20 per partition: partition 1 has room for 10
	ids, err := p.EnqueueBatch(ctx, jobs)
	if !errors.Is(err, streamq.ErrQueueFull) {
		t.Fatalf("err = %v, want ErrQueueFull", err)
	}
	var stored, none int
	for _, id := range ids {
		switch {
		case strings.HasPrefix(id, "p0~"):
			stored++
		case id == "":
			none++
		default:
			t.Fatalf("ID %q of a refused share", id)
		}
	}
	if stored != 20 || none != 20 {
		t.Fatalf("%d IDs of partition 0, %d empty; want 20 and 20", stored, none)
	}
}

// roundTrips counts the commands a client sends alone and in pipelines,
// and the scripts (EVALSHA) among them.
type roundTrips struct {
	mu                   sync.Mutex
	single, pipes, piped int
	evalSingle, evalPipe int
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.mu.Lock()
		r.single++
		if cmd.Name() == "evalsha" {
			r.evalSingle++
		}
		r.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.mu.Lock()
		r.pipes++
		r.piped += len(cmds)
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				r.evalPipe++
			}
		}
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (r *roundTrips) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.single, r.pipes, r.piped, r.evalSingle, r.evalPipe = 0, 0, 0, 0, 0
}

func (r *roundTrips) evals() (single, piped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.evalSingle, r.evalPipe
}

func (r *roundTrips) counts() (single, pipes, piped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.single, r.pipes, r.piped
}

// taggedProducerOn returns a producer of a queue of 8 partitions on a
// client with hook h.
func taggedProducerOn(t *testing.T, h redis.Hook) *streamq.PartitionedProducer {
	t.Helper()
	c := redistest.NewClient(t)
	c.AddHook(h)
	p, err := streamq.NewPartitionedProducer(partSetup(t, c, 8, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// taggedProducer returns a queue of n partitions, a producer of it, and a
// hook that records the partitions each command of its client names.
func taggedProducer(t *testing.T, n int) (*redistest.Tags, *streamq.PartitionedQueue, *streamq.PartitionedProducer) {
	t.Helper()
	c := redistest.NewClient(t)
	tags := &redistest.Tags{}
	c.AddHook(tags)
	pq := partSetup(t, c, n, nil)
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tags, pq, p
}
