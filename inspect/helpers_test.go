package inspect_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/wire"
)

// env is one test's queue under its own key prefix.
type env struct {
	c      *redis.Client
	prefix string
	name   string
	q      *streamq.Queue
	p      *streamq.Producer
	in     *inspect.Inspector
	iq     *inspect.Queue
}

// setup returns a registered, empty stream queue and its inspector, on the
// package's Redis.
func setup(t *testing.T, opts *inspect.Options) *env {
	t.Helper()
	return setupOn(t, redistest.NewClient(t), opts)
}

// setupOn is setup on the Redis of c.
func setupOn(t *testing.T, c *redis.Client, opts *inspect.Options) *env {
	t.Helper()
	prefix := "iq-" + redistest.Name(t)
	redistest.DeleteKeysAtCleanup(t, c, prefix+":*")
	e := &env{c: c, prefix: prefix, name: "jobs"}
	var err error
	if e.q, err = streamq.NewQueue(c, e.name, &streamq.QueueConfig{KeyPrefix: prefix}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	register(t, c, prefix, e.name, "stream")
	if e.p, err = streamq.NewProducer(e.q, nil); err != nil {
		t.Fatal(err)
	}
	var o inspect.Options
	if opts != nil {
		o = *opts
	}
	o.Prefix = prefix
	if e.in, err = inspect.New(c, &o); err != nil {
		t.Fatal(err)
	}
	if e.iq, err = e.in.Queue(ctx, e.name); err != nil {
		t.Fatal(err)
	}
	return e
}

// register writes the registry entry that Queue.Setup, producers and
// consumers write once the runtime side of the inspector is merged.
func register(tb testing.TB, c redis.UniversalClient, prefix, name, kind string) {
	tb.Helper()
	if err := c.HSet(context.Background(), prefix+":queues", name, kind).Err(); err != nil {
		tb.Fatal(err)
	}
}

func (e *env) key(part string) string { return e.prefix + ":{" + e.name + "}:" + part }

func (e *env) enqueue(t *testing.T, payload string, opts ...streamq.EnqueueOption) string {
	t.Helper()
	id, err := e.p.Enqueue(context.Background(), []byte(payload), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// take delivers the next waiting entry to a consumer that never acks it:
// a running job, as the inspector sees it.
func (e *env) take(t *testing.T, consumer string) string {
	t.Helper()
	res, err := e.c.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: streamq.DefaultGroup, Consumer: consumer, Streams: []string{e.key("stream"), ">"}, Count: 1, Block: -1,
	}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != 1 {
		t.Fatalf("take: %v, %v", res, err)
	}
	return res[0].Messages[0].ID
}

// addDead writes a dead letter of a job with payload and reason (and, for
// a cancelled job, the overview's marker).
func (e *env) addDead(t *testing.T, payload, reason, errText string) string {
	t.Helper()
	job := wire.Job{Payload: []byte(payload), EnqMillis: time.Now().UnixMilli()}
	raw := map[string]any{}
	a := job.Args()
	for i := 0; i+1 < len(a); i += 2 {
		raw[a[i].(string)] = a[i+1]
	}
	d := wire.DeadLetter{Queue: e.name, ID: "1-1", Reason: reason, Error: errText, Attempts: 3, Failed: time.Now()}
	id, err := e.c.XAdd(context.Background(), &redis.XAddArgs{Stream: e.key("dead"), Values: wire.DeadLetterArgs(d, raw, nil)}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if reason == streamq.ReasonCancelled { // its marker, as the scripts that write dead letters add it
		ms, _, _ := strings.Cut(id, "-")
		score, _ := strconv.ParseFloat(ms, 64)
		if err := e.c.ZAdd(context.Background(), e.key("dead:cancelled"), redis.Z{Score: score, Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// fixture is a stream queue with jobs in every state.
type fixture struct {
	*env
	done, dead, retrying, running, delayed, cancelled string
	waiting                                           []string
}

// setupStates builds a queue with jobs in every state, with a real
// consumer for the done, dead and retrying ones.
func setupStates(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{env: setup(t, nil)}
	ctx := context.Background()
	f.done = f.enqueue(t, "done")
	f.dead = f.enqueue(t, "dead")
	f.retrying = f.enqueue(t, "retry")
	h := streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
		switch string(m.Payload) {
		case "dead":
			return streamq.Permanent(errors.New("boom"))
		case "retry":
			return streamq.RetryAfter(time.Hour, errors.New("flaky"))
		}
		return nil
	})
	cons, err := streamq.NewConsumer(f.q, h, &streamq.ConsumerConfig{Block: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "consumer", 10*time.Second, cons.Run)
	redistest.WaitFor(t, 10*time.Second, "dead and retrying jobs", func() bool {
		s, err := f.q.Stats(ctx)
		return err == nil && s.DeadLetters == 1 && s.Delayed == 1 && s.Pending == 0
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	f.running = f.enqueue(t, "running")
	if got := f.take(t, "ghost"); got != f.running {
		t.Fatalf("took %s, want %s", got, f.running)
	}
	for _, p := range []string{"alpha-1", "beta-2", "alpha-3"} {
		f.waiting = append(f.waiting, f.enqueue(t, p, streamq.WithHeader("team", strings.Split(p, "-")[0])))
	}
	f.delayed = f.enqueue(t, "later", streamq.ProcessIn(time.Hour))
	f.cancelled = f.addDead(t, "stopped", "cancelled", "context canceled")
	return f
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
