package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
)

// fastConsumer is a consumer config that notices shutdown and retries quickly,
// so tests finish fast. Fields set by the caller win.
func fastConsumer(cfg streamq.ConsumerConfig) *streamq.ConsumerConfig {
	if cfg.Block == 0 {
		cfg.Block = 50 * time.Millisecond
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
	}
	return &cfg
}

// cqSetup creates a queue with a unique name and a producer on a new client,
// and removes the queue's keys when the test ends.
func cqSetup(t *testing.T, cfg *streamq.QueueConfig) (*redis.Client, *streamq.Queue, *streamq.Producer) {
	t.Helper()
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, cfg)
	return rdb, q, p
}

// cqRun starts c.Run and returns a function that cancels it and waits for
// Run to return (failing the test if it does not within 15 s).
func cqRun(t *testing.T, c *streamq.Consumer) (stop func()) {
	t.Helper()
	r := redistest.Background(t, "Consumer.Run", 15*time.Second, c.Run)
	return func() { _ = r.Stop() } // an error fails the test at its end
}

// counter records how many times each job number was handled.
type counter struct {
	mu    sync.Mutex
	seen  map[int]int
	total atomic.Int64
}

func newCounter() *counter { return &counter{seen: map[int]int{}} }

func (c *counter) add(payload []byte) error {
	n, err := strconv.Atoi(string(payload))
	if err != nil {
		return streamq.Permanent(err)
	}
	c.mu.Lock()
	c.seen[n]++
	c.mu.Unlock()
	c.total.Add(1)
	return nil
}

// check asserts that jobs 0..n-1 were each handled exactly once.
func (c *counter) exactlyOnce(t *testing.T, n int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var missing, dup int
	for i := range n {
		switch c.seen[i] {
		case 0:
			missing++
		case 1:
		default:
			dup++
		}
	}
	if missing > 0 || dup > 0 || len(c.seen) != n {
		t.Fatalf("of %d jobs: %d missing, %d handled more than once, %d distinct seen", n, missing, dup, len(c.seen))
	}
}

func enqueueN(t *testing.T, p *streamq.Producer, from, n int) {
	t.Helper()
	jobs := make([]streamq.Job, n)
	for i := range jobs {
		jobs[i].Payload = []byte(strconv.Itoa(from + i))
	}
	ids, err := p.EnqueueBatch(context.Background(), jobs)
	if err != nil {
		t.Fatalf("EnqueueBatch: %v", err)
	}
	for i, id := range ids {
		if id == "" {
			t.Fatalf("job %d has no ID", i)
		}
	}
}

func TestConsumer_TenThousandJobsExactlyOnce(t *testing.T) {
	t.Parallel()
	const n = 10_000
	q, p := relQueue(t, redistest.NewIsolatedClient(t), nil) // a backlog of 10,000
	ctx := context.Background()
	for i := range n { // one by one: exercises Enqueue, not just batches
		if _, err := p.Enqueue(ctx, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	cnt := newCounter()
	var running, peak atomic.Int64
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		cur := running.Add(1)
		defer running.Add(-1)
		for {
			old := peak.Load()
			if cur <= old || peak.CompareAndSwap(old, cur) {
				break
			}
		}
		return cnt.add(m.Payload)
	}), fastConsumer(streamq.ConsumerConfig{Concurrency: 16}))
	if err != nil {
		t.Fatal(err)
	}
	stop := cqRun(t, c)
	redistest.WaitFor(t, 60*time.Second, "10,000 jobs handled", func() bool { return c.Stats().Processed >= n })
	stop()
	cnt.exactlyOnce(t, n)
	if peak.Load() > 16 {
		t.Errorf("%d handlers ran at once, concurrency is 16", peak.Load())
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 0 || st.Lag != 0 || st.DeadLetters != 0 {
		t.Errorf("after all jobs: %+v, want nothing pending, lagging or dead", st)
	}
}

func TestProducer_EnqueueBatch(t *testing.T) {
	t.Parallel()
	rdb, q, p := cqSetup(t, nil)
	ctx := context.Background()
	jobs := make([]streamq.Job, 2500) // more than one chunk
	for i := range jobs {
		jobs[i] = streamq.Job{Payload: []byte(strconv.Itoa(i)), Headers: map[string]string{"n": strconv.Itoa(i)}}
	}
	ids, err := p.EnqueueBatch(ctx, jobs, streamq.WithHeader("batch", "b1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(jobs) {
		t.Fatalf("%d ids for %d jobs", len(ids), len(jobs))
	}
	entries, err := rdb.XRange(ctx, core.Of(q).Keys.Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(jobs) {
		t.Fatalf("stream holds %d entries, want %d", len(entries), len(jobs))
	}
	for i, e := range entries {
		if e.ID != ids[i] {
			t.Fatalf("entry %d has ID %s, EnqueueBatch returned %s (order must be kept)", i, e.ID, ids[i])
		}
		if e.Values["payload"] != strconv.Itoa(i) || e.Values["v"] != "1" {
			t.Fatalf("entry %d = %v", i, e.Values)
		}
		want := fmt.Sprintf(`{"batch":"b1","n":"%d"}`, i)
		if e.Values["headers"] != want {
			t.Fatalf("entry %d headers %v, want %s", i, e.Values["headers"], want)
		}
	}
}

func TestConsumer_GracefulShutdownKeepsUnfinishedJobs(t *testing.T) {
	t.Parallel()
	_, q, p := cqSetup(t, nil)
	ctx := context.Background()
	enqueueN(t, p, 0, 8)

	// Jobs 0-3 finish within the drain window; jobs 4-7 block until their
	// context is cancelled by the shutdown timeout.
	var started atomic.Int64
	cnt := newCounter()
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		started.Add(1)
		n, _ := strconv.Atoi(string(m.Payload))
		if n < 4 {
			time.Sleep(100 * time.Millisecond) // simulated work that outlasts the cancel
			return cnt.add(m.Payload)
		}
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), streamq.ErrShutdown) {
			return fmt.Errorf("cancelled for the wrong reason: %w", context.Cause(ctx))
		}
		return ctx.Err()
	}), fastConsumer(streamq.ConsumerConfig{Concurrency: 8, ShutdownTimeout: 300 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	stop := cqRun(t, c)
	redistest.WaitFor(t, 10*time.Second, "all 8 jobs started", func() bool { return started.Load() == 8 })
	stop()

	if got := c.Stats().Processed; got != 4 {
		t.Errorf("processed %d jobs during shutdown, want the 4 that finish", got)
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The unfinished jobs were handed back without losing an attempt: they
	// wait in the stream again or stay pending, never acknowledged.
	if st.Delayed+st.Pending+relUndelivered(q) != 4 || st.DeadLetters != 0 {
		t.Fatalf("after shutdown: %+v, want the 4 unfinished jobs waiting", st)
	}

	c2, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		if m.Attempt != 1 {
			return streamq.Permanent(fmt.Errorf("job %s charged %d attempts for a shutdown", m.Payload, m.Attempt-1))
		}
		return cnt.add(m.Payload)
	}), fastConsumer(streamq.ConsumerConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	stop2 := cqRun(t, c2)
	redistest.WaitFor(t, 10*time.Second, "the 4 unfinished jobs handled by a new consumer", func() bool { return cnt.total.Load() == 8 })
	stop2()
	cnt.exactlyOnce(t, 8)
}

func TestConsumer_PanicIsAFailureNotAnAck(t *testing.T) {
	t.Parallel()
	rdb, q, p := cqSetup(t, nil)
	ctx := context.Background()
	id, err := p.Enqueue(ctx, []byte("explode once"))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	release := make(chan struct{})
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		if calls.Add(1) == 1 {
			panic("handler bug")
		}
		<-release
		return nil
	}), fastConsumer(streamq.ConsumerConfig{Backoff: func(int) time.Duration { return 300 * time.Millisecond }}))
	if err != nil {
		t.Fatal(err)
	}
	stop := cqRun(t, c)
	redistest.WaitFor(t, 5*time.Second, "the panic recorded as a failure", func() bool { return c.Stats().Failed == 1 })
	// The panicking attempt must not have acknowledged the job: it is waiting
	// for its retry, with the panic as its last error.
	if c.Stats().Processed != 0 {
		t.Fatal("a panicking handler acknowledged its job")
	}
	redistest.WaitFor(t, 5*time.Second, "the retry scheduled", func() bool { return c.Stats().Retried == 1 })
	left, err := rdb.XRange(ctx, core.Of(q).Keys.Stream, id, id).Result()
	if err != nil || len(left) != 0 {
		t.Fatalf("original entry still in the stream after the retry move: %v %v", left, err)
	}
	redistest.WaitFor(t, 5*time.Second, "the retry running", func() bool { return calls.Load() == 2 })
	close(release)
	redistest.WaitFor(t, 5*time.Second, "the retry acknowledged", func() bool { return c.Stats().Processed == 1 })
	stop()
}

func TestProducer_MaxLenApproximateCap(t *testing.T) {
	t.Parallel()
	const capLen = 1000
	rdb, q, p := cqSetup(t, &streamq.QueueConfig{MaxLen: capLen})
	ctx := context.Background()
	cnt := newCounter()
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		return cnt.add(m.Payload)
	}), fastConsumer(streamq.ConsumerConfig{Concurrency: 16}))
	if err != nil {
		t.Fatal(err)
	}
	stop := cqRun(t, c)
	const n = 5 * capLen
	var maxLen int64
	for i := 0; i < n; {
		batch := min(100, n-i)
		jobs := make([]streamq.Job, batch)
		for k := range jobs {
			jobs[k].Payload = []byte(strconv.Itoa(i + k))
		}
		_, err := p.EnqueueBatch(ctx, jobs)
		if errors.Is(err, streamq.ErrQueueFull) {
			// The consumer is behind: wait for it to catch up a little.
			before := cnt.total.Load()
			redistest.WaitFor(t, 10*time.Second, "consumer progress", func() bool { return cnt.total.Load() > before })
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		i += batch
		l, _ := rdb.XLen(ctx, core.Of(q).Keys.Stream).Result()
		maxLen = max(maxLen, l)
	}
	redistest.WaitFor(t, 30*time.Second, "all jobs handled", func() bool { return cnt.total.Load() >= n })
	stop()
	cnt.exactlyOnce(t, n)
	if maxLen > capLen {
		t.Errorf("stream grew to %d entries, cap %d", maxLen, capLen)
	}
	if maxLen < capLen/2 {
		t.Errorf("stream peaked at %d entries: the cap should keep acknowledged history up to about %d", maxLen, capLen)
	}
	if s := c.Stats(); s.Deleted != 0 {
		t.Errorf("trimming deleted %d unacknowledged entries", s.Deleted)
	}
	t.Logf("stream length peaked at %d with cap %d", maxLen, capLen)
}

func TestConsumer_TwoConsumersSplitWork(t *testing.T) {
	t.Parallel()
	const n = 4000
	_, q, p := cqSetup(t, nil)
	enqueueN(t, p, 0, n)
	cnt := newCounter()
	var byConsumer [2]atomic.Int64
	var consumers [2]*streamq.Consumer
	for i := range consumers {
		c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
			byConsumer[i].Add(1)
			time.Sleep(100 * time.Microsecond) // let both consumers get a share
			return cnt.add(m.Payload)
		}), fastConsumer(streamq.ConsumerConfig{Concurrency: 4}))
		if err != nil {
			t.Fatal(err)
		}
		consumers[i] = c
	}
	if consumers[0].Name() == consumers[1].Name() {
		t.Fatal("two consumers got the same default name")
	}
	stop0, stop1 := cqRun(t, consumers[0]), cqRun(t, consumers[1])
	redistest.WaitFor(t, 60*time.Second, "all jobs handled", func() bool { return cnt.total.Load() >= n })
	stop0()
	stop1()
	cnt.exactlyOnce(t, n)
	a, b := byConsumer[0].Load(), byConsumer[1].Load()
	if a == 0 || b == 0 || a+b != n {
		t.Errorf("split %d/%d, want both consumers to take part and %d in all", a, b, n)
	}
	t.Logf("consumer split: %d / %d", a, b)
}
