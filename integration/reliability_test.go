package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/testsignal"
)

// Bounds of the waits in the reliability, fault and crash tests.
const (
	relWait    = 15 * time.Second // one condition that should hold soon
	relRunStop = 20 * time.Second // Run returning after its context was cancelled
)

// relQueue creates a queue with a unique name on rdb, sets it up, and deletes
// its keys when the test ends.
func relQueue(t *testing.T, rdb *redis.Client, cfg *streamq.QueueConfig) (*streamq.Queue, *streamq.Producer) {
	t.Helper()
	q, err := streamq.NewQueue(rdb, redistest.Name(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	redistest.DeleteKeysAtCleanup(t, rdb, core.Of(q).Keys.Part("*"))
	return q, p
}

// relLogs collects a test's consumer logs and prints them if the test fails,
// so passing tests stay quiet.
type relLogs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *relLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 256<<10 { // keep the tail
		l.b.Reset()
	}
	return l.b.Write(p)
}

func (l *relLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// relLogger returns a logger whose output is shown only if the test fails.
func relLogger(t *testing.T) *slog.Logger {
	t.Helper()
	l := &relLogs{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consumer logs:\n%s", l.String())
		}
	})
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// relConfig fills in settings that make consumers react fast; fields set by
// the caller win.
func relConfig(t *testing.T, cfg streamq.ConsumerConfig) *streamq.ConsumerConfig {
	t.Helper()
	if cfg.Block == 0 {
		cfg.Block = 100 * time.Millisecond
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	if cfg.SchedulerInterval == 0 {
		cfg.SchedulerInterval = 20 * time.Millisecond
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int) time.Duration { return 10 * time.Millisecond }
	}
	if cfg.Logger == nil {
		cfg.Logger = relLogger(t)
	}
	return &cfg
}

// relConsumer creates a consumer or fails the test.
func relConsumer(t *testing.T, q *streamq.Queue, h streamq.HandlerFunc, cfg streamq.ConsumerConfig) *streamq.Consumer {
	t.Helper()
	c, err := streamq.NewConsumer(q, h, relConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// relRunning is a Consumer.Run in its own goroutine.
type relRunning struct {
	*redistest.Runner
	done <-chan struct{} // closed when Run has returned
}

// relRun starts c.Run; the test's cleanup stops it if the test did not.
func relRun(t *testing.T, c *streamq.Consumer) *relRunning {
	t.Helper()
	return relRunWith(t, c, nil)
}

// relRunWith is relRun whose run fires the signals in sig.
func relRunWith(t *testing.T, c *streamq.Consumer, sig *testsignal.Signals) *relRunning {
	t.Helper()
	r := redistest.Background(t, "Consumer.Run", relRunStop, sig.Run(c.Run))
	return &relRunning{Runner: r, done: r.Done()}
}

// stop cancels Run and waits for it to return, bounded by relRunStop; a Run
// that returns an error (reported when the test ends) or does not return
// fails the test.
func (r *relRunning) stop() { _ = r.Stop() }

// relCounter counts handled jobs by payload.
type relCounter struct {
	mu    sync.Mutex
	seen  map[string]int
	total atomic.Int64
}

func newRelCounter() *relCounter { return &relCounter{seen: map[string]int{}} }

func (c *relCounter) add(payload []byte) {
	c.mu.Lock()
	c.seen[string(payload)]++
	c.mu.Unlock()
	c.total.Add(1)
}

func (c *relCounter) count(payload string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[payload]
}

// check reports the wanted payloads that were never handled, those handled
// more than once, and payloads that were not wanted at all.
func (c *relCounter) check(want []string) (missing, dups, unexpected []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wanted := make(map[string]bool, len(want))
	for _, w := range want {
		wanted[w] = true
		switch c.seen[w] {
		case 0:
			missing = append(missing, w)
		case 1:
		default:
			dups = append(dups, w)
		}
	}
	for s := range c.seen {
		if !wanted[s] {
			unexpected = append(unexpected, s)
		}
	}
	slices.Sort(unexpected)
	return missing, dups, unexpected
}

// exactlyOnce fails the test unless every wanted payload was handled exactly
// once and nothing else was handled.
func (c *relCounter) exactlyOnce(t *testing.T, want []string) {
	t.Helper()
	missing, dups, unexpected := c.check(want)
	if len(missing)+len(dups)+len(unexpected) > 0 {
		t.Fatalf("of %d jobs: %d never handled %v, %d handled more than once %v, %d unexpected %v",
			len(want), len(missing), head(missing), len(dups), head(dups), len(unexpected), head(unexpected))
	}
}

// head returns the first few elements of s, for messages.
func head(s []string) []string { return s[:min(len(s), 10)] }

// numbers returns the payloads "from" .. "from+n-1".
func numbers(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(from + i)
	}
	return out
}

// enqueueAll enqueues one job per payload in one batch and fails the test on
// any error.
func enqueueAll(t *testing.T, p *streamq.Producer, payloads []string, opts ...streamq.EnqueueOption) []string {
	t.Helper()
	jobs := make([]streamq.Job, len(payloads))
	for i, s := range payloads {
		jobs[i].Payload = []byte(s)
	}
	ids, err := p.EnqueueBatch(context.Background(), jobs, opts...)
	if err != nil {
		t.Fatalf("EnqueueBatch of %d jobs: %v", len(jobs), err)
	}
	return ids
}

// relEvents records a consumer's events.
type relEvents struct {
	mu     sync.Mutex
	events []streamq.Event
}

func (e *relEvents) on(_ context.Context, ev streamq.Event) {
	e.mu.Lock()
	e.events = append(e.events, ev)
	e.mu.Unlock()
}

func (e *relEvents) of(kind streamq.EventKind) []streamq.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []streamq.Event
	for _, ev := range e.events {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// relStats reads q.Stats or fails the test.
func relStats(t *testing.T, q *streamq.Queue) streamq.QueueStats {
	t.Helper()
	s, err := q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// relSettled waits until the queue holds nothing pending, undelivered or
// delayed, and then checks that it holds wantDead dead letters.
func relSettled(t *testing.T, q *streamq.Queue, wantDead int64, timeout time.Duration) {
	t.Helper()
	var last streamq.QueueStats
	redistest.WaitFor(t, timeout, "the queue to settle (nothing pending, undelivered or delayed)", func() bool {
		var settled bool
		last, settled = relIsSettled(q)
		return settled
	})
	if last.DeadLetters != wantDead {
		t.Fatalf("queue settled with %d dead letters, want %d: %+v", last.DeadLetters, wantDead, last)
	}
}

// relIsSettled reports whether the queue holds nothing pending, undelivered
// or delayed, with its stats.
func relIsSettled(q *streamq.Queue) (streamq.QueueStats, bool) {
	s, err := q.Stats(context.Background())
	if err != nil || s.Pending != 0 || s.Delayed != 0 {
		return s, false
	}
	if s.Lag == -1 { // Redis cannot tell after some deletions: look
		return s, relNothingUndelivered(q)
	}
	return s, s.Lag == 0
}

// relNothingUndelivered reports whether the stream holds no entry after the
// group's last delivered ID.
func relNothingUndelivered(q *streamq.Queue) bool { return relUndelivered(q) == 0 }

// relUndelivered counts the entries of q's stream not yet delivered to its
// group (up to 1,000), -1 on error.
func relUndelivered(q *streamq.Queue) int64 {
	ctx := context.Background()
	groups, err := core.Of(q).RDB.XInfoGroups(ctx, core.Of(q).Keys.Stream).Result()
	if err != nil {
		return -1
	}
	for _, g := range groups {
		if g.Name == q.Group() {
			rest, err := core.Of(q).RDB.XRangeN(ctx, core.Of(q).Keys.Stream, "("+g.LastDeliveredID, "+", 1000).Result()
			if err != nil {
				return -1
			}
			return int64(len(rest))
		}
	}
	return -1
}

// allDeadLetters lists every dead letter of q.
func allDeadLetters(t *testing.T, q *streamq.Queue) []streamq.DeadLetter {
	t.Helper()
	var out []streamq.DeadLetter
	cursor := ""
	for range 1000 {
		page, next, err := q.DeadLetters().List(context.Background(), cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		cursor = next
	}
	t.Fatal("more than 100,000 dead letters")
	return nil
}

func TestReliability_PoisonJobDeadLetteredThenRequeued(t *testing.T) {
	t.Parallel()
	const maxDeliveries = 4
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()

	var poisoned atomic.Bool
	poisoned.Store(true)
	var calls atomic.Int64
	attempts := make(chan int, 2*maxDeliveries)
	requeued := make(chan *streamq.Message, 1)
	events := &relEvents{}
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		calls.Add(1)
		if poisoned.Load() {
			attempts <- m.Attempt
			return fmt.Errorf("attempt %d: cannot parse invoice", m.Attempt)
		}
		requeued <- m
		return nil
	}, streamq.ConsumerConfig{MaxDeliveries: maxDeliveries, OnEvent: events.on})
	run := relRun(t, c)

	if _, err := p.Enqueue(ctx, []byte("poison"), streamq.WithHeader("tenant", "acme")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, relWait, "the poison job dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	if got := calls.Load(); got != maxDeliveries {
		t.Fatalf("handler ran %d times, want exactly MaxDeliveries = %d", got, maxDeliveries)
	}
	for want := 1; want <= maxDeliveries; want++ {
		if got := <-attempts; got != want {
			t.Errorf("attempt numbers: got %d where %d was expected", got, want)
		}
	}
	dls := allDeadLetters(t, q)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	wantErr := fmt.Sprintf("attempt %d: cannot parse invoice", maxDeliveries)
	if dl.Reason != streamq.ReasonMaxDeliveries || dl.Attempts != maxDeliveries || dl.Error != wantErr {
		t.Errorf("dead letter reason=%q attempts=%d error=%q; want %q, %d, %q",
			dl.Reason, dl.Attempts, dl.Error, streamq.ReasonMaxDeliveries, maxDeliveries, wantErr)
	}
	if string(dl.Payload) != "poison" || dl.Headers["tenant"] != "acme" || dl.Queue != q.Name() {
		t.Errorf("dead letter payload=%q headers=%v queue=%q; want the job's own", dl.Payload, dl.Headers, dl.Queue)
	}
	if dl.FirstFailedAt.IsZero() || dl.FailedAt.Before(dl.FirstFailedAt) {
		t.Errorf("dead letter first failure %v, failure %v", dl.FirstFailedAt, dl.FailedAt)
	}
	if ev := events.of(streamq.EventDeadLettered); len(ev) != 1 || ev[0].Reason != streamq.ReasonMaxDeliveries {
		t.Errorf("dead-letter events %+v, want one with reason %q", ev, streamq.ReasonMaxDeliveries)
	}
	if s := relStats(t, q); s.Pending != 0 || s.Delayed != 0 || s.Length != 0 {
		t.Errorf("after dead-lettering: %+v, want the job gone from stream, pending list and delayed set", s)
	}

	// Fix the "bug" and requeue: the job runs again as a fresh job.
	poisoned.Store(false)
	newIDs, err := q.DeadLetters().Requeue(ctx, dl.ID)
	if err != nil || len(newIDs) != 1 || newIDs[0] == "" {
		t.Fatalf("Requeue(%s) = %v, %v", dl.ID, newIDs, err)
	}
	var m *streamq.Message
	select {
	case m = <-requeued:
	case <-time.After(relWait):
		t.Fatal("the requeued job did not run")
	}
	if string(m.Payload) != "poison" || m.Headers["tenant"] != "acme" || m.Attempt != 1 || m.EntryID != newIDs[0] || m.ID != dl.JobID {
		t.Errorf("requeued job: payload=%q headers=%v attempts=%d entry %s id %s; want the same job, attempt 1, entry %s, id %s",
			m.Payload, m.Headers, m.Attempt, m.EntryID, m.ID, newIDs[0], dl.JobID)
	}
	redistest.WaitFor(t, relWait, "the requeued job acknowledged", func() bool { return c.Stats().Processed == 1 })
	relSettled(t, q, 0, relWait)
	if n, err := q.DeadLetters().Len(ctx); err != nil || n != 0 {
		t.Errorf("dead letters after requeue: %d, %v; want 0", n, err)
	}
	run.stop()
}

// TestReliability_LongJobKeepsItsClaim: a job that runs three times
// MinIdle keeps its claim (refreshed every MinIdle/4): the other consumer
// never takes it over. A MinIdle shorter than a second made the test fail
// on a busy machine, where a refresh can be late by a few hundred ms.
func TestReliability_LongJobKeepsItsClaim(t *testing.T) {
	t.Parallel()
	const (
		minIdle = time.Second
		work    = 3 * time.Second
	)
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)

	var calls atomic.Int64
	finished := make(chan error, 2)
	h := func(ctx context.Context, m *streamq.Message) error {
		calls.Add(1)
		timer := time.NewTimer(work) // simulated long work
		defer timer.Stop()
		select {
		case <-timer.C:
			finished <- nil
			return nil
		case <-ctx.Done():
			err := fmt.Errorf("long job cancelled: %w", context.Cause(ctx))
			finished <- err
			return err
		}
	}
	cfg := streamq.ConsumerConfig{MinIdle: minIdle, Concurrency: 2}
	a, b := relConsumer(t, q, h, cfg), relConsumer(t, q, h, cfg)
	ra, rb := relRun(t, a), relRun(t, b)
	start := time.Now()
	enqueueAll(t, p, []string{"long"})

	select {
	case err := <-finished:
		if err != nil {
			t.Fatalf("the long job did not finish: %v", err)
		}
	case <-time.After(work + relWait):
		t.Fatal("the long job did not finish")
	}
	redistest.WaitFor(t, relWait, "the long job acknowledged", func() bool {
		return a.Stats().Processed+b.Stats().Processed == 1
	})
	relSettled(t, q, 0, relWait)
	ra.stop()
	rb.stop()
	if n := calls.Load(); n != 1 {
		t.Errorf("a %s job with MinIdle %s ran %d times, want exactly once", work, minIdle, n)
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.Reclaimed+sb.Reclaimed != 0 || sa.ClaimsLost+sb.ClaimsLost != 0 {
		t.Errorf("stats %+v / %+v: the running job was taken over", sa, sb)
	}
	t.Logf("long job of %s handled once in %s with MinIdle %s", work, time.Since(start).Round(time.Millisecond), minIdle)
}

func TestReliability_MalformedEntriesDeadLettered(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()

	cnt := newRelCounter()
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		cnt.add(m.Payload)
		return nil
	}, streamq.ConsumerConfig{Concurrency: 4})

	bad := []struct {
		name   string
		values []any
		field  string // a raw field to find unchanged in the dead letter
		errHas string // part of the dead letter's error
	}{
		{name: "missing v", values: []any{"payload", "bad-1"}, field: "payload", errHas: `"v"`},
		{name: "bad headers JSON", values: []any{"v", "1", "payload", "bad-2", "headers", "{not json"}, field: "headers", errHas: `"headers"`},
		{name: "unknown version", values: []any{"v", "99", "payload", "bad-3"}, field: "v", errHas: "version"},
		{name: "non-numeric attempt", values: []any{"v", "1", "payload", "bad-4", "attempt", "three"}, field: "attempt", errHas: `"attempt"`},
		{name: "missing payload", values: []any{"v", "1", "enq", "1"}, field: "v", errHas: `"payload"`},
	}
	// Good and bad entries interleaved, written before the consumer starts
	// and while it runs.
	var good []string
	badIDs := map[string]int{} // stream entry ID -> index in bad
	addBad := func(i int) {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: core.Of(q).Keys.Stream, Values: bad[i].values}).Result()
		if err != nil {
			t.Fatal(err)
		}
		badIDs[id] = i
	}
	for i := range bad {
		if i == 2 {
			relRun(t, c)
		}
		good = append(good, fmt.Sprintf("good-%d", i))
		enqueueAll(t, p, good[len(good)-1:])
		addBad(i)
	}
	redistest.WaitFor(t, relWait, "every malformed entry dead-lettered", func() bool {
		return c.Stats().DeadLettered == int64(len(bad))
	})
	// The consumer keeps running: a good job after the bad ones is handled.
	good = append(good, "good-last")
	enqueueAll(t, p, good[len(good)-1:])
	redistest.WaitFor(t, relWait, "the good jobs handled", func() bool { return cnt.total.Load() >= int64(len(good)) })
	relSettled(t, q, int64(len(bad)), relWait)
	cnt.exactlyOnce(t, good)

	dls := allDeadLetters(t, q)
	if len(dls) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dls), len(bad))
	}
	for _, dl := range dls {
		i, ok := badIDs[dl.OriginalID]
		if !ok {
			t.Errorf("dead letter %s for entry %s, which is not one of the malformed ones", dl.ID, dl.OriginalID)
			continue
		}
		b := bad[i]
		if dl.Reason != streamq.ReasonMalformed {
			t.Errorf("%s: reason %q, want %q", b.name, dl.Reason, streamq.ReasonMalformed)
		}
		if !strings.Contains(dl.Error, b.errHas) {
			t.Errorf("%s: error %q does not name %s", b.name, dl.Error, b.errHas)
		}
		for k := 0; k < len(b.values); k += 2 {
			if got := dl.Fields[b.values[k].(string)]; got != b.values[k+1] {
				t.Errorf("%s: dead letter field %s = %q, want the raw %q", b.name, b.values[k], got, b.values[k+1])
			}
		}
		delete(badIDs, dl.OriginalID)
	}
	if s := c.Stats(); s.Processed != int64(len(good)) || s.Failed != 0 {
		t.Errorf("stats %+v: want %d processed and no handler failure for malformed entries", s, len(good))
	}
}

func TestReliability_ShutdownDuringRetryWaitThenRestart(t *testing.T) {
	t.Parallel()
	const retryDelay = 700 * time.Millisecond
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)

	failedAt := make(chan time.Time, 1)
	first := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		failedAt <- time.Now()
		return errors.New("downstream unavailable")
	}, streamq.ConsumerConfig{Backoff: func(int) time.Duration { return retryDelay }})
	run1 := relRun(t, first)
	enqueueAll(t, p, []string{"retry-me"})
	redistest.WaitFor(t, relWait, "the retry scheduled", func() bool { return first.Stats().Retried == 1 })
	run1.stop() // shut down while the job waits for its retry
	failed := <-failedAt

	s := relStats(t, q)
	if s.Delayed != 1 || s.Pending != 0 || s.DeadLetters != 0 {
		t.Fatalf("after the shutdown: %+v, want the job waiting in the delayed set", s)
	}

	got := make(chan *streamq.Message, 2)
	second := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		got <- m
		return nil
	}, streamq.ConsumerConfig{})
	run2 := relRun(t, second)
	var m *streamq.Message
	select {
	case m = <-got:
	case <-time.After(retryDelay + relWait):
		t.Fatal("the retried job did not run after the restart")
	}
	ranAt := time.Now()
	if ranAt.Before(failed.Add(retryDelay - time.Millisecond)) {
		t.Errorf("the retry ran %s after the failure, before its delay of %s", ranAt.Sub(failed), retryDelay)
	}
	if string(m.Payload) != "retry-me" || m.Attempt != 2 || m.LastError != "downstream unavailable" {
		t.Errorf("retried job: payload=%q attempt=%d last error=%q", m.Payload, m.Attempt, m.LastError)
	}
	redistest.WaitFor(t, relWait, "the retried job acknowledged", func() bool { return second.Stats().Processed == 1 })
	relSettled(t, q, 0, relWait)
	run2.stop()
	if len(got) != 0 {
		t.Errorf("the job ran more than once after the restart")
	}
}

func TestReliability_SafeTrimming(t *testing.T) {
	t.Parallel()
	const (
		capLen = 1000
		offer  = 3 * capLen
	)
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, &streamq.QueueConfig{MaxLen: capLen})
	ctx := context.Background()

	// No consumer runs: nothing is acknowledged, so nothing may be trimmed
	// and the jobs beyond the cap are refused.
	var accepted []string
	refused := 0
	for i := range offer {
		payload := strconv.Itoa(i)
		_, err := p.Enqueue(ctx, []byte(payload))
		switch {
		case err == nil:
			accepted = append(accepted, payload)
		case errors.Is(err, streamq.ErrQueueFull):
			refused++
		default:
			t.Fatalf("Enqueue %d: %v", i, err)
		}
	}
	t.Logf("without consumers: %d accepted, %d refused with ErrQueueFull (cap %d)", len(accepted), refused, capLen)
	if len(accepted)+refused != offer {
		t.Fatalf("accepted %d + refused %d != %d offered", len(accepted), refused, offer)
	}
	if len(accepted) != capLen {
		t.Errorf("accepted %d jobs with nothing acknowledged, want exactly MaxLen = %d", len(accepted), capLen)
	}
	if n, err := rdb.XLen(ctx, core.Of(q).Keys.Stream).Result(); err != nil || n != int64(len(accepted)) {
		t.Fatalf("stream length %d, %v; want every accepted job (%d) still there", n, err, len(accepted))
	}

	cnt := newRelCounter()
	h := func(ctx context.Context, m *streamq.Message) error {
		cnt.add(m.Payload)
		return nil
	}
	cs := []*streamq.Consumer{
		relConsumer(t, q, h, streamq.ConsumerConfig{Concurrency: 8}),
		relConsumer(t, q, h, streamq.ConsumerConfig{Concurrency: 8}),
	}
	for _, c := range cs {
		relRun(t, c)
	}
	redistest.WaitFor(t, 30*time.Second, "the accepted jobs handled", func() bool { return cnt.total.Load() >= int64(len(accepted)) })
	relSettled(t, q, 0, relWait)
	cnt.exactlyOnce(t, accepted)

	// With consumers acknowledging, 3x the cap fits: acknowledged history is
	// trimmed to make room. Rounds of half the cap, each offered once the
	// previous one is acknowledged, so a slow machine cannot fill the queue.
	var second []string
	maxLen := int64(0)
	for round := 0; round < offer/(capLen/2); round++ {
		for k := range capLen / 2 {
			payload := strconv.Itoa(offer + round*capLen/2 + k)
			if _, err := p.Enqueue(ctx, []byte(payload)); err != nil {
				t.Fatalf("Enqueue with consumers running, round %d: %v", round, err)
			}
			second = append(second, payload)
		}
		n, err := rdb.XLen(ctx, core.Of(q).Keys.Stream).Result()
		if err != nil {
			t.Fatal(err)
		}
		maxLen = max(maxLen, n)
		relSettled(t, q, 0, 30*time.Second)
	}
	cnt.exactlyOnce(t, append(accepted, second...))
	if maxLen > capLen {
		t.Errorf("stream grew to %d entries, cap %d", maxLen, capLen)
	}
	for _, c := range cs {
		if s := c.Stats(); s.Deleted != 0 {
			t.Errorf("consumer %s found %d pending entries deleted by trimming", c.Name(), s.Deleted)
		}
	}
	t.Logf("with consumers: %d accepted, stream length peaked at %d (cap %d)", len(second), maxLen, capLen)
}

// TestReliability_CapWithLongRunningJob: one job that stays pending for a
// long time must not make the queue refuse work once acknowledged history
// behind it fills the cap. History that MINID trimming cannot reach is
// deleted entry by entry, so the stream stays near its cap, and the long
// job's entry survives.
func TestReliability_CapWithLongRunningJob(t *testing.T) {
	t.Parallel()
	const (
		capLen = 200
		rounds = 10 // of capLen/2 jobs: 5x the cap behind the long job
	)
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, &streamq.QueueConfig{MaxLen: capLen})
	ctx := context.Background()

	release := make(chan struct{})
	longStarted := make(chan string, 1)
	cnt := newRelCounter()
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		if string(m.Payload) == "long" {
			longStarted <- m.EntryID
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		cnt.add(m.Payload)
		return nil
	}, streamq.ConsumerConfig{Concurrency: 8, MinIdle: time.Minute})
	run := relRun(t, c)
	enqueueAll(t, p, []string{"long"})
	var longID string
	select {
	case longID = <-longStarted:
	case <-time.After(relWait):
		t.Fatal("the long job did not start")
	}

	var want []string
	maxLen := int64(0)
	for round := range rounds {
		payloads := numbers(round*capLen/2, capLen/2)
		for _, pl := range payloads {
			if _, err := p.Enqueue(ctx, []byte(pl)); err != nil {
				t.Fatalf("round %d: Enqueue %s while one old job is pending: %v", round, pl, err)
			}
		}
		want = append(want, payloads...)
		redistest.WaitFor(t, relWait, fmt.Sprintf("round %d handled", round), func() bool {
			return cnt.total.Load() >= int64(len(want))
		})
		n, err := rdb.XLen(ctx, core.Of(q).Keys.Stream).Result()
		if err != nil {
			t.Fatal(err)
		}
		maxLen = max(maxLen, n)
	}
	if maxLen > capLen+1 {
		t.Errorf("stream grew to %d entries with cap %d", maxLen, capLen)
	}
	if e, err := rdb.XRange(ctx, core.Of(q).Keys.Stream, longID, longID).Result(); err != nil || len(e) != 1 {
		t.Fatalf("the long job's entry %s: %v, %v; want it kept while pending", longID, e, err)
	}
	close(release)
	relSettled(t, q, 0, relWait)
	run.stop()
	cnt.exactlyOnce(t, append(want, "long"))
	t.Logf("%d jobs behind a pending one, cap %d: stream length peaked at %d", len(want), capLen, maxLen)
}

func TestReliability_ReaperCountsDeletedEntries(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()

	ids := enqueueAll(t, p, []string{"a", "b", "c"})
	// A consumer that reads the jobs and dies without acknowledging them.
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: q.Group(), Consumer: "dead-worker", Streams: []string{core.Of(q).Keys.Stream, ">"}, Count: 3,
	}).Err(); err != nil {
		t.Fatal(err)
	}
	// Someone deletes one of them while it is pending.
	if n, err := rdb.XDel(ctx, core.Of(q).Keys.Stream, ids[1]).Result(); err != nil || n != 1 {
		t.Fatalf("XDEL: %d, %v", n, err)
	}

	cnt := newRelCounter()
	events := &relEvents{}
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		cnt.add(m.Payload)
		return nil
	}, streamq.ConsumerConfig{MinIdle: 50 * time.Millisecond, OnEvent: events.on})
	run := relRun(t, c)
	redistest.WaitFor(t, relWait, "the deleted entry reported", func() bool { return c.Stats().Deleted == 1 })
	redistest.WaitFor(t, relWait, "the other jobs taken over and handled", func() bool { return cnt.total.Load() >= 2 })
	relSettled(t, q, 0, relWait)
	run.stop()
	cnt.exactlyOnce(t, []string{"a", "c"})
	s := c.Stats()
	if s.Deleted != 1 || s.Reclaimed != 2 {
		t.Errorf("stats %+v, want 1 deleted and 2 reclaimed", s)
	}
	if ev := events.of(streamq.EventDeleted); len(ev) != 1 || ev[0].ID != ids[1] {
		t.Errorf("deleted events %+v, want one for %s", ev, ids[1])
	}
}

func TestReliability_PermanentErrorDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)

	var calls atomic.Int64
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		calls.Add(1)
		return streamq.Permanent(errors.New("invoice 42 does not exist"))
	}, streamq.ConsumerConfig{MaxDeliveries: 5})
	run := relRun(t, c)
	enqueueAll(t, p, []string{"invoice-42"})
	redistest.WaitFor(t, relWait, "the job dead-lettered", func() bool { return c.Stats().DeadLettered == 1 })
	relSettled(t, q, 1, relWait)
	run.stop()
	dls := allDeadLetters(t, q)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	dl := dls[0]
	if dl.Reason != streamq.ReasonPermanent || dl.Attempts != 1 || !strings.Contains(dl.Error, "invoice 42 does not exist") {
		t.Errorf("dead letter reason=%q attempts=%d error=%q; want %q after 1 attempt with the handler's error",
			dl.Reason, dl.Attempts, dl.Error, streamq.ReasonPermanent)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times for a permanent error, want 1", n)
	}
	if s := c.Stats(); s.Retried != 0 {
		t.Errorf("a permanent error was retried %d times", s.Retried)
	}
}

func TestReliability_RetryAfterHonoured(t *testing.T) {
	t.Parallel()
	const retryAfter = 600 * time.Millisecond
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()

	type call struct {
		at time.Time
		m  *streamq.Message
	}
	calls := make(chan call, 4)
	var n atomic.Int64
	events := &relEvents{}
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		calls <- call{time.Now(), m}
		if n.Add(1) == 1 {
			return streamq.RetryAfter(retryAfter, errors.New("429 too many requests"))
		}
		return nil
	}, streamq.ConsumerConfig{
		// The consumer's own backoff would wait an hour: only RetryAfter
		// lets the job run again within the test.
		Backoff: func(int) time.Duration { return time.Hour },
		OnEvent: events.on,
	})
	run := relRun(t, c)
	enqueueAll(t, p, []string{"rate-limited"})

	var first call
	select {
	case first = <-calls:
	case <-time.After(relWait):
		t.Fatal("the job did not run")
	}
	redistest.WaitFor(t, relWait, "the retry scheduled", func() bool { return c.Stats().Retried == 1 })
	// The job waits in the delayed set, due RetryAfter after the failure.
	due, err := rdb.ZRangeWithScores(ctx, core.Of(q).Keys.Delayed, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(due) == 1 {
		dueAt := time.UnixMilli(int64(due[0].Score))
		if d := dueAt.Sub(first.at); d < retryAfter-time.Millisecond || d > retryAfter+relWait {
			t.Errorf("retry due %s after the failure, want %s", d, retryAfter)
		}
	} else if len(calls) == 0 {
		t.Errorf("delayed set holds %d jobs while the retry waits, want 1", len(due))
	}
	if ev := events.of(streamq.EventRetried); len(ev) != 1 || ev[0].Delay != retryAfter {
		t.Errorf("retry events %+v, want one with delay %s", ev, retryAfter)
	}

	var second call
	select {
	case second = <-calls:
	case <-time.After(retryAfter + relWait):
		t.Fatal("the job was not retried")
	}
	if d := second.at.Sub(first.at); d < retryAfter {
		t.Errorf("retried %s after the failure, before RetryAfter's %s", d, retryAfter)
	}
	if second.m.Attempt != 2 || !strings.Contains(second.m.LastError, "429 too many requests") {
		t.Errorf("retried job attempt=%d last error=%q", second.m.Attempt, second.m.LastError)
	}
	redistest.WaitFor(t, relWait, "the retry acknowledged", func() bool { return c.Stats().Processed == 1 })
	relSettled(t, q, 0, relWait)
	run.stop()
	t.Logf("RetryAfter(%s): retried after %s", retryAfter, second.at.Sub(first.at).Round(time.Millisecond))
}

// TestReliability_PostponeIsNotAnAttempt: a job postponed more often than
// MaxDeliveries allows attempts is neither charged nor dead-lettered, and
// runs to completion once it stops postponing.
func TestReliability_PostponeIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	const postpones = 5
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)

	var n atomic.Int64
	last := make(chan *streamq.Message, 1)
	events := &relEvents{}
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		if n.Add(1) <= postpones {
			return streamq.Postpone(time.Millisecond, errors.New("rate limited"))
		}
		last <- m
		return nil
	}, streamq.ConsumerConfig{MaxDeliveries: 2, OnEvent: events.on})
	run := relRun(t, c)
	enqueueAll(t, p, []string{"throttled"})

	var m *streamq.Message
	select {
	case m = <-last:
	case <-time.After(relWait):
		t.Fatalf("the job did not complete; ran %d times, stats %+v", n.Load(), c.Stats())
	}
	if m.Attempt != 1 || m.LastError != "" || !m.FirstFailedAt.IsZero() {
		t.Errorf("after %d postpones: attempt=%d last error=%q first failed=%v; want an uncharged job", postpones, m.Attempt, m.LastError, m.FirstFailedAt)
	}
	redistest.WaitFor(t, relWait, "the job acknowledged", func() bool { return c.Stats().Processed == 1 })
	relSettled(t, q, 0, relWait)
	run.stop()
	st := c.Stats()
	if st.Postponed != postpones || st.Failed != 0 || st.Retried != 0 || st.DeadLettered != 0 {
		t.Errorf("stats %+v, want %d postponed and no failure, retry or dead letter", st, postpones)
	}
	if ev := events.of(streamq.EventPostponed); len(ev) != postpones || ev[0].Delay != time.Millisecond {
		t.Errorf("%d postpone events (%+v), want %d with delay 1ms", len(ev), ev, postpones)
	}
}

func TestReliability_PanicRetriedNotAcked(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()

	var calls atomic.Int64
	release := make(chan struct{})
	retried := make(chan *streamq.Message, 1)
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		if calls.Add(1) == 1 {
			panic(fmt.Sprintf("nil map in job %s", m.Payload))
		}
		retried <- m
		<-release
		return nil
	}, streamq.ConsumerConfig{})
	run := relRun(t, c)
	ids := enqueueAll(t, p, []string{"boom"})
	redistest.WaitFor(t, relWait, "the panic counted as a failure and retried", func() bool {
		s := c.Stats()
		return s.Failed == 1 && s.Retried == 1
	})
	if s := c.Stats(); s.Processed != 0 {
		t.Fatalf("stats %+v: the panicking attempt was acknowledged", s)
	}
	var m *streamq.Message
	select {
	case m = <-retried:
	case <-time.After(relWait):
		t.Fatal("the job was not retried after the panic")
	}
	// Still unacknowledged while the retry runs.
	if pend, err := rdb.XPending(ctx, core.Of(q).Keys.Stream, q.Group()).Result(); err != nil || pend.Count != 1 {
		t.Errorf("pending while the retry runs: %+v, %v; want 1", pend, err)
	}
	if m.ID != ids[0] || m.EntryID == ids[0] || m.Attempt != 2 || !strings.Contains(m.LastError, "panic: nil map in job boom") {
		t.Errorf("retried job id=%s entry=%s attempt=%d last error=%q; want the job's ID, a new entry, attempt 2, the panic as last error", m.ID, m.EntryID, m.Attempt, m.LastError)
	}
	close(release)
	redistest.WaitFor(t, relWait, "the retry acknowledged", func() bool { return c.Stats().Processed == 1 })
	relSettled(t, q, 0, relWait)
	run.stop()
}

func TestReliability_GracefulShutdownWithJobsInFlight(t *testing.T) {
	t.Parallel()
	const (
		shutdownTimeout = 200 * time.Millisecond
		ignoreFor       = 300 * time.Millisecond // how long stubborn jobs ignore the cancel
	)
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)

	quick, stubborn := []string{"quick-0", "quick-1", "quick-2"}, []string{"stubborn-0", "stubborn-1", "stubborn-2"}
	var (
		started, returned atomic.Int64
		causes            = make(chan error, len(stubborn))
		shutdown          = make(chan struct{}) // closed once Run's context is cancelled
	)
	cnt := newRelCounter()
	a := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		started.Add(1)
		defer returned.Add(1)
		<-shutdown
		if strings.HasPrefix(string(m.Payload), "quick") {
			cnt.add(m.Payload) // finishes within the drain window
			return nil
		}
		<-ctx.Done() // cancelled when ShutdownTimeout runs out
		causes <- context.Cause(ctx)
		timer := time.NewTimer(ignoreFor) // clean-up work that ignores the cancel
		defer timer.Stop()
		<-timer.C
		return fmt.Errorf("gave up: %w", context.Cause(ctx))
	}, streamq.ConsumerConfig{Concurrency: 8, ShutdownTimeout: shutdownTimeout, MinIdle: time.Second})
	runA := relRun(t, a)
	enqueueAll(t, p, append(slices.Clone(quick), stubborn...))
	redistest.WaitFor(t, relWait, "all six jobs running", func() bool { return started.Load() == 6 })

	begin := time.Now()
	runA.Cancel()
	close(shutdown)
	select {
	case <-runA.done:
	case <-time.After(relRunStop):
		t.Fatal("Run did not return")
	}
	took := time.Since(begin)
	runA.stop()
	if n := returned.Load(); n != 6 {
		t.Fatalf("Run returned while %d handlers were still running", 6-n)
	}
	if took < shutdownTimeout+ignoreFor {
		t.Errorf("Run returned after %s, before the stubborn handlers could have returned", took)
	}
	for range stubborn {
		if err := <-causes; !errors.Is(err, streamq.ErrShutdown) {
			t.Errorf("stubborn job cancelled with cause %v, want ErrShutdown", err)
		}
	}
	if s := a.Stats(); s.Processed != int64(len(quick)) {
		t.Errorf("first consumer: %+v, want the %d quick jobs acknowledged", s, len(quick))
	}
	// Nothing acknowledged that did not finish: the unfinished jobs wait,
	// either still pending or handed back into the stream (their handlers
	// have returned, so they cannot run twice).
	if s := relStats(t, q); s.Pending+s.Delayed+relUndelivered(q) != int64(len(stubborn)) || s.DeadLetters != 0 {
		t.Fatalf("after shutdown: %+v, want the %d unfinished jobs waiting", s, len(stubborn))
	}

	attempts := make(chan int, 8)
	b := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		attempts <- m.Attempt
		cnt.add(m.Payload)
		return nil
	}, streamq.ConsumerConfig{MinIdle: time.Second})
	runB := relRun(t, b)
	redistest.WaitFor(t, relWait, "the unfinished jobs taken over", func() bool { return b.Stats().Processed == int64(len(stubborn)) })
	relSettled(t, q, 0, relWait)
	runB.stop()
	cnt.exactlyOnce(t, append(quick, stubborn...))
	close(attempts)
	for n := range attempts {
		if n != 1 {
			t.Errorf("a job cut short by the shutdown was charged: attempt %d on the second consumer, want 1", n)
		}
	}
}

// TestReliability_RedisRestartWithoutPersistence: Redis restarts empty (no
// persistence), so the stream and the consumer group are gone. The running
// consumer must notice NOGROUP, recreate the group and handle the jobs
// enqueued after the restart, without Run returning an error.
func TestReliability_RedisRestartWithoutPersistence(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()

	cnt := newRelCounter()
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		cnt.add(m.Payload)
		return nil
	}, streamq.ConsumerConfig{Concurrency: 4, MinIdle: time.Second})
	run := relRun(t, c)
	before := numbers(0, 50)
	enqueueAll(t, p, before)
	redistest.WaitFor(t, relWait, "the jobs before the restart handled", func() bool { return cnt.total.Load() == int64(len(before)) })

	srv.Restart()
	// The consumer may have made the stream again already (its group is
	// gone with it), empty: the entries from before are what must be lost.
	if n, err := rdb.XLen(ctx, core.Of(q).Keys.Stream).Result(); err != nil || n != 0 {
		t.Fatalf("after a restart without persistence the stream holds %d entries (%v); the test needs them gone", n, err)
	}
	// The producer may briefly see connection errors while the client
	// reconnects; an error means the job was not enqueued, so retry it.
	after := numbers(1000, 50)
	for _, pl := range after {
		redistest.WaitFor(t, relWait, "enqueue after the restart", func() bool {
			_, err := p.Enqueue(ctx, []byte(pl))
			return err == nil
		})
	}
	redistest.WaitFor(t, relWait, "the jobs after the restart handled", func() bool {
		return cnt.total.Load() == int64(len(before)+len(after))
	})
	relSettled(t, q, 0, relWait)
	run.stop()
	cnt.exactlyOnce(t, append(before, after...))
}

// TestReliability_PruneDepartedConsumers: consumers left behind by processes
// that are gone are deleted from the group once idle for PruneIdle, but a
// departed consumer that still owns a job is kept until the reaper has taken
// the job over, and the job is handled exactly once.
func TestReliability_PruneDepartedConsumers(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()

	// "idle" never read anything; "holder" read one job and died with it.
	if err := rdb.XGroupCreateConsumer(ctx, core.Of(q).Keys.Stream, q.Group(), "idle").Err(); err != nil {
		t.Fatal(err)
	}
	enqueueAll(t, p, []string{"held"})
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: q.Group(), Consumer: "holder", Streams: []string{core.Of(q).Keys.Stream, ">"}, Count: 1,
	}).Err(); err != nil {
		t.Fatal(err)
	}

	consumers := func() map[string]int64 {
		cs, err := rdb.XInfoConsumers(ctx, core.Of(q).Keys.Stream, q.Group()).Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, c := range cs {
			out[c.Name] = c.Pending
		}
		return out
	}
	cnt := newRelCounter()
	handled := make(chan map[string]int64, 1)
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		cnt.add(m.Payload)
		handled <- consumers() // while the job runs here, its entry is ours
		return nil
	}, streamq.ConsumerConfig{Name: "live", MinIdle: time.Second, ReclaimInterval: 100 * time.Millisecond, PruneIdle: 300 * time.Millisecond})
	sig := &testsignal.Signals{LoopDone: testsignal.New[string]()}
	run := relRunWith(t, c, sig)

	var during map[string]int64
	select {
	case during = <-handled:
	case <-time.After(relWait):
		t.Fatal("the held job was not taken over")
	}
	if _, ok := during["live"]; !ok {
		t.Errorf("consumers while the job ran: %v; want the live one", during)
	}
	// Look after each tick of the loop that prunes, not every few ms.
	sig.LoopDone.WaitFor(t, relWait, "the departed consumers pruned", func(loop string) bool {
		if loop != "prune consumers" {
			return false
		}
		cs := consumers()
		_, idle := cs["idle"]
		_, holder := cs["holder"]
		return !idle && !holder
	})
	relSettled(t, q, 0, relWait)
	if cs := consumers(); len(cs) != 1 || cs["live"] != 0 {
		t.Errorf("consumers after pruning: %v; want only the live one, owning nothing", cs)
	}
	run.stop()
	cnt.exactlyOnce(t, []string{"held"})
}

// TestReliability_JobTimeout: a handler that outlives JobTimeout sees its
// deadline, then its context ends with DeadlineExceeded and cause
// ErrJobTimeout; the attempt counts as failed and the job is retried.
func TestReliability_JobTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 150 * time.Millisecond
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	type seen struct {
		deadline   time.Duration // deadline minus the handler's start
		hasDL      bool
		err, cause error
	}
	first := make(chan seen, 1)
	second := make(chan *streamq.Message, 1)
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		if m.Attempt > 1 {
			second <- m
			return nil
		}
		start := time.Now()
		dl, ok := ctx.Deadline()
		select {
		case <-ctx.Done():
		case <-time.After(relWait):
		}
		first <- seen{dl.Sub(start), ok, ctx.Err(), context.Cause(ctx)}
		return ctx.Err()
	}, streamq.ConsumerConfig{JobTimeout: timeout})
	run := relRun(t, c)
	enqueueAll(t, p, []string{"slow"})
	var s seen
	select {
	case s = <-first:
	case <-time.After(relWait):
		t.Fatal("the handler did not return after its timeout")
	}
	if !s.hasDL || s.deadline > timeout || s.deadline < timeout-50*time.Millisecond {
		t.Errorf("deadline %s after the start (present %v), want about %s", s.deadline, s.hasDL, timeout)
	}
	if !errors.Is(s.err, context.DeadlineExceeded) || !errors.Is(s.cause, streamq.ErrJobTimeout) {
		t.Errorf("ctx.Err() = %v, cause %v; want DeadlineExceeded and ErrJobTimeout", s.err, s.cause)
	}
	select {
	case m := <-second:
		if !strings.Contains(m.LastError, "deadline exceeded") {
			t.Errorf("retried job's last error %q, want the timeout", m.LastError)
		}
	case <-time.After(relWait):
		t.Fatal("the timed-out job was not retried")
	}
	relSettled(t, q, 0, relWait)
	run.stop()
	if st := c.Stats(); st.Failed != 1 || st.Retried != 1 || st.Processed != 1 {
		t.Errorf("stats %+v, want 1 failed, 1 retried, 1 processed", st)
	}
}

// TestReliability_LastAttemptAloneSurvivesShutdown: a job taken over after
// crashes at its last allowed attempt waits to run alone; a shutdown while it
// waits hands it back without charge, and the copy still makes that last
// attempt alone after the restart (it carries the "crashed" mark, since
// Redis's delivery counter restarts at 1 for the copy).
func TestReliability_LastAttemptAloneSurvivesShutdown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const maxDeliveries = 3
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)

	// Two runs of the job died with their workers: delivered to dead-1,
	// then taken over by dead-2, neither of which acknowledges it.
	crashed := enqueueAll(t, p, []string{"crashed"})[0]
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.Group(), Consumer: "dead-1", Streams: []string{core.Of(q).Keys.Stream, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XClaim(ctx, &redis.XClaimArgs{Stream: core.Of(q).Keys.Stream, Group: q.Group(), Consumer: "dead-2", Messages: []string{crashed}}).Err(); err != nil {
		t.Fatal(err)
	}
	enqueueAll(t, p, []string{"long"})

	// The first consumer runs "long" and takes "crashed" over at its third
	// delivery, its last attempt, which must wait for "long" to finish.
	longStarted, releaseLong := make(chan struct{}), make(chan struct{})
	handedBack := make(chan struct{}, 1)
	first := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		if string(m.Payload) != "long" {
			t.Errorf("first consumer ran %q; only \"long\" may run before the shutdown", m.Payload)
			return nil
		}
		close(longStarted)
		select {
		case <-releaseLong:
		case <-time.After(relWait):
			t.Error("\"long\" was not released")
		}
		return nil
	}, streamq.ConsumerConfig{
		Concurrency:     2,
		MaxDeliveries:   maxDeliveries,
		MinIdle:         time.Second, // far above the 20 ms refreshes of dead-2's claim
		ReclaimInterval: 50 * time.Millisecond,
		OnEvent: func(_ context.Context, e streamq.Event) {
			if e.Kind == streamq.EventRetried && e.ID == crashed {
				handedBack <- struct{}{}
			}
		},
	})
	// "long" must start before the crashed job is taken over: dead-2 keeps
	// its claim fresh until then (JUSTID counts no delivery), so however
	// slow the machine, the takeover cannot come first.
	keepFresh := make(chan struct{})
	go func() {
		defer close(keepFresh)
		for range int(relWait / (20 * time.Millisecond)) {
			select {
			case <-longStarted:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_ = rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: core.Of(q).Keys.Stream, Group: q.Group(), Consumer: "dead-2", Messages: []string{crashed}}).Err()
		}
	}()
	run1 := relRun(t, first)
	select {
	case <-longStarted:
	case <-time.After(relWait):
		t.Fatal("\"long\" did not start")
	}
	<-keepFresh
	redistest.WaitFor(t, relWait, "the first consumer to take the crashed job over", func() bool {
		pe, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: core.Of(q).Keys.Stream, Group: q.Group(), Start: crashed, End: crashed, Count: 1}).Result()
		// Taken over without a charge: it waits and has not started, so its
		// count of starts stays at the two crashed ones.
		return err == nil && len(pe) == 1 && pe[0].Consumer == first.Name() && pe[0].RetryCount == maxDeliveries-1
	})
	stopped := make(chan struct{})
	go func() { defer close(stopped); run1.stop() }()
	redistest.WaitFor(t, relWait, "the shutdown to begin", func() bool { return !first.Health().Fetching })
	close(releaseLong) // the drain ends, and the waiting job is handed back
	select {
	case <-handedBack:
	case <-time.After(relWait):
		t.Fatal("the waiting job was not handed back at the shutdown")
	}
	<-stopped
	if s := relStats(t, q); relUndelivered(q) != 1 || s.Pending != 0 || s.Delayed != 0 || s.DeadLetters != 0 {
		t.Fatalf("after the shutdown: %+v, want the handed-back job waiting in the stream and nothing else", s)
	}

	// After the restart, the copy runs alone: other jobs enqueued while it
	// runs wait until it is over.
	others := numbers(1, 6)
	otherJobs := make([]streamq.Job, len(others))
	for i, o := range others {
		otherJobs[i].Payload = []byte(o)
	}
	var running atomic.Int32
	var lastRunning atomic.Bool
	seen := newRelCounter()
	var copyFields map[string]any
	var copyMsg *streamq.Message
	second := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		n := running.Add(1)
		defer running.Add(-1)
		seen.add(m.Payload)
		if string(m.Payload) != "crashed" {
			if lastRunning.Load() {
				t.Errorf("job %s started while the last attempt ran", m.Payload)
			}
			return nil
		}
		lastRunning.Store(true)
		defer lastRunning.Store(false)
		copyMsg = m
		if e, err := rdb.XRange(ctx, core.Of(q).Keys.Stream, m.EntryID, m.EntryID).Result(); err == nil && len(e) == 1 {
			copyFields = e[0].Values
		}
		if _, err := p.EnqueueBatch(ctx, otherJobs); err != nil {
			t.Errorf("enqueue while the last attempt runs: %v", err)
		}
		// Long enough for the other jobs to start if it did not run alone.
		window := time.NewTimer(300 * time.Millisecond)
		defer window.Stop()
		select {
		case <-window.C:
		case <-ctx.Done():
		}
		if n != 1 {
			t.Errorf("the last attempt started beside %d other jobs", n-1)
		}
		return nil
	}, streamq.ConsumerConfig{Concurrency: 2, MaxDeliveries: maxDeliveries})
	run2 := relRun(t, second)
	redistest.WaitFor(t, relWait, "every job handled", func() bool { return second.Stats().Processed == int64(len(others))+1 })
	relSettled(t, q, 0, relWait)
	run2.stop()
	seen.exactlyOnce(t, append(others, "crashed"))
	if copyMsg == nil || copyMsg.Attempt != maxDeliveries {
		t.Errorf("the copy: %+v, want attempt %d: after the two crashed runs, the last", copyMsg, maxDeliveries)
	}
	if copyFields["crashed"] != "1" {
		t.Errorf("the copy's fields %v lack crashed=1", copyFields)
	}
}

// TestReliability_LastAttemptsDrainAtOnce: jobs taken over after crashes at
// their last attempt run alone, one after the other, as soon as the slots
// are free, not one per blocking read (before the engine, the reaper waited
// for every slot while the read loop held one inside XREADGROUP BLOCK: 14
// such jobs took 13.3 s with Block 1 s). Here Block is 5 s, so waiting once
// for a read would take longer than all 14 runs together are allowed.
func TestReliability_LastAttemptsDrainAtOnce(t *testing.T) {
	t.Parallel()
	const (
		jobs          = 14
		maxDeliveries = 3
		block         = 5 * time.Second
	)
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()
	// Two runs of each job died with their workers: read by dead-1, then
	// taken over by dead-2, neither of which acknowledges them.
	ids := enqueueAll(t, p, numbers(0, jobs))
	stream := core.Of(q).Keys.Stream
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.Group(), Consumer: "dead-1", Streams: []string{stream, ">"}, Count: jobs}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XClaim(ctx, &redis.XClaimArgs{Stream: stream, Group: q.Group(), Consumer: "dead-2", Messages: ids}).Err(); err != nil {
		t.Fatal(err)
	}
	var running, overlap atomic.Int64
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		if running.Add(1) != 1 || m.Attempt != maxDeliveries {
			overlap.Add(1)
		}
		defer running.Add(-1)
		return nil
	}, streamq.ConsumerConfig{Concurrency: 8, MaxDeliveries: maxDeliveries, Block: block,
		MinIdle: 100 * time.Millisecond, ReclaimInterval: 50 * time.Millisecond})
	run := relRun(t, c)
	redistest.WaitFor(t, block-time.Second, "every last attempt to run, well within one Block", func() bool {
		return c.Stats().Processed == jobs
	})
	run.stop()
	if overlap.Load() != 0 {
		t.Errorf("%d runs were not alone or not the last attempt", overlap.Load())
	}
	if s := c.Stats(); s.Reclaimed != jobs || s.DeadLettered != 0 {
		t.Errorf("stats %+v, want %d reclaimed and none dead-lettered", s, jobs)
	}
}
