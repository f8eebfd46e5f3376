package streamq_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/testsignal"
	"github.com/streamq/streamq/internal/wire"
)

const ctlInterval = 100 * time.Millisecond

// ctlSetup returns a client, a set-up queue under the test's own key
// prefix (so that the registry is the test's too), its producer and its
// keys; every key of the prefix is deleted when the test ends.
func ctlSetup(t *testing.T) (*redis.Client, *streamq.Queue, *streamq.Producer, rdb.Keys) {
	t.Helper()
	c := redistest.NewClient(t)
	prefix := "t-" + redistest.Name(t)
	q, err := streamq.NewQueue(c, "jobs", &streamq.QueueConfig{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	redistest.DeleteKeysAtCleanup(t, c, prefix+":*")
	if err := q.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, q, p, core.Of(q).Keys
}

// ctlConsumer returns a consumer with a short control interval, running
// until the test ends (or stop is called).
func ctlConsumer(t *testing.T, q *streamq.Queue, h streamq.HandlerFunc, cfg streamq.ConsumerConfig) (*streamq.Consumer, func()) {
	t.Helper()
	return ctlConsumerWith(t, q, h, cfg, nil)
}

// ctlConsumerWith is ctlConsumer whose run fires the signals in sig.
func ctlConsumerWith(t *testing.T, q *streamq.Queue, h streamq.HandlerFunc, cfg streamq.ConsumerConfig, sig *testsignal.Signals) (*streamq.Consumer, func()) {
	t.Helper()
	cfg.ControlInterval = ctlInterval
	if cfg.Block == 0 {
		cfg.Block = 50 * time.Millisecond
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
	}
	cfg.ShutdownTimeout = 5 * time.Second
	c, err := streamq.NewConsumer(q, h, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "Consumer.Run", 15*time.Second, sig.Run(c.Run))
	return c, func() { _ = r.Stop() }
}

// statsSum adds the throughput counters of the minutes from..to.
func statsSum(t *testing.T, c *redis.Client, k rdb.Keys, from, to time.Time) (processed, failed int64) {
	t.Helper()
	for m := rdb.Minute(from); m <= rdb.Minute(to); m++ {
		h, err := c.HGetAll(context.Background(), k.Stats(m)).Result()
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.ParseInt(h["processed"], 10, 64)
		f, _ := strconv.ParseInt(h["failed"], 10, 64)
		processed += p
		failed += f
	}
	return processed, failed
}

func TestQueue_Registry(t *testing.T) {
	t.Parallel()
	c, q, p, _ := ctlSetup(t)
	ctx := context.Background()
	prefix := core.Of(q).Prefix
	if kind, err := c.HGet(ctx, rdb.Registry(prefix), "jobs").Result(); err != nil || kind != "stream" {
		t.Fatalf("registry after Setup: %q, %v; want stream", kind, err)
	}
	// A producer of another queue registers it on its first enqueue.
	q2, err := streamq.NewQueue(c, "other", &streamq.QueueConfig{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := streamq.NewProducer(q2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := c.HLen(ctx, rdb.Registry(prefix)).Result(); n != 1 {
		t.Fatalf("registry holds %d queues before the first enqueue, want 1", n)
	}
	if _, err := p2.Enqueue(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if kind, _ := c.HGet(ctx, rdb.Registry(prefix), "other").Result(); kind != "stream" {
		t.Fatalf("registry after the first enqueue: %q, want stream", kind)
	}
	_ = p
}

// TestConsumer_PauseWhileBacklogDrains pauses a queue while a consumer
// drains a backlog: once the pause has settled (the consumer reports it and
// its running jobs finished), no job starts; after the resume the rest run.
func TestConsumer_PauseWhileBacklogDrains(t *testing.T) {
	t.Parallel()
	c, _, p, k := ctlSetup(t)
	q := p.Queue()
	ctx := context.Background()
	const n = 600
	jobs := make([]streamq.Job, n)
	for i := range jobs {
		jobs[i].Payload = []byte(strconv.Itoa(i))
	}
	if _, err := p.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	var started, done atomic.Int64
	sig := &testsignal.Signals{Paused: testsignal.New[struct{}]()}
	cons, _ := ctlConsumerWith(t, q, func(ctx context.Context, m *streamq.Message) error {
		started.Add(1)
		defer done.Add(1)
		time.Sleep(2 * time.Millisecond)
		return nil
	}, streamq.ConsumerConfig{Concurrency: 4}, sig)

	redistest.WaitFor(t, 10*time.Second, "some jobs to run", func() bool { return done.Load() >= 50 })
	if err := c.Set(ctx, k.Paused, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The consumer reports the pause as soon as it sees it, but a read may
	// still be on its way and start its jobs: the pause has settled once
	// the fetch loop stopped and the jobs it fetched before ran.
	sig.Paused.Wait(t, 5*time.Second, "the fetch loop to stop for the pause")
	if !cons.Health().Paused {
		t.Error("the fetch loop stopped for the pause, but Health does not report it")
	}
	redistest.WaitFor(t, 5*time.Second, "running jobs to finish", func() bool {
		return cons.Health().Jobs == 0 && started.Load() == done.Load()
	})
	settled := started.Load()
	if settled >= n {
		t.Fatalf("the backlog was drained before the pause took effect (%d jobs)", settled)
	}
	// Asserting that nothing happens takes a window: five control ticks.
	time.Sleep(5 * ctlInterval)
	if got := started.Load(); got != settled {
		t.Fatalf("%d jobs started after the pause settled", got-settled)
	}
	if h := cons.Health(); !h.Running || !h.Paused {
		t.Fatalf("health while paused: %+v", h)
	}

	if err := c.Del(ctx, k.Paused).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 20*time.Second, "the backlog to drain after the resume", func() bool { return done.Load() == n })
	if cons.Health().Paused {
		t.Fatal("still reports paused after the resume")
	}
	if got := cons.Stats().Processed; got != n {
		t.Fatalf("processed %d, want %d", got, n)
	}
}

// TestConsumer_StartedWhilePaused starts fresh consumers, one after the
// other, on a paused queue with a backlog: their first fetch is refused in
// the read script itself, before their control loop (one tick a second
// here) has read the flag, so none starts a job; after the resume one
// consumer runs them all.
func TestConsumer_StartedWhilePaused(t *testing.T) {
	t.Parallel()
	const (
		rounds = 5
		n      = 50
	)
	c, q, p, k := ctlSetup(t)
	ctx := context.Background()
	if err := c.Set(ctx, k.Paused, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	jobs := make([]streamq.Job, n)
	for i := range jobs {
		jobs[i].Payload = []byte(strconv.Itoa(i))
	}
	if _, err := p.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	var started atomic.Int64
	h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { started.Add(1); return nil })
	run := func() (*streamq.Consumer, *testsignal.Signals, *redistest.Runner) {
		cons, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Block: 50 * time.Millisecond, ControlInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		sig := &testsignal.Signals{Paused: testsignal.New[struct{}]()}
		return cons, sig, redistest.Background(t, "Consumer.Run", 10*time.Second, sig.Run(cons.Run))
	}
	for round := range rounds {
		_, sig, r := run()
		sig.Paused.Wait(t, 5*time.Second, "the fresh consumer's fetch loop to stop for the pause")
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		if got := started.Load(); got != 0 {
			t.Fatalf("round %d: a consumer started during the pause ran %d jobs", round, got)
		}
	}
	if err := c.Del(ctx, k.Paused).Err(); err != nil {
		t.Fatal(err)
	}
	run()
	redistest.WaitFor(t, 10*time.Second, "the backlog to run after the resume", func() bool { return started.Load() == n })
}

// TestConsumer_CancelRunningJob cancels a running job: its handler's context
// is cancelled with cause ErrCancelled within about a second, the job is
// dead-lettered with reason cancelled (not retried), and its cancel request,
// trail and counters are written as the contract says.
func TestConsumer_CancelRunningJob(t *testing.T) {
	t.Parallel()
	c, q, p, k := ctlSetup(t)
	ctx := context.Background()
	id, err := p.Enqueue(ctx, []byte("long"))
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	startedCh := make(chan struct{}, 1)
	causes := make(chan error, 1)
	_, _ = ctlConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		calls.Add(1)
		if m.ID != id {
			t.Errorf("ID = %q, want %q", m.ID, id)
		}
		startedCh <- struct{}{}
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(10 * time.Second):
			causes <- nil
			return nil
		}
	}, streamq.ConsumerConfig{})
	select {
	case <-startedCh:
	case <-time.After(5 * time.Second):
		t.Fatal("the job did not start")
	}
	asked := time.Now()
	if err := c.HSet(ctx, k.Cancel, id, asked.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, streamq.ErrCancelled) {
			t.Fatalf("cause = %v, want ErrCancelled", cause)
		}
		if d := time.Since(asked); d > time.Second {
			t.Fatalf("cancelled after %s, want within about a second", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	dlq := q.DeadLetters()
	var dls []streamq.DeadLetter
	redistest.WaitFor(t, 5*time.Second, "the dead letter", func() bool {
		dls, _, err = dlq.List(ctx, "", 10)
		return err == nil && len(dls) == 1
	})
	if dls[0].Reason != streamq.ReasonCancelled || dls[0].Attempts != 1 || dls[0].JobID != id || len(dls[0].Errors) != 1 {
		t.Fatalf("dead letter %+v, want reason cancelled after 1 attempt", dls[0])
	}
	if n, _ := c.HLen(ctx, k.Cancel).Result(); n != 0 {
		t.Fatalf("%d cancel requests left", n)
	}
	if at, _ := c.HGet(ctx, k.Trail, id).Result(); at != "x:"+dls[0].ID {
		t.Fatalf("trail of %s = %q, want x:%s", id, at, dls[0].ID)
	}
	raw, err := c.XRange(ctx, k.Dead, dls[0].ID, dls[0].ID).Result()
	if err != nil || len(raw) != 1 {
		t.Fatal(err)
	}
	if raw[0].Values[wire.FieldJobID] != id {
		t.Fatalf("dead letter jid = %v, want %s", raw[0].Values[wire.FieldJobID], id)
	}
	if errs := wire.ParseFailures(raw[0].Values[wire.FieldErrors].(string)); len(errs) != 1 || !strings.Contains(errs[0].Error, "cancelled") {
		t.Fatalf("dead letter errs = %+v", errs)
	}
	if _, failed := statsSum(t, c, k, asked.Add(-time.Minute), time.Now()); failed != 1 {
		t.Fatalf("failed counter = %d, want 1", failed)
	}
	time.Sleep(3 * ctlInterval) // a retry would run within a few ticks
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1 (never retried)", calls.Load())
	}
}

// TestConsumer_CancelVersusFinish races cancel requests against handlers
// that finish: every job ends exactly once, either done or dead-lettered as
// cancelled, never retried, and no cancel request is left behind.
func TestConsumer_CancelVersusFinish(t *testing.T) {
	t.Parallel()
	c, q, p, k := ctlSetup(t)
	ctx := context.Background()
	const n = 60
	var mu sync.Mutex
	calls := map[string]int{}
	running := make(chan string, n)
	_, _ = ctlConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		mu.Lock()
		calls[m.ID]++
		mu.Unlock()
		running <- m.ID
		i, _ := strconv.Atoi(string(m.Payload))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(i%12) * 20 * time.Millisecond): // around the control tick
			return nil
		}
	}, streamq.ConsumerConfig{Concurrency: 8})
	for i := range n {
		if _, err := p.Enqueue(ctx, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		select {
		case id := <-running:
			if err := c.HSet(ctx, k.Cancel, id, time.Now().UnixMilli()).Err(); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("jobs stopped running")
		}
	}
	dlq := q.DeadLetters()
	redistest.WaitFor(t, 10*time.Second, "every job to end and every cancel request to go", func() bool {
		st, err := q.Stats(ctx)
		dead, _, _ := dlq.List(ctx, "", 2*n)
		left, _ := c.HLen(ctx, k.Cancel).Result()
		return err == nil && st.Pending == 0 && st.Delayed == 0 && left == 0 && len(dead) <= n
	})
	dead, _, err := dlq.List(ctx, "", 2*n)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dead {
		if d.Reason != streamq.ReasonCancelled {
			t.Fatalf("dead letter with reason %q", d.Reason)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != n {
		t.Fatalf("%d distinct jobs ran, want %d", len(calls), n)
	}
	for id, c := range calls {
		if c != 1 {
			t.Fatalf("job %s ran %d times", id, c)
		}
	}
	if trail, _ := c.HLen(ctx, k.Trail).Result(); trail != int64(len(dead)) {
		t.Fatalf("trail holds %d entries, want one per dead letter (%d)", trail, len(dead))
	}
	t.Logf("%d of %d jobs were cancelled, the others finished first", len(dead), n)
}

// TestConsumer_JobIDTrailAndErrors follows one job through retries, a dead
// letter and a requeue: its stable ID stays, the trail says where it is,
// its error history is bounded, and the trail is forgotten once it finishes.
func TestConsumer_JobIDTrailAndErrors(t *testing.T) {
	t.Parallel()
	c, q, p, k := ctlSetup(t)
	ctx := context.Background()
	id, err := p.Enqueue(ctx, []byte("flaky"))
	if err != nil {
		t.Fatal(err)
	}
	const maxDeliveries = 7
	long := strings.Repeat("é", 600) // 1200 bytes
	var mu sync.Mutex
	var seen []*streamq.Message
	var succeed atomic.Bool
	start := time.Now()
	_, stop := ctlConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		mu.Lock()
		seen = append(seen, m)
		mu.Unlock()
		if succeed.Load() {
			return nil
		}
		return errors.New("attempt " + strconv.Itoa(m.Attempt) + ": " + long)
	}, streamq.ConsumerConfig{MaxDeliveries: maxDeliveries})
	dlq := q.DeadLetters()
	var dls []streamq.DeadLetter
	redistest.WaitFor(t, 10*time.Second, "the dead letter", func() bool {
		dls, _, err = dlq.List(ctx, "", 10)
		return err == nil && len(dls) == 1
	})
	mu.Lock()
	if len(seen) != maxDeliveries {
		t.Fatalf("%d attempts, want %d", len(seen), maxDeliveries)
	}
	for i, m := range seen {
		if m.ID != id || m.JobID != id {
			t.Fatalf("attempt %d: ID %q, JobID %q, want %q", i+1, m.ID, m.JobID, id)
		}
		if (i == 0) != (m.EntryID == id) {
			t.Fatalf("attempt %d: EntryID %q (first copy %s)", i+1, m.EntryID, id)
		}
	}
	mu.Unlock()
	raw, err := c.XRange(ctx, k.Dead, dls[0].ID, dls[0].ID).Result()
	if err != nil || len(raw) != 1 {
		t.Fatal(err)
	}
	errs := wire.ParseFailures(raw[0].Values[wire.FieldErrors].(string))
	if len(errs) != wire.MaxErrors {
		t.Fatalf("%d failures kept, want %d", len(errs), wire.MaxErrors)
	}
	for i, f := range errs {
		if len(f.Error) > wire.MaxHistoryError || f.Attempt != maxDeliveries-wire.MaxErrors+1+i || f.At < start.UnixMilli() {
			t.Fatalf("failure %d: attempt %d, %d bytes, at %d", i, f.Attempt, len(f.Error), f.At)
		}
	}
	if raw[0].Values[wire.FieldJobID] != id {
		t.Fatalf("dead letter jid %v, want %s", raw[0].Values[wire.FieldJobID], id)
	}
	if at, _ := c.HGet(ctx, k.Trail, id).Result(); at != "x:"+dls[0].ID {
		t.Fatalf("trail %q, want x:%s", at, dls[0].ID)
	}
	if _, failed := statsSum(t, c, k, start, time.Now()); failed != maxDeliveries {
		t.Fatalf("failed counter %d, want %d", failed, maxDeliveries)
	}

	// Requeued, it keeps its stable ID and history, and finishes.
	succeed.Store(true)
	if _, err := dlq.Requeue(ctx, dls[0].ID); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "the requeued job to finish", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == maxDeliveries+1
	})
	mu.Lock()
	last := seen[len(seen)-1]
	mu.Unlock()
	if last.JobID != id || last.Attempt != 1 {
		t.Fatalf("requeued copy: JobID %q attempt %d, want %q and 1", last.JobID, last.Attempt, id)
	}
	redistest.WaitFor(t, 5*time.Second, "the trail to be forgotten", func() bool {
		return c.HExists(ctx, k.Trail, id).Val() == false
	})
	stop()
	processed, _ := statsSum(t, c, k, start, time.Now())
	if processed != 1 {
		t.Fatalf("processed counter %d, want 1", processed)
	}
}

// TestSetProgressAndResult records progress and a result from a handler and
// checks their keys, bounds and expiry.
func TestSetProgressAndResult(t *testing.T) {
	t.Parallel()
	c, q, p, k := ctlSetup(t)
	ctx := context.Background()
	if err := streamq.SetProgress(ctx, 1, "x"); err == nil {
		t.Fatal("SetProgress outside a handler succeeded")
	}
	id, err := p.Enqueue(ctx, []byte("report"))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	_, _ = ctlConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		sub, cancel := context.WithTimeout(ctx, time.Second) // derived contexts work too
		defer cancel()
		errs <- streamq.SetProgress(sub, 50, "half way")
		errs <- streamq.SetResult(ctx, []byte("the answer"))
		errs <- streamq.SetResult(ctx, make([]byte, 65))
		errs <- streamq.SetProgress(ctx, 101, "")
		errs <- streamq.SetProgress(ctx, 1, strings.Repeat("m", streamq.MaxProgressMessage+1))
		return nil
	}, streamq.ConsumerConfig{ResultRetention: 800 * time.Millisecond, MaxResultBytes: 64})
	for i, want := range []error{nil, nil, streamq.ErrTooLarge, nil, streamq.ErrTooLarge} {
		select {
		case err := <-errs:
			if (want == nil && i != 3 && err != nil) || (want != nil && !errors.Is(err, want)) || (i == 3 && err == nil) {
				t.Fatalf("call %d: %v, want %v", i, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the handler did not run")
		}
	}
	var pr struct {
		Pct int    `json:"pct"`
		Msg string `json:"msg"`
		At  int64  `json:"at"`
	}
	b, err := c.Get(ctx, k.Progress(id)).Bytes()
	if err != nil || json.Unmarshal(b, &pr) != nil || pr.Pct != 50 || pr.Msg != "half way" || pr.At == 0 {
		t.Fatalf("progress %s (%v)", b, err)
	}
	if r, _ := c.Get(ctx, k.Result(id)).Result(); r != "the answer" {
		t.Fatalf("result %q", r)
	}
	if ttl := c.PTTL(ctx, k.Result(id)).Val(); ttl <= 0 || ttl > 800*time.Millisecond {
		t.Fatalf("result TTL %s, want up to the retention", ttl)
	}
	redistest.WaitFor(t, 5*time.Second, "progress and result to expire", func() bool {
		return c.Exists(ctx, k.Progress(id), k.Result(id)).Val() == 0
	})
}

// TestHealthHandler answers 200 while the consumer runs (also paused) and
// 503 once it stopped.
func TestHealthHandler(t *testing.T) {
	t.Parallel()
	c, q, _, k := ctlSetup(t)
	ctx := context.Background()
	cons, stop := ctlConsumer(t, q, func(context.Context, *streamq.Message) error { return nil }, streamq.ConsumerConfig{})
	h := streamq.HealthHandler(cons)
	get := func() (int, map[string]any) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("body %q: %v", rec.Body, err)
		}
		return rec.Code, body
	}
	redistest.WaitFor(t, 5*time.Second, "a healthy consumer", func() bool { code, _ := get(); return code == http.StatusOK })
	if err := c.Set(ctx, k.Paused, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "the pause", func() bool { return cons.Health().Paused })
	if code, body := get(); code != http.StatusOK || body["ok"] != true {
		t.Fatalf("paused: %d %v, want 200", code, body)
	}
	stop()
	code, body := get()
	if code != http.StatusServiceUnavailable || body["ok"] != false {
		t.Fatalf("stopped: %d %v, want 503", code, body)
	}
	probes := body["probes"].([]any)
	if len(probes) != 1 || probes[0].(map[string]any)["reason"] != "not running" {
		t.Fatalf("probes %v", probes)
	}
}

// TestQueue_StatsOldestWaiting reports the age of the oldest undelivered job.
func TestQueue_StatsOldestWaiting(t *testing.T) {
	t.Parallel()
	_, q, p, _ := ctlSetup(t)
	ctx := context.Background()
	if s, err := q.Stats(ctx); err != nil || s.OldestWaiting != 0 {
		t.Fatalf("empty queue: %s, %v", s.OldestWaiting, err)
	}
	before := time.Now()
	if _, err := p.Enqueue(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "the job to age", func() bool { return time.Since(before) > 50*time.Millisecond })
	s, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.OldestWaiting < 40*time.Millisecond || s.OldestWaiting > time.Since(before)+5*time.Millisecond {
		t.Fatalf("OldestWaiting %s, want about %s", s.OldestWaiting, time.Since(before))
	}
}

// A running consumer whose queue was deleted under it (an operator's forced
// delete) makes its stream and group again, to go on consuming, but does not
// put the queue back in the registry: that waits for its restart.
func TestConsumer_QueueDeletedUnderIt(t *testing.T) {
	t.Parallel()
	c, q, p, k := ctlSetup(t)
	ctx := context.Background()
	ran := make(chan string, 1)
	_, stop := ctlConsumer(t, q, func(_ context.Context, m *streamq.Message) error { ran <- string(m.Payload); return nil }, streamq.ConsumerConfig{Block: 20 * time.Millisecond})
	reg := rdb.Registry(strings.TrimSuffix(k.Pattern(), ":{jobs}:*"))
	if !c.HExists(ctx, reg, "jobs").Val() {
		t.Fatalf("the queue is not in the registry %s", reg)
	}
	// The producer registers the queue once, with its first job.
	if _, err := p.Enqueue(ctx, []byte("before")); err != nil {
		t.Fatal(err)
	}
	if got := <-ran; got != "before" {
		t.Fatalf("ran %q, want before", got)
	}
	// The forced delete: the stream and the registry entry go.
	if err := c.Del(ctx, k.Stream).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HDel(ctx, reg, "jobs").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "the consumer made the stream and its group again", func() bool {
		gs, err := c.XInfoGroups(ctx, k.Stream).Result()
		return err == nil && len(gs) == 1
	})
	if _, err := p.Enqueue(ctx, []byte("after")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ran:
		if got != "after" {
			t.Fatalf("ran %q, want after", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer did not run a job enqueued after the delete")
	}
	if c.HExists(ctx, reg, "jobs").Val() {
		t.Error("a running consumer put its deleted queue back in the registry")
	}
	stop()
}

// TestConsumer_PauseEndsStartLease: a running consumer holds a start lease
// (its reads do not look at the pause flag); inspect's Pause returns only
// once the consumer gave the lease back, and from then on no job starts,
// not even one its read returns after the pause; after the resume every
// job runs on its first attempt (a job read during the pause is not
// charged).
func TestConsumer_PauseEndsStartLease(t *testing.T) {
	t.Parallel()
	c, q, p, k := ctlSetup(t)
	ctx := context.Background()
	const later = 5
	var started atomic.Int64
	attempts := make(chan int, later+1)
	cons, _ := ctlConsumer(t, q, func(_ context.Context, m *streamq.Message) error {
		started.Add(1)
		attempts <- m.Attempt
		return nil
	}, streamq.ConsumerConfig{})
	redistest.WaitFor(t, 5*time.Second, "the consumer to take a start lease", func() bool {
		return c.ZCard(ctx, k.StartLeases).Val() == 1
	})
	if _, err := p.Enqueue(ctx, []byte("before")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "the first job to run", func() bool { return started.Load() == 1 })

	iq := ctlInspect(t, c, q)
	if err := iq.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if n := c.ZCard(ctx, k.StartLeases).Val(); n != 0 {
		t.Fatalf("Pause returned while %d start leases were open", n)
	}
	for i := range later {
		if _, err := p.Enqueue(ctx, []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, 5*time.Second, "the consumer to report the pause", func() bool { return cons.Health().Paused })
	// Asserting that nothing happens takes a window: five control ticks.
	time.Sleep(5 * ctlInterval)
	if got := started.Load(); got != 1 {
		t.Fatalf("%d jobs started after Pause returned", got-1)
	}
	if n := c.ZCard(ctx, k.StartLeases).Val(); n != 0 {
		t.Fatalf("a consumer took a start lease during the pause (%d open)", n)
	}
	if err := iq.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "the jobs to run after the resume", func() bool { return started.Load() == later+1 })
	for range later + 1 {
		if a := <-attempts; a != 1 {
			t.Errorf("a job ran as attempt %d, want 1", a)
		}
	}
}

// TestConsumer_StoppedRightAfterABlockedRead stops a consumer at the worst
// moment for guarantee 6: right after a blocking read delivered a job (Redis
// counted the delivery) and before the consumer looked at the pause flag.
// The job must either start or be handed back uncharged; a job left counted
// as started by a consumer that never started it would be charged an
// attempt it never made once another consumer takes it over.
func TestConsumer_StoppedRightAfterABlockedRead(t *testing.T) {
	t.Parallel()
	c := redistest.NewIsolatedClient(t) // its blocked clients are the consumer's
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cut atomic.Bool
	c.AddHook(redistest.AfterEach(func(cmd redis.Cmder) {
		xr, ok := cmd.(*redis.XStreamSliceCmd)
		if !ok || len(xr.Val()) == 0 || len(xr.Val()[0].Messages) == 0 {
			return
		}
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.EqualFold(s, "block") {
				cut.Store(true)
				cancel() // the run ends while the read's reply is in hand
			}
		}
	}))
	q, err := streamq.NewQueue(c, "jobs", nil)
	if err != nil {
		t.Fatal(err)
	}
	var started atomic.Int64
	cons, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		started.Add(1)
		return nil
	}), &streamq.ConsumerConfig{Name: "c1", Block: 5 * time.Second, ControlInterval: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	redistest.WaitFor(t, 10*time.Second, "the consumer to block in its read", func() bool {
		info, err := c.Info(context.Background(), "clients").Result()
		return err == nil && !strings.Contains(info, "blocked_clients:0\r")
	})
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Enqueue(context.Background(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return within 15 s of its context's end")
	}
	if !cut.Load() {
		t.Fatal("the job was not delivered by a blocking read; the test did not reach the moment it is about")
	}
	if started.Load() == 1 {
		return // it started: its delivery is its start
	}
	pend, err := c.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: core.Of(q).Keys.Stream, Group: core.Of(q).Group, Start: id, End: id, Count: 1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) == 1 && pend[0].RetryCount != 0 {
		t.Fatalf("job %s never started but is left counted as started %d time(s) by %s", id, pend[0].RetryCount, pend[0].Consumer)
	}
}

// TestConsumer_PauseHoldsAJobWaitingAlone: a job whose earlier runs crashed
// waits to make its last attempt alone while another job runs; the queue is
// paused meanwhile. When the other job ends, the waiting one must not start
// until the resume: after Pause returned, no job starts.
func TestConsumer_PauseHoldsAJobWaitingAlone(t *testing.T) {
	t.Parallel()
	c, q, p, k := ctlSetup(t)
	ctx := context.Background()
	// Both jobs were read by a consumer that "crashed": the blocker once,
	// the suspect twice. The consumer below takes both over in one claim,
	// the blocker first (its ID is lower), so the suspect, on its last
	// attempt, must wait to run alone while the blocker runs. (With the
	// blocker read as a new entry, the suspect could be taken over, and
	// run alone, before it.)
	if _, err := p.Enqueue(ctx, []byte("blocker")); err != nil {
		t.Fatal(err)
	}
	suspect, err := p.Enqueue(ctx, []byte("suspect"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.Group(), Consumer: "ghost", Streams: []string{k.Stream, ">"}, Count: 2, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "XCLAIM", k.Stream, q.Group(), "ghost", 0, suspect, "RETRYCOUNT", 2, "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var suspectStarted atomic.Bool
	blockerStarted := make(chan struct{}, 1)
	h := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		if string(m.Payload) == "suspect" {
			suspectStarted.Store(true)
			return nil
		}
		blockerStarted <- struct{}{}
		<-release
		return nil
	})
	cons, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Name: "c1", Concurrency: 2, MaxDeliveries: 3,
		MinIdle: 200 * time.Millisecond, ReclaimInterval: 50 * time.Millisecond, Block: 50 * time.Millisecond, ControlInterval: ctlInterval})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "Consumer.Run", 10*time.Second, cons.Run)
	select {
	case <-blockerStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocker did not start")
	}
	redistest.WaitFor(t, 10*time.Second, "the suspect to wait to run alone", func() bool { return cons.Health().Waiting == 1 })
	iq := ctlInspect(t, c, q)
	if err := iq.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	close(release)
	redistest.WaitFor(t, 10*time.Second, "the blocker to finish", func() bool { return cons.Health().Jobs == 1 })
	// The slots are free now: before the fix the suspect started at once.
	// Watch it for ten control intervals.
	for range 10 {
		time.Sleep(ctlInterval) // an observation window for something that must not happen
		if suspectStarted.Load() {
			t.Fatal("a job waiting to run alone started while the queue was paused")
		}
	}
	if err := iq.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "the suspect to start after the resume", suspectStarted.Load)
}
