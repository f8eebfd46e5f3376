package streamq_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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

// Args types of the typed-job tests.
type sendEmail struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (sendEmail) Kind() string { return "email.send" }

type resizeImage struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

func (resizeImage) Kind() string { return "image.resize" }

// InsertOpts gives resize jobs a default attempt budget and a tag.
func (resizeImage) InsertOpts() []streamq.EnqueueOption {
	return []streamq.EnqueueOption{streamq.MaxAttempts(4), streamq.Tags("images")}
}

// badArgs cannot be encoded: encoding/json refuses channels.
type badArgs struct{ C chan int }

func (badArgs) Kind() string { return "bad" }

// typedSetup returns a client, a queue with a per-test key prefix, set up,
// and a producer.
func typedSetup(t *testing.T) (*redis.Client, *streamq.Queue, *streamq.Producer) {
	t.Helper()
	c, q, p, _ := ctlSetup(t)
	return c, q, p
}

// typedConsumer runs h on q until the test ends or stop is called, with
// fast retries and the given max deliveries and event hook.
func typedConsumer(t *testing.T, q *streamq.Queue, h streamq.Handler, maxDeliveries int, onEvent func(context.Context, streamq.Event)) (stop func()) {
	t.Helper()
	c, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{
		Block: 50 * time.Millisecond, MaxDeliveries: maxDeliveries, ShutdownTimeout: 5 * time.Second,
		SchedulerInterval: 10 * time.Millisecond, OnEvent: onEvent,
		Backoff: func(int) time.Duration { return 10 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "Consumer.Run", 15*time.Second, c.Run)
	return func() { _ = r.Stop() }
}

// recv returns the next value of ch, failing the test after timeout.
func recv[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
		panic("unreachable")
	}
}

// lastEntry returns the fields of the newest entry of the queue's stream.
func lastEntry(t *testing.T, c *redis.Client, q *streamq.Queue) map[string]any {
	t.Helper()
	xs, err := c.XRevRangeN(context.Background(), core.Of(q).Keys.Stream, "+", "-", 1).Result()
	if err != nil || len(xs) != 1 {
		t.Fatalf("newest entry: %v (%d entries)", err, len(xs))
	}
	return xs[0].Values
}

func TestEnqueueArgs_RoundTripSeveralKinds(t *testing.T) {
	t.Parallel()
	c, q, p := typedSetup(t)
	ctx := context.Background()

	type got struct {
		kind string
		args any
		msg  streamq.Message
	}
	out := make(chan got, 10)
	m := streamq.NewMux()
	streamq.Register(m, func(ctx context.Context, j *streamq.TypedJob[sendEmail]) error {
		out <- got{j.Kind, j.Args, *j.Message}
		return nil
	})
	streamq.Register(m, func(ctx context.Context, j *streamq.TypedJob[resizeImage]) error {
		out <- got{j.Kind, j.Args, *j.Message}
		return nil
	})
	m.RouteFunc("raw.bytes", func(ctx context.Context, msg *streamq.Message) error {
		out <- got{msg.Kind, string(msg.Payload), *msg}
		return nil
	})
	if k := m.Kinds(); !slices.Equal(k, []string{"email.send", "image.resize", "raw.bytes"}) {
		t.Fatalf("Kinds() = %v", k)
	}

	email := sendEmail{To: "a@example.com", Subject: "hi"}
	if _, err := streamq.EnqueueArgs(ctx, p, email, streamq.Tags("tenant:7")); err != nil {
		t.Fatal(err)
	}
	e := lastEntry(t, c, q)
	if e["v"] != "2" || e["kind"] != "email.send" || e["tags"] != `["tenant:7"]` || e["payload"] != `{"to":"a@example.com","subject":"hi"}` {
		t.Errorf("typed entry = %v", e)
	}
	ids, err := streamq.EnqueueArgsBatch(ctx, p, []resizeImage{{"u1", 100}, {"u2", 200}})
	if err != nil || len(ids) != 2 {
		t.Fatalf("batch: %v %v", ids, err)
	}
	e = lastEntry(t, c, q)
	if e["ma"] != "4" || e["tags"] != `["images"]` || e["kind"] != "image.resize" {
		t.Errorf("InsertOpts not applied: %v", e)
	}
	if _, err := p.Enqueue(ctx, []byte("xyz"), streamq.WithKind("raw.bytes")); err != nil {
		t.Fatal(err)
	}
	typedConsumer(t, q, m, 3, nil)

	want := map[string]any{"email.send": email, "image.resize:u1": resizeImage{"u1", 100}, "image.resize:u2": resizeImage{"u2", 200}, "raw.bytes": "xyz"}
	for range 4 {
		g := recv(t, out, 10*time.Second, "a typed job")
		key := g.kind
		if r, ok := g.args.(resizeImage); ok {
			key += ":" + r.URL
			if !slices.Equal(g.msg.Tags, []string{"images"}) {
				t.Errorf("resize tags = %v", g.msg.Tags)
			}
		}
		if w, ok := want[key]; !ok || w != g.args {
			t.Errorf("job %s: args %#v, want %#v", key, g.args, w)
		}
		if g.kind == "email.send" && !slices.Equal(g.msg.Tags, []string{"tenant:7"}) {
			t.Errorf("email tags = %v", g.msg.Tags)
		}
		delete(want, key)
	}
}

func TestEnqueueArgs_Refused(t *testing.T) {
	t.Parallel()
	c, q, p := typedSetup(t)
	ctx := context.Background()
	tests := []struct {
		name string
		do   func() error
		want string
	}{
		{"encode failure", func() error { _, err := streamq.EnqueueArgs(ctx, p, badArgs{C: make(chan int)}); return err }, "encode args"},
		{"nil args", func() error { _, err := streamq.EnqueueArgs(ctx, p, nil); return err }, "args"},
		{"other kind option", func() error {
			_, err := streamq.EnqueueArgs(ctx, p, sendEmail{}, streamq.WithKind("other"))
			return err
		}, "WithKind"},
		{"mixed kinds in a batch", func() error {
			_, err := streamq.EnqueueArgsBatch(ctx, p, []streamq.JobArgs{sendEmail{}, resizeImage{}})
			return err
		}, "one batch per kind"},
		{"invalid option", func() error { _, err := streamq.EnqueueArgs(ctx, p, sendEmail{}, streamq.MaxAttempts(0)); return err }, "MaxAttempts"},
		{"past deadline", func() error {
			_, err := p.Enqueue(ctx, []byte("x"), streamq.Deadline(time.Now().Add(-time.Minute)))
			return err
		}, "has passed"},
		{"deadline before due", func() error {
			_, err := p.Enqueue(ctx, []byte("x"), streamq.ProcessIn(time.Hour), streamq.Deadline(time.Now().Add(time.Minute)))
			return err
		}, "not after the time the job is due"},
		{"invalid job ID set by a custom option", func() error {
			_, err := p.Enqueue(ctx, []byte("x"), func(o *streamq.EnqueueOptions) error { o.JobID = "1-2"; return nil })
			return err
		}, "JobID"},
		{"custom option error", func() error {
			_, err := p.Enqueue(ctx, []byte("x"), func(*streamq.EnqueueOptions) error { return errors.New("custom says no") })
			return err
		}, "custom says no"},
	}
	for _, tt := range tests {
		err := tt.do()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one saying %q", tt.name, err, tt.want)
		}
	}
	if n, err := c.XLen(ctx, core.Of(q).Keys.Stream).Result(); err != nil || n != 0 {
		t.Errorf("stream holds %d entries after refused enqueues (%v): want none", n, err)
	}
	if n, err := c.ZCard(ctx, core.Of(q).Keys.Delayed).Result(); err != nil || n != 0 {
		t.Errorf("delayed set holds %d jobs after refused enqueues (%v): want none", n, err)
	}
}

func TestEnqueue_WireVersion(t *testing.T) {
	t.Parallel()
	c, q, p := typedSetup(t)
	ctx := context.Background()
	if _, err := p.Enqueue(ctx, []byte("plain")); err != nil {
		t.Fatal(err)
	}
	if e := lastEntry(t, c, q); e["v"] != "1" || len(e) != 3 {
		t.Errorf("plain entry = %v, want version 1 with v, payload and enq only", e)
	}
	dl := time.Now().Add(time.Hour)
	if _, err := p.Enqueue(ctx, []byte("opts"), streamq.WithKind("k"), streamq.MaxAttempts(2), streamq.Timeout(1500*time.Millisecond),
		streamq.Deadline(dl), streamq.ResultRetention(time.Minute), streamq.Tags("a", "b")); err != nil {
		t.Fatal(err)
	}
	e := lastEntry(t, c, q)
	want := map[string]any{"v": "2", "kind": "k", "ma": "2", "to": "1500", "rr": "60000", "tags": `["a","b"]`}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("field %s = %v, want %v (entry %v)", k, e[k], v, e)
		}
	}
	if e["dl"] != strings.TrimSpace(string(mustJSON(t, dl.UnixMilli()))) {
		t.Errorf("dl = %v, want %d", e["dl"], dl.UnixMilli())
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRegister_MalformedArgsDeadLettered(t *testing.T) {
	t.Parallel()
	_, q, p := typedSetup(t)
	ctx := context.Background()
	ran := make(chan struct{}, 1)
	m := streamq.NewMux()
	streamq.Register(m, func(context.Context, *streamq.TypedJob[sendEmail]) error { ran <- struct{}{}; return nil })
	id, err := p.Enqueue(ctx, []byte(`{"to": 42}`), streamq.WithKind("email.send"))
	if err != nil {
		t.Fatal(err)
	}
	dead := make(chan streamq.Event, 1)
	typedConsumer(t, q, m, 5, func(_ context.Context, e streamq.Event) {
		if e.Kind == streamq.EventDeadLettered {
			dead <- e
		}
	})
	e := recv(t, dead, 10*time.Second, "the dead letter")
	if e.Reason != streamq.ReasonMalformed || !errors.Is(e.Err, streamq.ErrMalformed) || !strings.Contains(e.Err.Error(), "cannot unmarshal number") {
		t.Errorf("dead letter: reason %q, err %v", e.Reason, e.Err)
	}
	dls, _, err := q.DeadLetters().List(ctx, "", 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters: %v %v", dls, err)
	}
	if d := dls[0]; d.Reason != streamq.ReasonMalformed || d.Attempts != 1 || d.JobID != id || !strings.Contains(d.Error, "do not decode") {
		t.Errorf("dead letter %+v", d)
	}
	select {
	case <-ran:
		t.Error("the handler ran with args that do not decode")
	default:
	}
}

// TestMux_RollingDeploy enqueues a job of a kind that no worker knows yet:
// the worker of the old version hands it back uncharged, again and again,
// until a worker that knows the kind starts and runs it, once, as its
// first attempt.
func TestMux_RollingDeploy(t *testing.T) {
	t.Parallel()
	_, q, p := typedSetup(t)
	ctx := context.Background()
	// A budget the old worker's hand-backs cannot use up before it stops,
	// however slow the machine (resizeImage's own is 4).
	id, err := streamq.EnqueueArgs(ctx, p, resizeImage{URL: "new"}, streamq.MaxAttempts(1000))
	if err != nil {
		t.Fatal(err)
	}
	old := streamq.NewMux()
	streamq.Register(old, func(context.Context, *streamq.TypedJob[sendEmail]) error { return nil })
	handBacks := make(chan streamq.Event, 100)
	stopOld := typedConsumer(t, q, old, 1000, func(_ context.Context, e streamq.Event) {
		if e.Kind == streamq.EventPostponed {
			handBacks <- e
		} else if e.Kind == streamq.EventDeadLettered {
			t.Errorf("dead-lettered during the deploy: %+v", e)
		}
	})
	for range 3 {
		e := recv(t, handBacks, 10*time.Second, "a hand-back of the unknown kind")
		if !errors.Is(e.Err, streamq.ErrUnknownKind) || e.Message.Attempt != 1 {
			t.Fatalf("hand-back: err %v, attempt %d", e.Err, e.Message.Attempt)
		}
	}
	stopOld()

	ran := make(chan *streamq.TypedJob[resizeImage], 2)
	next := streamq.NewMux()
	streamq.Register(next, func(_ context.Context, j *streamq.TypedJob[resizeImage]) error { ran <- j; return nil })
	typedConsumer(t, q, next, 1000, nil)
	j := recv(t, ran, 10*time.Second, "the job on the new worker")
	if j.Args.URL != "new" || j.Attempt != 1 || j.ID != id {
		t.Errorf("job ran with args %+v, attempt %d, job ID %s (want %s)", j.Args, j.Attempt, j.ID, id)
	}
	redistest.WaitFor(t, 5*time.Second, "the job acknowledged", func() bool {
		s, err := q.Stats(ctx)
		return err == nil && s.Pending == 0
	})
	select {
	case j := <-ran:
		t.Errorf("ran twice: %+v", j)
	default:
	}
}

func TestMux_UnknownKindDeadLetteredAfterBudget(t *testing.T) {
	t.Parallel()
	_, q, p := typedSetup(t)
	ctx := context.Background()
	if _, err := p.Enqueue(ctx, []byte("x"), streamq.WithKind("nobody.knows"), streamq.MaxAttempts(3)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handBacks := 0
	dead := make(chan streamq.Event, 1)
	typedConsumer(t, q, streamq.NewMux(), 50, func(_ context.Context, e streamq.Event) {
		switch e.Kind {
		case streamq.EventPostponed:
			mu.Lock()
			handBacks++
			mu.Unlock()
		case streamq.EventDeadLettered:
			dead <- e
		}
	})
	e := recv(t, dead, 10*time.Second, "the dead letter")
	mu.Lock()
	defer mu.Unlock()
	if e.Reason != streamq.ReasonUnknownKind || handBacks != 2 || !errors.Is(e.Err, streamq.ErrUnknownKind) {
		t.Errorf("reason %q after %d hand-backs (want 2 then the dead letter), err %v", e.Reason, handBacks, e.Err)
	}
	dls, _, err := q.DeadLetters().List(ctx, "", 10)
	if err != nil || len(dls) != 1 || dls[0].Attempts != 0 {
		t.Errorf("dead letters %+v %v: want one with 0 attempts charged", dls, err)
	}
}

// TestConsumer_Runs010Entries writes the entries of internal/wire's 0.1.0
// fixtures raw into a stream: a consumer runs them, with kind "".
func TestConsumer_Runs010Entries(t *testing.T) {
	t.Parallel()
	c, q, _ := typedSetup(t)
	ctx := context.Background()
	files, err := filepath.Glob("internal/wire/testdata/v0.1.0/*.json")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if filepath.Base(f) == "deadletter.json" || filepath.Base(f) == "unique-crashed.json" {
			continue // not a stream entry; one whose unique lock does not exist
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]string
		if err := json.Unmarshal(b, &fields); err != nil {
			t.Fatal(err)
		}
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: core.Of(q).Keys.Stream, Values: fields}).Err(); err != nil {
			t.Fatal(err)
		}
		n++
	}
	got := make(chan *streamq.Message, n)
	typedConsumer(t, q, streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error { got <- m; return nil }), 5, nil)
	for range n {
		m := recv(t, got, 10*time.Second, "a 0.1.0 entry run")
		if m.Kind != "" || m.Tags != nil || len(m.Payload) == 0 {
			t.Errorf("0.1.0 job ran as %+v", m)
		}
	}
}
