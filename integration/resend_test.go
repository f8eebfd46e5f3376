package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/faultproxy"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
	"github.com/streamq/streamq/writebehind"
)

// Re-send tests: the fault proxy lets Redis run a write script, then drops
// its reply and ends the connection; go-redis sends the script again on a
// new connection. Each test checks that the second send changed nothing
// (zero doubled writes) and that the call returned the first send's result.

// resend is a queue reached through a fault proxy, and the same queue
// reached directly for checks.
type resend struct {
	t      *testing.T
	direct *redis.Client
	proxy  *faultproxy.Proxy
	dq, q  *streamq.Queue // the queue on the direct and the proxied client
	keys   rdb.Keys
}

func newResend(t *testing.T) *resend { t.Helper(); return newResendWith(t, nil) }

// newResendWith is newResend with the proxied client's options changed by
// opt.
func newResendWith(t *testing.T, opt func(*redis.Options)) *resend {
	t.Helper()
	return newResendQueue(t, nil, opt)
}

// newResendQueue is newResendWith for a queue with config cfg.
func newResendQueue(t *testing.T, cfg *streamq.QueueConfig, opt func(*redis.Options)) *resend {
	t.Helper()
	ctx := context.Background()
	direct := redistest.NewClient(t)
	// Load the scripts, so that the first EVALSHA runs: a NOSCRIPT reply
	// dropped would test nothing.
	for name, s := range rdb.Scripts() {
		if err := s.Load(ctx, direct).Err(); err != nil {
			t.Fatalf("load script %s: %v", name, err)
		}
	}
	dq, _ := relQueue(t, direct, cfg)
	proxy, err := faultproxy.New(redistest.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	o := &redis.Options{Addr: proxy.Addr(), MaxRetries: 3}
	if opt != nil {
		opt(o)
	}
	via := redis.NewClient(o)
	t.Cleanup(func() { _ = via.Close() })
	q, err := streamq.NewQueue(via, dq.Name(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &resend{t: t, direct: direct, proxy: proxy, dq: dq, q: q, keys: core.Of(dq).Keys}
}

// drop arms the proxy to lose the next reply of script name; the returned
// func fails the test if no reply was dropped by then.
func (r *resend) drop(name string) func() {
	r.t.Helper()
	s, ok := rdb.Scripts()[name]
	if !ok {
		r.t.Fatalf("no script %q", name)
	}
	dropped := r.proxy.DropReply(faultproxy.Command("EVALSHA", s.Hash()))
	return func() {
		r.t.Helper()
		select {
		case <-dropped:
		case <-time.After(relWait):
			r.t.Fatalf("the reply of script %s was never dropped: the test did not re-send anything", name)
		}
	}
}

func (r *resend) producer() *streamq.Producer {
	r.t.Helper()
	p, err := streamq.NewProducer(r.q, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

// streamIDs returns the IDs of every entry of the stream.
func (r *resend) streamIDs(key string) []string {
	r.t.Helper()
	es, err := r.direct.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		r.t.Fatal(err)
	}
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return ids
}

func (r *resend) card(key string) int64 {
	r.t.Helper()
	n, err := r.direct.ZCard(context.Background(), key).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

func equalIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: got %d IDs %v, want %d IDs %v", what, len(got), head(got), len(want), head(want))
	}
}

func TestResend_Enqueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		opts   []streamq.EnqueueOption
		script string
	}{
		{"plain job", nil, "enqueue_plain"},
		{"job with a header", []streamq.EnqueueOption{streamq.WithHeader("k", "v")}, "enqueue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newResend(t)
			dropped := r.drop(tc.script)
			id, err := r.producer().Enqueue(context.Background(), []byte("once"), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			dropped()
			equalIDs(t, "stream after a re-sent Enqueue", r.streamIDs(r.keys.Stream), []string{id})
		})
	}
}

func TestResend_EnqueueBatch(t *testing.T) {
	t.Parallel()
	r := newResend(t)
	const n = 2*streamq.MaxBatchChunk + 500 // three calls; the reply of the first is lost
	jobs := make([]streamq.Job, n)
	for i := range jobs {
		jobs[i].Payload = fmt.Appendf(nil, "job-%d", i)
	}
	r.resendBatch(jobs)
}

// resendBatch enqueues jobs in a batch whose first call's reply is lost,
// checks that the stream holds each job once, and returns their IDs.
func (r *resend) resendBatch(jobs []streamq.Job) []string {
	r.t.Helper()
	dropped := r.drop("enqueue")
	ids, err := r.producer().EnqueueBatch(context.Background(), jobs)
	if err != nil {
		r.t.Fatal(err)
	}
	dropped()
	equalIDs(r.t, "stream after a re-sent EnqueueBatch call", r.streamIDs(r.keys.Stream), ids)
	return ids
}

// A batch whose jobs have different headers carries every job's fields
// (not one set of fields for all): a re-send of it changes nothing either.
func TestResend_EnqueueBatchOwnFields(t *testing.T) {
	t.Parallel()
	r := newResend(t)
	jobs := make([]streamq.Job, 300)
	for i := range jobs {
		jobs[i] = streamq.Job{Payload: fmt.Appendf(nil, "job-%d", i), Headers: map[string]string{"n": fmt.Sprint(i % 7)}}
	}
	r.resendBatch(jobs)
	es, err := r.direct.XRange(context.Background(), r.keys.Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		if want := fmt.Sprintf(`{"n":"%d"}`, i%7); e.Values["headers"] != want || e.Values["payload"] != fmt.Sprintf("job-%d", i) {
			t.Fatalf("entry %d holds %v, want payload job-%d and headers %s", i, e.Values, i, want)
		}
	}
}

// The first send of an Enqueue fills the queue to its cap and its reply is
// lost: the re-send finds the queue full, and must still answer with the
// job's ID rather than ErrQueueFull.
func TestResend_EnqueueAtCap(t *testing.T) {
	t.Parallel()
	r := newResendQueue(t, &streamq.QueueConfig{MaxLen: 1}, nil)
	dropped := r.drop("enqueue_plain")
	id, err := r.producer().Enqueue(context.Background(), []byte("the last place"))
	if err != nil {
		t.Fatalf("a re-sent Enqueue that filled the queue returned %v, want its job's ID", err)
	}
	dropped()
	equalIDs(t, "stream after a re-sent Enqueue at the cap", r.streamIDs(r.keys.Stream), []string{id})
}

// TestMemo_Expires: the hashes that remember write calls expire. A
// producer's first call in a bucket sets the TTL of the bucket's hash; a
// hash deleted while producers run is made again by their later calls
// without one, and a consumer's control loop gives it a TTL again.
func TestMemo_Expires(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	q, p := relQueue(t, client, nil)
	ctx := context.Background()
	pattern := core.Of(q).Keys.Part("memo:*")
	withoutTTL := func() []string {
		var bad []string
		for _, k := range redistest.ScanKeys(t, client, pattern) {
			if ttl, err := client.PTTL(ctx, k).Result(); err != nil || ttl < 0 || ttl > 25*time.Second {
				bad = append(bad, fmt.Sprintf("%s (PTTL %s, %v)", k, ttl, err))
			}
		}
		return bad
	}
	enqueue := func(n int) {
		for range n {
			if _, err := p.Enqueue(ctx, []byte("a")); err != nil {
				t.Fatal(err)
			}
		}
	}
	bucket := func() int64 { return time.Now().UnixMilli() / 5000 }
	enqueue(10)
	// The bucket of the last call: a call in a later bucket sets the TTL of
	// its hash, so the check below holds only within this one.
	before := bucket()
	if keys := redistest.ScanKeys(t, client, pattern); len(keys) == 0 {
		t.Fatal("no memo hash after Enqueue")
	}
	if bad := withoutTTL(); len(bad) > 0 {
		t.Fatalf("memo hashes without a TTL of at most 25s: %v", bad)
	}
	// Delete them while the producer goes on: the hash it makes again has
	// no TTL (its process set the bucket's TTL already) until a consumer's
	// control loop sets it.
	for _, k := range redistest.ScanKeys(t, client, pattern) {
		client.Del(ctx, k)
	}
	enqueue(10)
	if bad := withoutTTL(); len(bad) == 0 && bucket() == before {
		t.Fatal("a memo hash made again within its bucket after a delete has a TTL: the test tests nothing")
	}
	relRun(t, relConsumer(t, q, func(context.Context, *streamq.Message) error { return nil },
		streamq.ConsumerConfig{ControlInterval: streamq.MinControlInterval}))
	redistest.WaitFor(t, relWait, "every memo hash to have a TTL", func() bool { return len(withoutTTL()) == 0 })
}

func TestResend_DelayedEnqueue(t *testing.T) {
	t.Parallel()
	r := newResend(t)
	dropped := r.drop("schedule")
	id, err := r.producer().Enqueue(context.Background(), []byte("later"), streamq.ProcessIn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dropped()
	if n := r.card(r.keys.Delayed); n != 1 {
		t.Fatalf("delayed set holds %d jobs after a re-sent delayed Enqueue, want 1 (%s)", n, id)
	}
}

// A delayed job that fell due and was moved into the stream between the
// first send and the re-send must not be scheduled a second time.
func TestResend_DelayedEnqueueMovedMeanwhile(t *testing.T) {
	t.Parallel()
	// go-redis waits at least MinRetryBackoff before it re-sends: the test
	// moves the job meanwhile.
	r := newResendWith(t, func(o *redis.Options) { o.MinRetryBackoff, o.MaxRetryBackoff = time.Second, 2*time.Second })
	ctx := context.Background()
	p := r.producer()
	dropped := r.drop("schedule")
	done := make(chan error, 1)
	go func() {
		_, err := p.Enqueue(ctx, []byte("soon"), streamq.ProcessIn(time.Millisecond))
		done <- err
	}()
	dropped()
	// A scheduler whose clock is a second ahead: the job is due for it.
	ahead := rdb.New(r.direct, rdb.Config{Prefix: core.Of(r.dq).Prefix, Name: r.q.Name(), Group: r.q.Group(), Clock: aheadClock(time.Second)})
	redistest.WaitFor(t, relWait, "the delayed job to be moved into the stream", func() bool {
		n, _, err := ahead.Promote(ctx, rdb.PromoteParams{Limit: 10, Reason: streamq.ReasonMalformed})
		return err == nil && n == 1
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := r.card(r.keys.Delayed); n != 0 {
		t.Fatalf("the re-sent delayed Enqueue scheduled the job again: %d in the delayed set", n)
	}
	if ids := r.streamIDs(r.keys.Stream); len(ids) != 1 {
		t.Fatalf("stream holds %d jobs, want 1", len(ids))
	}
}

func TestResend_UniqueEnqueue(t *testing.T) {
	t.Parallel()
	for _, delay := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("delay=%s", delay), func(t *testing.T) {
			t.Parallel()
			r := newResend(t)
			dropped := r.drop("enqueue_one")
			opts := []streamq.EnqueueOption{streamq.Unique("invoice:42", time.Hour)}
			if delay > 0 {
				opts = append(opts, streamq.ProcessIn(delay))
			}
			id, err := r.producer().Enqueue(context.Background(), []byte("unique"), opts...)
			if err != nil {
				t.Fatalf("a re-sent unique Enqueue returned %v (ID %q), want its own job without an error", err, id)
			}
			dropped()
			n := int64(len(r.streamIDs(r.keys.Stream))) + r.card(r.keys.Delayed)
			if n != 1 || id == "" {
				t.Fatalf("%d jobs stored for ID %q, want 1", n, id)
			}
		})
	}
}

func TestResend_Cancel(t *testing.T) {
	t.Parallel()
	r := newResend(t)
	ctx := context.Background()
	id, err := r.producer().Enqueue(ctx, []byte("x"), streamq.ProcessIn(time.Hour), streamq.Unique("k", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dropped := r.drop("cancel")
	ok, err := r.q.CancelDelayed(ctx, id)
	dropped()
	if err != nil || !ok {
		t.Fatalf("a re-sent Cancel returned %v, %v; want true, nil", ok, err)
	}
	if n := r.card(r.keys.Delayed); n != 0 {
		t.Fatalf("delayed set holds %d jobs after Cancel", n)
	}
}

func TestResend_Requeue(t *testing.T) {
	t.Parallel()
	r := newResend(t)
	ctx := context.Background()
	var dead []string
	for i := range 3 {
		id, err := r.direct.XAdd(ctx, &redis.XAddArgs{Stream: r.keys.Dead, Values: []any{"v", "1", "payload", fmt.Sprint(i), "dl_reason", "permanent"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, id)
	}
	dropped := r.drop("requeue")
	ids, err := r.q.DeadLetters().Requeue(ctx, dead[0])
	dropped()
	if err != nil {
		t.Fatal(err)
	}
	equalIDs(t, "stream after a re-sent Requeue", r.streamIDs(r.keys.Stream), ids)
	if ids[0] == "" {
		t.Fatal("a re-sent Requeue reported the dead letter as missing")
	}
	dropped = r.drop("requeue")
	n, err := r.q.DeadLetters().RequeueAll(ctx)
	dropped()
	if err != nil || n != 2 {
		t.Fatalf("a re-sent RequeueAll returned %d, %v; want 2, nil", n, err)
	}
	if got := r.streamIDs(r.keys.Stream); len(got) != 3 {
		t.Fatalf("stream holds %d jobs after requeueing 3 dead letters", len(got))
	}
	if got := r.streamIDs(r.keys.Dead); len(got) != 0 {
		t.Fatalf("%d dead letters left", len(got))
	}
}

func TestResend_WriterChanges(t *testing.T) {
	t.Parallel()
	r := newResend(t)
	ctx := context.Background()
	w, err := writebehind.NewWriter(r.q, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		name string
		do   func() (int64, error)
	}{
		{"Set", func() (int64, error) { return w.Set(ctx, "user:1", []byte("A")) }},
		{"SetFields", func() (int64, error) { return w.SetFields(ctx, "user:1", map[string]string{"name": "B"}) }},
		{"Delete", func() (int64, error) { return w.Delete(ctx, "user:1") }},
	}
	for i, c := range calls {
		dropped := r.drop("write")
		v, err := c.do()
		dropped()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if want := int64(i + 1); v != want {
			t.Fatalf("a re-sent %s returned version %d, want %d", c.name, v, want)
		}
		if got, _ := r.direct.Get(ctx, w.VersionKey()).Int64(); got != v {
			t.Fatalf("after a re-sent %s the version counter is %d, want %d", c.name, got, v)
		}
		if n := len(r.streamIDs(r.keys.Stream)); n != i+1 {
			t.Fatalf("after a re-sent %s the stream holds %d changes, want %d", c.name, n, i+1)
		}
	}
}

func TestResend_PriorityPush(t *testing.T) {
	t.Parallel()
	r := newResend(t)
	ctx := context.Background()
	pq, err := priority.NewQueue(r.q, nil)
	if err != nil {
		t.Fatal(err)
	}
	pk := r.keys.Priority()
	dropped := r.drop("priority_push")
	id, err := pq.Push(ctx, priority.Job{Priority: 1, Payload: []byte("a")})
	dropped()
	if err != nil || id == "" {
		t.Fatalf("Push: %q, %v", id, err)
	}
	dropped = r.drop("priority_push")
	ids, err := pq.PushBatch(ctx, []priority.Job{{Payload: []byte("b")}, {Payload: []byte("c")}})
	dropped()
	if err != nil {
		t.Fatal(err)
	}
	if n := r.card(pk.Ready); n != 3 {
		t.Fatalf("ready set holds %d jobs after 3 pushes with lost replies, want 3 (IDs %s %v)", n, id, ids)
	}
	if seq, _ := r.direct.Get(ctx, pk.Seq).Int64(); seq != 3 {
		t.Fatalf("sequence counter %d, want 3", seq)
	}
}

// resendEvents counts the events of a consumer or worker.
type resendEvents struct {
	mu sync.Mutex
	n  map[streamq.EventKind]int
}

func (e *resendEvents) on(_ context.Context, ev streamq.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[streamq.EventKind]int{}
	}
	e.n[ev.Kind]++
}

func (e *resendEvents) count(k streamq.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[k]
}

// TestResend_Settlement runs a consumer and a priority worker through the
// proxy and loses the reply of each settlement move once: a retry (into
// the stream, and into the delayed set), a dead letter, and priority.Forward,
// priority retries and dead letters. The job must run exactly as often as
// without the fault, and the move be reported once.
func TestResend_Settlement(t *testing.T) {
	t.Parallel()
	type tc struct {
		name     string
		script   string
		priority bool
		fail     error // what the first run returns
		runs     int   // handler runs expected
		dead     int
		event    streamq.EventKind
	}
	for _, c := range []tc{
		{name: "stream retry", script: "move", fail: streamq.RetryAfter(0, errors.New("once")), runs: 2, event: streamq.EventRetried},
		{name: "stream delayed retry", script: "move", fail: streamq.RetryAfter(50*time.Millisecond, errors.New("once")), runs: 2, event: streamq.EventRetried},
		{name: "stream dead letter", script: "dead_letter", fail: streamq.Permanent(errors.New("bad")), runs: 1, dead: 1, event: streamq.EventDeadLettered},
		{name: "priority forward", script: "priority_forward", priority: true, runs: 1},
		{name: "priority retry", script: "priority_retry", priority: true, fail: streamq.RetryAfter(0, errors.New("once")), runs: 2, event: streamq.EventRetried},
		{name: "priority delayed retry", script: "priority_retry", priority: true, fail: streamq.RetryAfter(50*time.Millisecond, errors.New("once")), runs: 2, event: streamq.EventRetried},
		{name: "priority dead letter", script: "priority_dead", priority: true, fail: streamq.Permanent(errors.New("bad")), runs: 1, dead: 1, event: streamq.EventDeadLettered},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newResend(t)
			ctx := context.Background()
			var mu sync.Mutex
			runs := 0
			h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
				mu.Lock()
				defer mu.Unlock()
				runs++
				if runs == 1 {
					return c.fail
				}
				return nil
			})
			var ev resendEvents
			dropped := r.drop(c.script)
			if _, err := r.producer().Enqueue(ctx, []byte("job")); err != nil {
				t.Fatal(err)
			}
			if c.priority {
				pq, err := priority.NewQueue(r.q, nil)
				if err != nil {
					t.Fatal(err)
				}
				fwd := relRun(t, relConsumer(t, r.q, priority.Forward(pq).Handle, streamq.ConsumerConfig{}))
				w, err := priority.NewWorker(pq, h, &priority.WorkerConfig{
					Block: 100 * time.Millisecond, ReapInterval: 50 * time.Millisecond, OnEvent: ev.on, Logger: relLogger(t),
					Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
				if err != nil {
					t.Fatal(err)
				}
				wr := redistest.Background(t, "Worker.Run", relRunStop, w.Run)
				defer func() { _ = wr.Stop() }()
				defer fwd.stop()
			} else {
				cr := relRun(t, relConsumer(t, r.q, h, streamq.ConsumerConfig{OnEvent: ev.on}))
				defer cr.stop()
			}
			dropped()
			pk := r.keys.Priority()
			redistest.WaitFor(t, relWait, "the job to run and settle", func() bool {
				mu.Lock()
				n := runs
				mu.Unlock()
				dead, _ := r.direct.XLen(ctx, r.keys.Dead).Result()
				s := relStats(t, r.dq)
				left := r.card(pk.Ready) + r.card(pk.Leases) + r.card(pk.Delayed)
				reported := c.event == 0 || ev.count(c.event) > 0
				return n >= c.runs && int(dead) >= c.dead && s.Pending == 0 && s.Lag == 0 && s.Delayed == 0 && left == 0 && reported
			})
			mu.Lock()
			defer mu.Unlock()
			dead, _ := r.direct.XLen(ctx, r.keys.Dead).Result()
			if runs != c.runs || int(dead) != c.dead {
				t.Fatalf("the handler ran %d times and %d jobs were dead-lettered; want %d and %d", runs, dead, c.runs, c.dead)
			}
			if c.event != 0 {
				if n := ev.count(c.event); n != 1 {
					t.Fatalf("%s reported %d times, want once", c.event, n)
				}
			}
		})
	}
}

// aheadClock is the system clock moved ahead by its duration.
type aheadClock time.Duration

func (c aheadClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }
