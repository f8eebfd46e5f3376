package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/priority"
)

// progressOf records the progress calls of a bulk action and checks that
// they never go down.
type progressOf struct {
	t     *testing.T
	calls []int
}

func (p *progressOf) done(n int) {
	if len(p.calls) > 0 && n < p.calls[len(p.calls)-1] {
		p.t.Errorf("progress went down: %v then %d", p.calls, n)
	}
	p.calls = append(p.calls, n)
}

func count(t *testing.T, q *inspect.Queue, st inspect.State) int64 {
	t.Helper()
	n, err := q.Count(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestQueue_BulkStream deletes every waiting job, runs every delayed job
// now and cancels every running job of a stream queue, in batches.
func TestQueue_BulkStream(t *testing.T) {
	t.Parallel()
	f := setupStates(t) // 3 waiting, 1 running, 1 delayed, 1 retrying, 1 dead, 1 cancelled
	ctx := context.Background()
	for i := range 250 {
		f.enqueue(t, fmt.Sprintf("w%d", i))
	}
	for i := range 150 {
		f.enqueue(t, fmt.Sprintf("d%d", i), streamq.ProcessIn(time.Hour+time.Duration(i)*time.Second))
	}
	if n := count(t, f.iq, inspect.StateWaiting); n != 253 {
		t.Fatalf("Count(waiting) = %d, want 253", n)
	}
	if n := count(t, f.iq, inspect.StateDelayed); n != 151 {
		t.Fatalf("Count(delayed) = %d, want 151", n)
	}

	p := &progressOf{t: t}
	n, err := f.iq.RunAllNow(ctx, inspect.StateDelayed, p.done)
	if err != nil || n != 151 {
		t.Fatalf("RunAllNow(delayed) = %d, %v; want 151", n, err)
	}
	if len(p.calls) < 2 || p.calls[len(p.calls)-1] != 151 {
		t.Errorf("progress calls %v: want one per batch of 100, ending at 151", p.calls)
	}
	if got := count(t, f.iq, inspect.StateRetrying); got != 1 {
		t.Errorf("RunAllNow(delayed) touched the retrying job: %d retrying", got)
	}
	if got := count(t, f.iq, inspect.StateWaiting); got != 253+151 {
		t.Errorf("after RunAllNow, %d waiting, want %d", got, 253+151)
	}

	p = &progressOf{t: t}
	n, err = f.iq.DeleteAll(ctx, inspect.StateWaiting, p.done)
	if err != nil || n != 253+151 {
		t.Fatalf("DeleteAll(waiting) = %d, %v; want %d", n, err, 253+151)
	}
	if got := count(t, f.iq, inspect.StateWaiting); got != 0 {
		t.Errorf("after DeleteAll(waiting), %d waiting", got)
	}
	if got := stateOf(t, f, f.running); got != inspect.StateRunning {
		t.Errorf("DeleteAll(waiting) touched the running job: %s", got)
	}

	n, err = f.iq.CancelAll(ctx, nil)
	if err != nil || n != 1 {
		t.Fatalf("CancelAll = %d, %v; want 1", n, err)
	}
	if ids := f.c.HKeys(ctx, f.key("cancel")).Val(); !slices.Equal(ids, []string{f.running}) {
		t.Errorf("cancel requests %v, want [%s]", ids, f.running)
	}
	if n, err := f.iq.RunAllNow(ctx, inspect.StateRetrying, nil); err != nil || n != 1 {
		t.Errorf("RunAllNow(retrying) = %d, %v; want 1", n, err)
	}
	if n, err := f.iq.DeleteAll(ctx, inspect.StateRetrying, nil); err != nil || n != 0 {
		t.Errorf("DeleteAll(retrying) of none = %d, %v", n, err)
	}
	for _, c := range []struct {
		name string
		call func() (int, error)
	}{
		{"DeleteAll(dead)", func() (int, error) { return f.iq.DeleteAll(ctx, inspect.StateDead, nil) }},
		{"DeleteAll(running)", func() (int, error) { return f.iq.DeleteAll(ctx, inspect.StateRunning, nil) }},
		{"RunAllNow(waiting)", func() (int, error) { return f.iq.RunAllNow(ctx, inspect.StateWaiting, nil) }},
	} {
		if n, err := c.call(); err == nil || n != 0 {
			t.Errorf("%s = %d, %v; want an error", c.name, n, err)
		}
	}
}

// TestQueue_BulkLeavesNewJobs checks that a bulk delete walks the jobs
// there when it starts: one enqueued during the walk stays.
func TestQueue_BulkLeavesNewJobs(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	for i := range 150 {
		e.enqueue(t, fmt.Sprintf("w%d", i))
	}
	var late string
	n, err := e.iq.DeleteAll(ctx, inspect.StateWaiting, func(done int) {
		if late == "" {
			late = e.enqueue(t, "late")
		}
	})
	if err != nil || n != 150 {
		t.Fatalf("DeleteAll = %d, %v; want 150", n, err)
	}
	if j, err := e.iq.Job(ctx, late); err != nil || j.State != inspect.StateWaiting {
		t.Errorf("the job enqueued during the walk: %+v, %v; want it waiting", j, err)
	}
}

// TestQueue_BulkPriority deletes and runs now the jobs of a priority queue.
func TestQueue_BulkPriority(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	register(t, e.c, e.prefix, e.name, "priority")
	pq, err := priority.NewQueue(e.q, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 230 {
		if _, err := pq.Push(ctx, priority.Job{Priority: i % 3, Payload: []byte("p")}); err != nil {
			t.Fatal(err)
		}
	}
	q, err := e.in.Queue(ctx, e.name)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, q, inspect.StateWaiting); n != 230 {
		t.Fatalf("Count(waiting) = %d", n)
	}
	n, err := q.DeleteAll(ctx, inspect.StateWaiting, nil)
	if err != nil || n != 230 {
		t.Fatalf("DeleteAll(waiting) = %d, %v; want 230", n, err)
	}
	if left := e.c.ZCard(ctx, e.key("priority")).Val(); left != 0 {
		t.Errorf("%d jobs left in the ready set", left)
	}
	if jobs := e.c.HLen(ctx, e.key("priority:jobs")).Val(); jobs != 0 {
		t.Errorf("%d job hashes left", jobs)
	}
}

// keysOf returns the keys under pattern (a test's own prefix: small).
func keysOf(t *testing.T, c *redis.Client, pattern string) []string {
	t.Helper()
	var out []string
	var cursor uint64
	for range 1000 {
		keys, next, err := c.Scan(context.Background(), cursor, pattern, 1000).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, keys...)
		if next == 0 {
			slices.Sort(out)
			return out
		}
		cursor = next
	}
	t.Fatal("SCAN did not end")
	return nil
}

// TestInspector_DeleteQueue refuses a queue with a live consumer, deletes
// it with Force, and leaves the other queues alone, even one whose name
// the first one's would match as a glob.
func TestInspector_DeleteQueue(t *testing.T) {
	t.Parallel()
	f := setupStates(t)
	ctx := context.Background()
	// Queues "j*" (a glob) and "jobsx" next to "jobs".
	for _, name := range []string{"j*", "jobsx"} {
		q, err := streamq.NewQueue(f.c, name, &streamq.QueueConfig{KeyPrefix: f.prefix})
		if err != nil {
			t.Fatal(err)
		}
		p, err := streamq.NewProducer(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Enqueue(ctx, []byte("keep")); err != nil {
			t.Fatal(err)
		}
		register(t, f.c, f.prefix, name, "stream")
	}
	f.c.HSet(ctx, f.prefix+":writebehind", f.name, "1")
	for i := range 250 { // more keys than one UNLINK takes
		f.c.Set(ctx, f.key(fmt.Sprintf("result:%d", i)), "r", time.Hour)
	}
	others := append(keysOf(t, f.c, f.prefix+":{j\\*}:*"), keysOf(t, f.c, f.prefix+":{jobsx}:*")...)

	// "ghost" took the running job just now: it is live (and so is the
	// consumer of setupStates, stopped a moment ago).
	_, err := f.in.DeleteQueue(ctx, f.name, nil)
	var iu *inspect.InUseError
	if !errors.As(err, &iu) || !errors.Is(err, inspect.ErrQueueInUse) || !slices.ContainsFunc(iu.Live, func(c inspect.Consumer) bool { return c.Name == "ghost" }) ||
		!strings.Contains(err.Error(), "consumer ghost") || !strings.Contains(err.Error(), "force") {
		t.Fatalf("DeleteQueue of a queue in use = %v, want an InUseError naming consumer ghost", err)
	}
	if len(keysOf(t, f.c, f.key("*"))) == 0 {
		t.Fatal("a refused DeleteQueue deleted keys")
	}
	// Not live within a millisecond: deleted without Force.
	p := &progressOf{t: t}
	n, err := f.in.DeleteQueue(ctx, f.name, &inspect.DeleteQueueOptions{LiveWithin: time.Millisecond, Progress: p.done})
	if err != nil || n < 250 {
		t.Fatalf("DeleteQueue = %d, %v; want at least 250 keys", n, err)
	}
	if len(p.calls) < 3 || p.calls[len(p.calls)-1] != n {
		t.Errorf("progress %v, want batches ending at %d", p.calls, n)
	}
	if left := keysOf(t, f.c, f.key("*")); len(left) > 0 {
		t.Errorf("keys left: %v", left)
	}
	if f.c.HExists(ctx, f.prefix+":queues", f.name).Val() || f.c.HExists(ctx, f.prefix+":writebehind", f.name).Val() {
		t.Error("the registry entries are left")
	}
	after := append(keysOf(t, f.c, f.prefix+":{j\\*}:*"), keysOf(t, f.c, f.prefix+":{jobsx}:*")...)
	if !slices.Equal(after, others) {
		t.Errorf("the other queues' keys changed:\n%v\nwant\n%v", after, others)
	}
	if _, err := f.in.DeleteQueue(ctx, f.name, nil); !errors.Is(err, inspect.ErrQueueNotFound) {
		t.Errorf("DeleteQueue again = %v, want ErrQueueNotFound", err)
	}
	if _, err := f.in.DeleteQueue(ctx, "j*", &inspect.DeleteQueueOptions{LiveWithin: -1}); err == nil {
		t.Error("a negative LiveWithin was accepted")
	}
}

// TestInspector_DeleteQueueWorker refuses a priority queue with a live
// worker, and deletes it with Force.
func TestInspector_DeleteQueueWorker(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	e.c.ZAdd(ctx, e.key("workers"), redis.Z{Score: float64(time.Now().UnixMilli()), Member: "w1"})
	e.c.XGroupDelConsumer(ctx, e.key("stream"), streamq.DefaultGroup, "ghost")
	if _, err := e.in.DeleteQueue(ctx, e.name, nil); !errors.Is(err, inspect.ErrQueueInUse) || !strings.Contains(err.Error(), "worker w1") {
		t.Fatalf("DeleteQueue with a live worker = %v", err)
	}
	if _, err := e.in.DeleteQueue(ctx, e.name, &inspect.DeleteQueueOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if left := keysOf(t, e.c, e.key("*")); len(left) > 0 {
		t.Errorf("keys left: %v", left)
	}
}

// TestInspector_PruneQueues removes the registry entries of queues without
// keys, and keeps the others.
func TestInspector_PruneQueues(t *testing.T) {
	t.Parallel()
	e := setup(t, nil) // "jobs": a stream with its group
	ctx := context.Background()
	register(t, e.c, e.prefix, "ghost-1", "stream")
	register(t, e.c, e.prefix, "ghost-2", "priority")
	register(t, e.c, e.prefix, "paused-only", "stream")
	e.c.Set(ctx, e.prefix+":{paused-only}:paused", "1", 0)
	e.c.Set(ctx, e.prefix+":{ghost-1}:result:1-0", "r", time.Hour) // expires on its own
	e.c.HSet(ctx, e.prefix+":writebehind", "gone", "1", "jobs", "1")
	got, err := e.in.PruneQueues(ctx)
	if want := []string{"ghost-1", "ghost-2", "gone"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("PruneQueues = %v, %v; want %v", got, err, want)
	}
	qs, err := e.in.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
	}
	if !slices.Equal(names, []string{"jobs", "paused-only"}) {
		t.Errorf("queues after the prune: %v", names)
	}
	if wb := e.c.HKeys(ctx, e.prefix+":writebehind").Val(); !slices.Equal(wb, []string{"jobs"}) {
		t.Errorf("write-behind registry after the prune: %v", wb)
	}
	if got, err := e.in.PruneQueues(ctx); err != nil || len(got) != 0 {
		t.Errorf("PruneQueues again = %v, %v", got, err)
	}
}

// TestQueue_History rolls the minute counters up into hours, twice, and
// reads them back after the minute counters are gone.
func TestQueue_History(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	now := time.Now().Unix() / 60
	// Minutes 0, 1, 70 and 110 ago.
	counts := map[int64][2]int64{now: {1, 0}, now - 1: {5, 2}, now - 70: {7, 1}, now - 110: {11, 3}}
	for m, c := range counts {
		e.c.HSet(ctx, e.key("stats:"+itoa(m)), "processed", c[0], "failed", c[1])
		e.c.Expire(ctx, e.key("stats:"+itoa(m)), 2*time.Hour)
	}
	h, err := e.iq.History(ctx, 2*time.Hour)
	if err != nil || h.Step != time.Minute || len(h.Points) != 120 {
		t.Fatalf("History(2h) = %+v, %v", h, err)
	}
	if p := h.Points[119-70]; p.Processed != 7 || p.Failed != 1 {
		t.Errorf("minute -70: %+v", p)
	}
	for range 2 { // idempotent
		if err := e.iq.RollUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for m := range counts {
		e.c.Del(ctx, e.key("stats:"+itoa(m))) // the minute counters expire
	}
	if n, err := e.in.RollUp(ctx); err != nil || n != 1 {
		t.Errorf("Inspector.RollUp = %d, %v", n, err)
	}
	h, err = e.iq.History(ctx, 7*24*time.Hour)
	if err != nil || h.Step != time.Hour || len(h.Points) != 168 {
		t.Fatalf("History(7d) = %+v, %v", h, err)
	}
	var p, fl int64
	byHour := map[int64]int64{}
	for _, pt := range h.Points {
		p += pt.Processed
		fl += pt.Failed
		byHour[pt.At.Unix()/3600] = pt.Processed
	}
	if p != 24 || fl != 6 {
		t.Errorf("7 days: %d processed, %d failed; want 24, 6", p, fl)
	}
	for m, c := range counts {
		if byHour[m/60] < c[0] {
			t.Errorf("hour of minute %d holds %d processed, want at least %d", m, byHour[m/60], c[0])
		}
	}
	if ttl := e.c.TTL(ctx, e.key("stats:hour:"+itoa(now/60))).Val(); ttl < 7*24*time.Hour {
		t.Errorf("hour counter TTL %s, want 7 days and more", ttl)
	}
	for _, span := range []time.Duration{0, -time.Minute, 8 * 24 * time.Hour} {
		if _, err := e.iq.History(ctx, span); err == nil {
			t.Errorf("History(%s) gave no error", span)
		}
	}
}

// TestInspector_Redis reads the test server's INFO.
func TestInspector_Redis(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ss, err := e.in.Redis(context.Background())
	if err != nil || len(ss) != 1 {
		t.Fatalf("Redis = %v, %v", ss, err)
	}
	s := ss[0]
	// The tests run against Redis, or Valkey (STREAMQ_REDIS_SERVER): the
	// server says which.
	server, version := "redis", "redis_version:"
	info := e.c.Info(context.Background(), "server").Val()
	if strings.Contains(info, "valkey_version:") {
		server, version = "valkey", "valkey_version:"
	}
	if s.Server != server || s.Version == "" || !strings.Contains(info, version+s.Version+"\r\n") || s.UsedMemory <= 0 || s.Clients < 1 || s.EvictionPolicy == "" || s.Addr == "" {
		t.Errorf("Redis = %+v", s)
	}
	if s.Persistence() == "" {
		t.Error("no persistence summary")
	}
}
