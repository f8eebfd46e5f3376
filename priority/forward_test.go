package priority_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/wire"
	"github.com/streamq/streamq/priority"
)

// consumerConfig is a stream consumer configuration for fast tests.
func consumerConfig() *streamq.ConsumerConfig {
	return &streamq.ConsumerConfig{
		Block:           50 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
		MinIdle:         200 * time.Millisecond,
		Backoff:         streamq.ExponentialBackoff(time.Millisecond, 10*time.Millisecond),
		Logger:          testLogger,
	}
}

// streamSettled reports whether the group has no pending and no undelivered
// entries and nothing waits in the stream's delayed set.
func streamSettled(t testing.TB, q *streamq.Queue) bool {
	t.Helper()
	s, err := q.Stats(context.Background())
	return err == nil && s.Pending == 0 && s.Lag == 0 && s.Delayed == 0
}

// readEntry delivers the next stream entry to consumer "manual" (so it is
// pending, as for a consumer that read it) and decodes it.
func readEntry(t testing.TB, e *env) *streamq.Message {
	t.Helper()
	res, err := e.rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: e.q.Group(), Consumer: "manual", Streams: []string{core.Of(e.q).Keys.Stream, ">"}, Count: 1, Block: -1,
	}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != 1 {
		t.Fatalf("XREADGROUP: %v %v", res, err)
	}
	m := res[0].Messages[0]
	j, err := wire.Decode(m.Values)
	if err != nil {
		t.Fatal(err)
	}
	msg := &streamq.Message{ID: m.ID, EntryID: m.ID, Queue: e.q.Name(), Group: e.q.Group(), Payload: j.Payload, Headers: j.Headers,
		Attempt: j.Attempt + 1, Key: j.Key, LastError: j.LastError}
	if j.EnqMillis > 0 {
		msg.EnqueuedAt = time.UnixMilli(j.EnqMillis)
	}
	if j.FirstFail > 0 {
		msg.FirstFailedAt = time.UnixMilli(j.FirstFail)
	}
	return msg
}

func TestForward_MovesJobsWithPriority(t *testing.T) {
	t.Parallel()
	e := setup(t, &priority.QueueConfig{DefaultPriority: 3})
	ctx := context.Background()
	var ids []string
	for _, j := range []struct {
		payload string
		opts    []streamq.EnqueueOption
	}{
		{"low", []streamq.EnqueueOption{priority.WithPriority(1)}},
		{"high", []streamq.EnqueueOption{priority.WithPriority(5), streamq.WithHeader("user", "ada")}},
		{"default", nil},
		{"lowest", []streamq.EnqueueOption{priority.WithPriority(priority.MinPriority)}},
	} {
		id, err := e.p.Enqueue(ctx, []byte(j.payload), j.opts...)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	c, _ := runConsumer(t, e.q, priority.Forward(e.pq), consumerConfig())
	e.waitStats(t, priority.Stats{Ready: 4})
	redistest.WaitFor(t, waitTimeout, "the stream settled", func() bool { return streamSettled(t, e.q) })
	// The forward script settles an entry inside the handler; the consumer
	// counts it once the handler has returned, a moment later.
	redistest.WaitFor(t, waitTimeout, "4 jobs counted as processed", func() bool { return c.Stats().Processed >= 4 })
	if s := c.Stats(); s.Processed != 4 || s.Failed != 0 {
		t.Errorf("consumer stats %+v, want 4 forwarded", s)
	}

	ch := make(chan *streamq.Message, 4)
	run(t, e.newWorker(t, recorder(ch), priority.WorkerConfig{Concurrency: 1}))
	want := []struct {
		payload string
		id      string
		prio    int
	}{{"high", ids[1], 5}, {"default", ids[2], 3}, {"low", ids[0], 1}, {"lowest", ids[3], priority.MinPriority}}
	for _, w := range want {
		msg := recv(t, ch, "job "+w.payload)
		p, ok := priority.Of(msg)
		if string(msg.Payload) != w.payload || msg.ID != w.id || !ok || p != w.prio || msg.Attempt != 1 || msg.EnqueuedAt.IsZero() {
			t.Errorf("got %q (ID %s, priority %d %v, attempts %d), want %q (ID %s, priority %d, attempt 1)",
				msg.Payload, msg.ID, p, ok, msg.Attempt, w.payload, w.id, w.prio)
		}
		if w.payload == "high" && msg.Headers["user"] != "ada" {
			t.Errorf("headers %v, want user=ada kept", msg.Headers)
		}
	}
}

// TestForward_Idempotent forwards the same delivered entry twice, as a retry
// after a lost reply or a consumer that took the entry over would: the job is
// in the priority set once.
func TestForward_Idempotent(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	if _, err := e.p.Enqueue(ctx, []byte("once"), priority.WithPriority(2)); err != nil {
		t.Fatal(err)
	}
	msg := readEntry(t, e)
	h := priority.Forward(e.pq)
	for i := range 3 {
		if err := h.Handle(ctx, msg); err != nil {
			t.Fatalf("forward %d: %v", i+1, err)
		}
	}
	if s := e.stats(t); s != (priority.Stats{Ready: 1}) {
		t.Errorf("priority set %+v after 3 forwards of one entry, want 1 job", s)
	}
	if s, _ := e.q.Stats(ctx); s.Pending != 0 {
		t.Errorf("%d entries pending, want the forwarded entry acknowledged", s.Pending)
	}
}

// TestForward_NotPending ignores an entry that was never delivered (or was
// acknowledged): forwarding must not resurrect it.
func TestForward_NotPending(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	id, err := e.p.Enqueue(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	msg := &streamq.Message{ID: id, Queue: e.q.Name(), Payload: []byte("x"), Headers: map[string]string{}}
	if err := priority.Forward(e.pq).Handle(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if s := e.stats(t); s != (priority.Stats{}) {
		t.Errorf("priority set %+v, want nothing forwarded for an entry that is not pending", s)
	}
}

// TestForward_RetryAfterLostReply makes the consumer believe the forward
// failed after it succeeded (a lost reply): the consumer's retry must not
// double the job.
func TestForward_RetryAfterLostReply(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	const n = 20
	for range n {
		if _, err := e.p.Enqueue(ctx, []byte("j"), priority.WithPriority(1)); err != nil {
			t.Fatal(err)
		}
	}
	var lied atomic.Int64
	lostReply := func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
			if err := next.Handle(ctx, msg); err != nil {
				return err
			}
			lied.Add(1)
			return errors.New("i/o timeout (the reply was lost)")
		})
	}
	cfg := consumerConfig()
	cfg.Middleware = []streamq.Middleware{lostReply}
	c, _ := runConsumer(t, e.q, priority.Forward(e.pq), cfg)
	redistest.WaitFor(t, waitTimeout, "every forward reported failed and the stream settled", func() bool {
		return lied.Load() == n && streamSettled(t, e.q)
	})
	if s := e.stats(t); s != (priority.Stats{Ready: n}) {
		t.Errorf("priority set %+v, want exactly %d jobs (no retry doubled one)", s, n)
	}
	if s := c.Stats(); s.Failed != n || s.Retried != 0 || s.DeadLettered != 0 {
		t.Errorf("consumer stats %+v, want %d failures and no retry moved (the entries were acknowledged by the forward)", s, n)
	}
}

func TestForward_InvalidPriorityDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	for _, v := range []string{"urgent", "2147483648"} {
		if _, err := e.p.Enqueue(ctx, []byte(v), streamq.WithHeader(priority.HeaderPriority, v)); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := runConsumer(t, e.q, priority.Forward(e.pq), consumerConfig())
	redistest.WaitFor(t, waitTimeout, "both jobs dead-lettered", func() bool { return c.Stats().DeadLettered == 2 })
	for _, dl := range deadLetters(t, e.q) {
		if dl.Reason != streamq.ReasonPermanent || !strings.Contains(dl.Error, "invalid priority") {
			t.Errorf("dead letter %q: reason %q error %q, want permanent for an invalid priority", dl.Payload, dl.Reason, dl.Error)
		}
	}
	if s := e.stats(t); s != (priority.Stats{}) {
		t.Errorf("priority set %+v, want nothing forwarded", s)
	}
}

func TestForward_WrongQueue(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	err := priority.Forward(e.pq).Handle(context.Background(), &streamq.Message{ID: "1-1", Queue: "other", Headers: map[string]string{}})
	if !errors.Is(err, priority.ErrWrongQueue) {
		t.Errorf("error %v, want ErrWrongQueue", err)
	}
	if _, ok := errors.AsType[*streamq.PermanentError](err); !ok {
		t.Errorf("error %v is not permanent", err)
	}
}

// TestForward_KeepsAttempts forwards a job that failed before in the stream:
// its attempts and last error go with it into the priority set.
func TestForward_KeepsAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	if _, err := e.p.Enqueue(ctx, []byte("x"), priority.WithPriority(1)); err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int64
	h := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		if tries.Add(1) == 1 {
			return errors.New("first try fails in the stream")
		}
		return priority.Forward(e.pq).Handle(ctx, msg)
	})
	runConsumer(t, e.q, h, consumerConfig())
	e.waitStats(t, priority.Stats{Ready: 1})
	ch := make(chan *streamq.Message, 1)
	run(t, e.newWorker(t, recorder(ch), priority.WorkerConfig{}))
	msg := recv(t, ch, "the forwarded job")
	if msg.Attempt != 2 || msg.LastError != "first try fails in the stream" || msg.FirstFailedAt.IsZero() {
		t.Errorf("message attempt %d last error %q, want the stream's failed attempt carried over", msg.Attempt, msg.LastError)
	}
}
