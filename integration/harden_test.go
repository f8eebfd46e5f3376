package integration

import (
	"context"
	"errors"
	"log/slog"
	"maps"
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
	"github.com/streamq/streamq/internal/wire"
	"github.com/streamq/streamq/periodic"
	"github.com/streamq/streamq/writebehind"
)

// TestScripts_FailedMoveChangesNothing: every move script writes a job to
// its new place before it deletes it from the old one, so a write that
// fails (here: a foreign key of the wrong type where the job goes) aborts
// the script before anything is deleted, and the job stays where it was,
// unchanged.
func TestScripts_FailedMoveChangesNothing(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	q, p := relQueue(t, client, nil)
	ctx := context.Background()
	k := core.Of(q).Keys

	t.Run("stream retry into a broken delayed set", func(t *testing.T) {
		ids := enqueueAll(t, p, []string{"job"})
		if err := client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.Group(), Consumer: "c", Streams: []string{k.Stream, ">"}, Count: 1}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.Set(ctx, k.Delayed, "foreign", 0).Err(); err != nil {
			t.Fatal(err)
		}
		defer client.Del(ctx, k.Delayed)
		next := wire.Job{Payload: []byte("job"), Attempt: 1}
		mp := rdb.MoveParams{Consumer: "c", ID: ids[0], Delay: time.Hour, Settle: rdb.Settle{JobID: ids[0]}, Fields: next.Args()}
		if _, err := core.Of(q).DB.Move(ctx, mp); err == nil {
			t.Fatal("Move into a delayed set of the wrong type succeeded")
		}
		if e, err := client.XRange(ctx, k.Stream, ids[0], ids[0]).Result(); err != nil || len(e) != 1 {
			t.Fatalf("the job's entry after the failed move: %v, %v; want it kept", e, err)
		}
		if p, err := client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k.Stream, Group: q.Group(), Start: ids[0], End: ids[0], Count: 1}).Result(); err != nil || len(p) != 1 {
			t.Fatalf("the job's pending entry after the failed move: %v, %v; want it kept", p, err)
		}
	})

	t.Run("priority retry into a broken delayed set", func(t *testing.T) {
		ps := core.Of(q).DB.Priority()
		pk := ps.Keys()
		data := wire.Pack((&wire.Job{Payload: []byte("p")}).Args())
		var pp rdb.PushParams
		pp.Add("0", data)
		ids, err := ps.Push(ctx, &pp)
		if err != nil {
			t.Fatal(err)
		}
		res, err := ps.Pop(ctx, rdb.PopParams{Run: "run", Lease: time.Minute, N: 1, Prefix: "w:run.1:"})
		if err != nil || len(res.Jobs) != 1 {
			t.Fatalf("pop: %+v, %v", res, err)
		}
		lease := res.Jobs[0].Lease
		// Two crashed starts counted on this copy.
		if err := client.HSet(ctx, pk.Deliveries, ids[0], 2).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.Set(ctx, pk.Delayed, "foreign", 0).Err(); err != nil {
			t.Fatal(err)
		}
		retried := wire.Pack((&wire.Job{Payload: []byte("p"), Attempt: 3}).Args())
		if _, err := ps.Retry(ctx, rdb.RetryParams{Lease: lease, Delay: time.Second, Data: retried}); err == nil {
			t.Fatal("Retry into a delayed set of the wrong type succeeded")
		}
		if got, err := client.HGet(ctx, pk.Jobs, ids[0]).Result(); err != nil || got != string(data) {
			t.Errorf("job data after the failed retry: %q, %v; want it unchanged", got, err)
		}
		if got, err := client.HGet(ctx, pk.Deliveries, ids[0]).Int(); err != nil || got != 2 {
			t.Errorf("delivery counter after the failed retry: %d, %v; want 2", got, err)
		}
		if err := client.ZScore(ctx, pk.Leases, lease).Err(); err != nil {
			t.Errorf("lease after the failed retry: %v; want it held", err)
		}
	})
}

// capSetup makes q's stream hold one pending job (read and never
// acknowledged) followed by history: extra entries that the group has read
// and acknowledged, so that the stream holds 1+extra entries of which one is
// unacknowledged. It returns the pending job's ID.
func capSetup(t *testing.T, client *redis.Client, q *streamq.Queue, p *streamq.Producer, extra int) string {
	t.Helper()
	ctx := context.Background()
	k := core.Of(q).Keys
	head := enqueueAll(t, p, []string{"long job"})[0]
	if err := client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.Group(), Consumer: "slow", Streams: []string{k.Stream, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	for start := 0; start < extra; start += 10_000 {
		pipe := client.Pipeline()
		for range min(10_000, extra-start) {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: []any{"v", "1", "payload", "done"}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Delivered and acknowledged: past the group's last delivered ID, and
	// not pending. ENTRIESREAD keeps Redis's count of the group's reads
	// exact, as XREADGROUP would.
	info, err := client.XInfoStream(ctx, k.Stream).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Do(ctx, "XGROUP", "SETID", k.Stream, q.Group(), "$", "ENTRIESREAD", info.EntriesAdded).Err(); err != nil {
		t.Fatal(err)
	}
	return head
}

// TestCap_OneRule: MaxLen means at most MaxLen unacknowledged jobs for
// Enqueue, the write-behind Writer and the periodic scheduler alike. One old
// pending job with acknowledged history behind it, filling the stream past
// its cap, must not make any of them refuse.
func TestCap_OneRule(t *testing.T) {
	t.Parallel()
	const capLen = 10
	client := redistest.NewClient(t)
	q, p := relQueue(t, client, &streamq.QueueConfig{MaxLen: capLen})
	ctx := context.Background()
	k := core.Of(q).Keys
	capSetup(t, client, q, p, 3*capLen)

	if _, err := p.Enqueue(ctx, []byte("a")); err != nil {
		t.Fatalf("Enqueue with 1 unacknowledged job, cap %d: %v", capLen, err)
	}
	w, err := writebehind.NewWriter(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Set(ctx, "k", []byte("v")); err != nil {
		t.Errorf("Writer.Set with 2 unacknowledged jobs, cap %d: %v", capLen, err)
	}
	s, err := periodic.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterInterval("tick", periodic.MinInterval, []byte("tick")); err != nil {
		t.Fatal(err)
	}
	sched := redistest.Background(t, "Scheduler.Run", relRunStop, s.Run)
	redistest.WaitFor(t, relWait, "the periodic scheduler to enqueue 3 ticks", func() bool {
		msgs, err := client.XRange(ctx, k.Stream, "-", "+").Result()
		if err != nil {
			return false
		}
		ticks := 0
		for _, m := range msgs {
			if m.Values["payload"] == "tick" {
				ticks++
			}
		}
		return ticks >= 3
	})

	// The rule still refuses at the cap: fill it with unacknowledged jobs.
	sched.Stop()
	var refused error
	for range 2 * capLen {
		if _, refused = p.Enqueue(ctx, []byte("fill")); refused != nil {
			break
		}
	}
	if !errors.Is(refused, streamq.ErrQueueFull) {
		t.Fatalf("Enqueue past the cap: %v, want ErrQueueFull", refused)
	}
	if n := relUndelivered(q) + 1; n != capLen { // and the pending head
		t.Fatalf("refused with %d unacknowledged jobs, want the cap %d", n, capLen)
	}
	if _, err := w.Set(ctx, "k", []byte("v2")); !errors.Is(err, streamq.ErrQueueFull) {
		t.Fatalf("Writer.Set past the cap: %v, want ErrQueueFull", err)
	}
}

// groupInfo returns the raw lag and entries-read of q's group (nil when
// Redis reports them as NULL).
func groupInfo(t *testing.T, client *redis.Client, q *streamq.Queue) (lag, read any) {
	t.Helper()
	groups, err := client.Do(context.Background(), "XINFO", "GROUPS", core.Of(q).Keys.Stream).Slice()
	if err != nil || len(groups) != 1 {
		t.Fatalf("XINFO GROUPS: %v, %v", groups, err)
	}
	switch g := groups[0].(type) {
	case map[any]any: // RESP3
		return g["lag"], g["entries-read"]
	case []any:
		for i := 0; i+1 < len(g); i += 2 {
			switch g[i] {
			case "lag":
				lag = g[i+1]
			case "entries-read":
				read = g[i+1]
			}
		}
	}
	return lag, read
}

// TestCap_NullLag: Redis 7.0 reports a group's lag as NULL after an XDEL at
// or past its last delivered ID, which the retry and dead-letter scripts do
// to the entry they settle. The cap must still count the unacknowledged
// jobs, not refuse because the stream holds acknowledged history.
func TestCap_NullLag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("entries read known", func(t *testing.T) {
		const capLen = 50
		client := redistest.NewClient(t)
		q, p := relQueue(t, client, &streamq.QueueConfig{MaxLen: capLen})
		k := core.Of(q).Keys
		capSetup(t, client, q, p, capLen-2) // 49 entries, 1 pending
		// The last delivered entry is settled by a move (XDEL), and a new
		// job arrives: the lag is NULL now.
		last, err := client.XRevRangeN(ctx, k.Stream, "+", "-", 1).Result()
		if err != nil || len(last) != 1 {
			t.Fatal(last, err)
		}
		if err := client.XDel(ctx, k.Stream, last[0].ID).Err(); err != nil {
			t.Fatal(err)
		}
		enqueueAll(t, p, []string{"undelivered"})
		if lag, read := groupInfo(t, client, q); lag != nil || read == nil {
			t.Fatalf("lag %v, entries-read %v: the test needs a NULL lag and a known entries-read", lag, read)
		}
		// 49 entries, 2 unacknowledged: a batch of 2 fits under 50.
		if _, err := p.EnqueueBatch(ctx, []streamq.Job{{Payload: []byte("x")}, {Payload: []byte("y")}}); err != nil {
			t.Fatalf("EnqueueBatch of 2 with 2 unacknowledged jobs, cap %d: %v", capLen, err)
		}
	})

	t.Run("entries read unknown", func(t *testing.T) {
		const capLen = 40
		client := redistest.NewClient(t)
		q, err := streamq.NewQueue(client, redistest.Name(t), &streamq.QueueConfig{MaxLen: capLen})
		if err != nil {
			t.Fatal(err)
		}
		redistest.DeleteKeysAtCleanup(t, client, core.Of(q).Keys.Part("*"))
		p, err := streamq.NewProducer(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		k := core.Of(q).Keys
		// 40 entries, one deleted in the middle before the group exists:
		// Redis cannot count what the group reads.
		var ids []string
		for i := range capLen {
			id, err := client.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: []any{"v", "1", "payload", strconv.Itoa(i)}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := client.XDel(ctx, k.Stream, ids[20]).Err(); err != nil {
			t.Fatal(err)
		}
		if err := q.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		// All but the last delivered; all but the first acknowledged.
		if err := client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.Group(), Consumer: "c", Streams: []string{k.Stream, ">"}, Count: capLen - 2}).Err(); err != nil {
			t.Fatal(err)
		}
		var acks []string
		for i, id := range ids[1 : capLen-1] {
			if i+1 != 20 {
				acks = append(acks, id)
			}
		}
		if err := client.XAck(ctx, k.Stream, q.Group(), acks...).Err(); err != nil {
			t.Fatal(err)
		}
		if lag, read := groupInfo(t, client, q); lag != nil || read != nil {
			t.Fatalf("lag %v, entries-read %v: the test needs both NULL", lag, read)
		}
		// 39 entries, 2 unacknowledged: a batch of 2 fits under 40 once
		// acknowledged history is dropped.
		if _, err := p.EnqueueBatch(ctx, []streamq.Job{{Payload: []byte("x")}, {Payload: []byte("y")}}); err != nil {
			t.Fatalf("EnqueueBatch of 2 with 2 unacknowledged jobs, cap %d: %v", capLen, err)
		}
	})
}

// TestCap_BoundedWorkPerCall: a stream 300,000 entries over its cap behind
// a pending job (a long job, then a burst of due jobs, a RequeueAll or a
// lowered MaxLen) must not make one call delete all of that history at
// once, which blocked Redis for seconds: each call deletes at most 1,000
// entries, and later calls continue. The longest call is read from the
// server's SLOWLOG.
func TestCap_BoundedWorkPerCall(t *testing.T) {
	t.Parallel()
	const (
		capLen  = 1000
		over    = 300_000
		perCall = 64 // enqueue_trim_min in internal/rdb: an enqueue of one job deletes that much history
		calls   = 20
	)
	srv := redistest.StartServer(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "1024")
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	q, p := relQueue(t, client, &streamq.QueueConfig{MaxLen: capLen})
	ctx := context.Background()
	k := core.Of(q).Keys
	head := capSetup(t, client, q, p, capLen+over-1)

	xlen := func() int64 {
		n, err := client.XLen(ctx, k.Stream).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := client.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := xlen()
	for i := range calls {
		if _, err := p.Enqueue(ctx, []byte("new")); err != nil {
			t.Fatalf("Enqueue %d: %v", i, err)
		}
		after := xlen()
		if deleted := before + 1 - after; deleted != perCall {
			t.Fatalf("Enqueue %d deleted %d entries of history, want %d per call", i, deleted, perCall)
		}
		before = after
	}
	longest := slowest(t, client)
	t.Logf("%d enqueues %d entries over the cap behind a pending job: the longest script call took %s", calls, over, longest)

	// The long job finishes: MINID trimming frees whole nodes, still bounded.
	if err := client.XAck(ctx, k.Stream, q.Group(), head).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before = xlen()
	if _, err := p.Enqueue(ctx, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if deleted := before + 1 - xlen(); deleted <= 0 || deleted > 10_000+perCall {
		t.Fatalf("Enqueue after the long job finished deleted %d entries, want 1 to %d", deleted, 10_000+perCall)
	}
	t.Logf("after the long job finished: the longest script call took %s", slowest(t, client))
	n, err := q.Trim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Trim deleted the remaining %d entries of history; its longest script call took %s", n, slowest(t, client))
	if l := xlen(); l > capLen+calls+2 {
		t.Errorf("stream length %d after Trim, want at most the unacknowledged jobs", l)
	}
	if longest > time.Second {
		t.Errorf("the longest script call took %s", longest)
	}
}

// slowest returns the longest EVALSHA or EVAL in the server's SLOWLOG, and
// resets the log.
func slowest(t *testing.T, client *redis.Client) time.Duration {
	t.Helper()
	ctx := context.Background()
	logs, err := client.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var longest time.Duration
	for _, l := range logs {
		if len(l.Args) > 0 && (strings.EqualFold(l.Args[0], "evalsha") || strings.EqualFold(l.Args[0], "eval")) {
			longest = max(longest, l.Duration)
		}
	}
	if err := client.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return longest
}

// TestPromote_CorruptDelayedJobDeadLettered: a delayed job whose data
// cannot become a stream entry (written by another client, or corrupted)
// must not stop every other delayed job and retry: it is dead-lettered with
// the reason and its data, and the rest are moved.
func TestPromote_CorruptDelayedJobDeadLettered(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	q, _ := relQueue(t, client, nil)
	ctx := context.Background()
	k := core.Of(q).Keys

	many := make([]any, 0, 2*wire.MaxFields+2)
	for i := range wire.MaxFields + 1 {
		many = append(many, "f"+strconv.Itoa(i), "x")
	}
	bad := map[string]string{
		"d-not-msgpack": "\xc1\xc1 not msgpack",
		"d-odd":         string(wire.Pack([]any{"v", "1", "payload"})),
		"d-boolean":     "\x92\xa1v\xc3",         // ["v", true]
		"d-map":         "\x81\xa1v\xa11",        // {"v": "1"}
		"d-two-values":  "\x92\xa1v\xa11\x90",    // ["v", "1"] []
		"d-empty":       "\x90",                  // []
		"d-nested":      "\x92\xa1v\x91\xa11",    // ["v", ["1"]]
		"d-many-fields": string(wire.Pack(many)), // more than MaxFields fields
	}
	var good []string
	put := func(tok, data string) {
		if err := client.HSet(ctx, k.DelayedJobs, tok, data).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.ZAdd(ctx, k.Delayed, redis.Z{Score: 0, Member: tok}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	i := 0
	for tok, data := range bad {
		payload := "good-" + strconv.Itoa(i)
		good = append(good, payload)
		put("d-good-"+strconv.Itoa(i), string(wire.Pack((&wire.Job{Payload: []byte(payload)}).Args())))
		put(tok, data)
		i++
	}

	cnt := newRelCounter()
	events := &relEvents{}
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		cnt.add(m.Payload)
		return nil
	}, streamq.ConsumerConfig{OnEvent: events.on})
	run := relRun(t, c)
	redistest.WaitFor(t, relWait, "the good delayed jobs handled", func() bool { return cnt.total.Load() >= int64(len(good)) })
	relSettled(t, q, int64(len(bad)), relWait)
	run.stop()
	cnt.exactlyOnce(t, good)

	for _, dl := range allDeadLetters(t, q) {
		data, ok := bad[dl.OriginalID]
		if !ok {
			t.Errorf("dead letter for %s, which is not one of the corrupt jobs", dl.OriginalID)
			continue
		}
		if dl.Reason != streamq.ReasonMalformed || !strings.Contains(dl.Error, "cannot be moved into the stream") {
			t.Errorf("%s: reason %q, error %q", dl.OriginalID, dl.Reason, dl.Error)
		}
		if dl.Fields["data"] != data {
			t.Errorf("%s: dead letter data %q, want the job's data unchanged", dl.OriginalID, dl.Fields["data"])
		}
		delete(bad, dl.OriginalID)
	}
	if len(bad) > 0 {
		t.Errorf("corrupt jobs not dead-lettered: %v", bad)
	}
	if n := len(events.of(streamq.EventDeadLettered)); n != 8 {
		t.Errorf("%d dead-letter events, want 8", n)
	}
}

// TestMaxmemory_ConsumerDrains: a consumer started while Redis is at
// maxmemory must read and run the backlog that filled Redis, and take over
// the jobs of a consumer that died (XREADGROUP, XACK and XAUTOCLAIM work at
// OOM; XGROUP CREATE is refused even for a group that exists, so starting
// must not need it).
func TestMaxmemory_ConsumerDrains(t *testing.T) {
	t.Parallel()
	const n = 200
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	q, p := relQueue(t, client, nil)
	payloads := numbers(0, n)
	for i := range payloads {
		payloads[i] += strings.Repeat(".", 2000)
	}
	enqueueAll(t, p, payloads)
	// A consumer that read some of them and died: they are taken over.
	if err := client.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: q.Group(), Consumer: "dead-worker", Streams: []string{core.Of(q).Keys.Stream, ">"}, Count: n / 4,
	}).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.AtMaxmemory(t, client)

	cnt := newRelCounter()
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		cnt.add(m.Payload)
		return nil
	}, streamq.ConsumerConfig{Concurrency: 8, MinIdle: 50 * time.Millisecond})
	run := relRun(t, c)
	redistest.WaitFor(t, relWait, "the backlog handled at maxmemory", func() bool { return cnt.total.Load() >= n })
	relSettled(t, q, 0, relWait)
	run.stop()
	cnt.exactlyOnce(t, payloads)
	// Every job of the dead consumer was taken over. Under load a job of
	// the live consumer whose acknowledgement came later than MinIdle may
	// be taken over too (and counted), never run twice: exactlyOnce above.
	if s := c.Stats(); s.Reclaimed < n/4 {
		t.Errorf("%d jobs taken over, want at least the dead consumer's %d", s.Reclaimed, n/4)
	}
}

// warnings is a slog.Handler that keeps the messages of WARN records.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	w.msgs = append(w.msgs, msg)
	return nil
}

func (w *warnings) find(s string) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.msgs {
		if strings.Contains(m, s) {
			return m, true
		}
	}
	return "", false
}

// TestConsumer_WarnsAboutEviction: under a maxmemory-policy other than
// noeviction Redis may evict streams, pending lists and locks, and jobs with
// them; a consumer says so when it starts. When INFO is denied it says
// nothing and runs.
func TestConsumer_WarnsAboutEviction(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--maxmemory-policy", "allkeys-lru")
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		user string
		warn bool
	}{{"default", true}, {"noinfo", false}} {
		t.Run(tc.user, func(t *testing.T) {
			opt := &redis.Options{Addr: srv.Addr()}
			if tc.user != "default" {
				opt.Username, opt.Password = tc.user, "pw"
			}
			client := redis.NewClient(opt)
			t.Cleanup(func() { _ = client.Close() })
			q, p := relQueue(t, client, nil)
			w := &warnings{}
			done := make(chan struct{}, 1)
			c := relConsumer(t, q, func(context.Context, *streamq.Message) error {
				done <- struct{}{}
				return nil
			}, streamq.ConsumerConfig{Logger: slog.New(w)})
			run := relRun(t, c)
			enqueueAll(t, p, []string{"job"})
			select {
			case <-done:
			case <-time.After(relWait):
				t.Fatal("the job did not run")
			}
			run.stop()
			msg, found := w.find("maxmemory-policy")
			if found != tc.warn || (found && !strings.Contains(msg, "allkeys-lru")) {
				t.Errorf("warning %q (found %v), want one naming allkeys-lru: %v", msg, found, tc.warn)
			}
		})
	}
}

// sizes records numbers from many goroutines.
type sizes struct {
	mu sync.Mutex
	v  []int64
}

func (s *sizes) add(n int64) {
	s.mu.Lock()
	s.v = append(s.v, n)
	s.mu.Unlock()
}

// overAfterFirst returns the first size above limit after the first
// non-zero one, and all of them.
func (s *sizes) overAfterFirst(limit int64) (int64, []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := true
	for _, n := range s.v {
		if n > 0 && first {
			first = false
			continue
		}
		if n > limit {
			return n, s.v
		}
	}
	return 0, s.v
}

// TestConsumer_ReadsWithinMaxFetchBytes: a read asks for fewer entries
// after large ones, so no read after the first (which cannot know) brings
// more than MaxFetchBytes of jobs into memory (here 1 MiB with jobs of
// 256 KiB and 16 free slots).
func TestConsumer_ReadsWithinMaxFetchBytes(t *testing.T) {
	t.Parallel()
	const (
		n      = 40
		size   = 256 << 10
		budget = 1 << 20
	)
	client := redistest.NewClient(t)
	reads := &sizes{}
	client.AddHook(redistest.AfterEach(func(cmd redis.Cmder) {
		if c, ok := cmd.(*redis.XStreamSliceCmd); ok && cmd.Name() == "xreadgroup" {
			var n int64
			for _, s := range c.Val() {
				for _, m := range s.Messages {
					for k, v := range m.Values {
						n += int64(len(k) + len(v.(string)))
					}
				}
			}
			reads.add(n)
		}
	}))
	q, p := relQueue(t, client, nil)
	payloads := numbers(0, n)
	for i := range payloads {
		payloads[i] += strings.Repeat(".", size-len(payloads[i]))
	}
	enqueueAll(t, p, payloads)
	cnt := newRelCounter()
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		cnt.add(m.Payload)
		return nil
	}, streamq.ConsumerConfig{Concurrency: 16, MaxFetchBytes: budget})
	run := relRun(t, c)
	redistest.WaitFor(t, relWait, "the jobs handled", func() bool { return cnt.total.Load() >= n })
	run.stop()
	cnt.exactlyOnce(t, payloads)
	if n, all := reads.overAfterFirst(budget); n > 0 {
		t.Errorf("a read brought %d bytes, MaxFetchBytes is %d (all reads: %v)", n, budget, all)
	}
}

// TestDeadLetter_EntryWithManyFields: an entry of about 4,000 fields
// (written by any client) cannot be passed to the dead-letter script as
// plain fields (Lua's unpack takes about 8,000 values); it was redelivered
// forever with an error each MinIdle. It is dead-lettered with its fields
// kept, whether it is malformed or its handler gives up on it, and a
// requeued one runs again.
func TestDeadLetter_EntryWithManyFields(t *testing.T) {
	t.Parallel()
	const fields = 4000
	client := redistest.NewClient(t)
	q, _ := relQueue(t, client, nil)
	ctx := context.Background()
	k := core.Of(q).Keys
	entry := func(values ...any) (string, map[string]string) {
		want := map[string]string{}
		for i := range fields {
			values = append(values, "f"+strconv.Itoa(i), strconv.Itoa(i))
		}
		for i := 0; i < len(values); i += 2 {
			want[values[i].(string)] = values[i+1].(string)
		}
		id, err := client.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: values}).Result()
		if err != nil {
			t.Fatal(err)
		}
		return id, want
	}
	malformed, wantMalformed := entry("payload", "no version")
	rejected, wantRejected := entry("v", "1", "payload", "rejected")

	var requeued atomic.Bool
	ran := make(chan string, 1)
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		if !requeued.Load() {
			return streamq.Permanent(errors.New("no"))
		}
		ran <- string(m.Payload)
		return nil
	}, streamq.ConsumerConfig{MinIdle: 100 * time.Millisecond})
	run := relRun(t, c)
	redistest.WaitFor(t, relWait, "both entries dead-lettered", func() bool { return c.Stats().DeadLettered == 2 })
	relSettled(t, q, 2, relWait)
	for _, dl := range allDeadLetters(t, q) {
		want := map[string]map[string]string{malformed: wantMalformed, rejected: wantRejected}[dl.OriginalID]
		if want == nil {
			t.Fatalf("dead letter of %s, not of one of the entries", dl.OriginalID)
		}
		if dl.OriginalID == rejected {
			// A job that ran carries its stable ID and error history too.
			if dl.Fields["jid"] != rejected || dl.Fields["errs"] == "" {
				t.Errorf("dead letter of %s: jid %q, errs %q", rejected, dl.Fields["jid"], dl.Fields["errs"])
			}
			want = maps.Clone(want)
			want["jid"], want["errs"] = dl.Fields["jid"], dl.Fields["errs"]
		}
		if len(dl.Fields) != len(want) {
			t.Errorf("dead letter of %s keeps %d fields, want %d", dl.OriginalID, len(dl.Fields), len(want))
		}
		for f, v := range want {
			if dl.Fields[f] != v {
				t.Fatalf("dead letter of %s: field %s = %q, want %q", dl.OriginalID, f, dl.Fields[f], v)
			}
		}
		if dl.OriginalID == rejected {
			requeued.Store(true)
			if _, err := q.DeadLetters().Requeue(ctx, dl.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case p := <-ran:
		if p != "rejected" {
			t.Errorf("requeued job ran with payload %q", p)
		}
	case <-time.After(relWait):
		t.Fatal("the requeued job did not run")
	}
	relSettled(t, q, 1, relWait)
	run.stop()
}

// TestMaxmemory_FailingJobBacksOff: a job that fails while Redis is at
// maxmemory cannot be written back for its retry (OOM). It must not run
// again every MinIdle (the reaper taking back what it could not settle):
// it stays held, not run, while Redis refuses, and runs once more after
// its backoff once Redis has room again.
func TestMaxmemory_FailingJobBacksOff(t *testing.T) {
	t.Parallel()
	const minIdle = 100 * time.Millisecond
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	q, p := relQueue(t, client, nil)
	enqueueAll(t, p, []string{"fails once"})
	redistest.AtMaxmemory(t, client)

	var runs atomic.Int64
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		if runs.Add(1) == 1 {
			return errors.New("fails at the first attempt")
		}
		return nil
	}, streamq.ConsumerConfig{MinIdle: minIdle, Backoff: func(int) time.Duration { return 300 * time.Millisecond }})
	run := relRun(t, c)
	redistest.WaitFor(t, relWait, "the first attempt", func() bool { return runs.Load() >= 1 })
	window := time.NewTimer(10 * minIdle)
	<-window.C // asserting that nothing happens takes a window: ten MinIdle
	if n := runs.Load(); n != 1 {
		t.Fatalf("the failed job ran %d times at maxmemory within 10 MinIdle; want once (it waits for room, held)", n)
	}
	if err := client.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, relWait, "the retry once Redis has room", func() bool { return runs.Load() >= 2 })
	relSettled(t, q, 0, relWait)
	run.stop()
	if n := runs.Load(); n != 2 {
		t.Errorf("the job ran %d times, want 2", n)
	}
}
