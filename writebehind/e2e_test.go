package writebehind_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/url"
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
	"github.com/streamq/streamq/internal/faultproxy"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/writebehind"
)

// TestWriteBehind_EndToEnd writes 10,000 random updates (sets and some
// deletes) over 1,000 keys with 16 goroutines through a Writer, persists
// them with two consumers, each with its own Handler on the same database,
// and checks that the database ends up holding exactly what the cache
// holds. With -short it writes 2,000 updates.
func TestWriteBehind_EndToEnd(t *testing.T) {
	t.Parallel()
	const keys = 1_000
	updates := 10_000
	if testing.Short() {
		updates = 2_000
	}
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			sink := newSink(t, d, "")
			q := newQueueOn(t, redistest.NewIsolatedClient(t), nil) // a large backlog
			w := newWriter(t, q, nil)
			var handlers []*writebehind.Handler
			for range 2 {
				h := newHandler(t, sink, nil)
				handlers = append(handlers, h)
				runConsumer(t, q, h, consumerConfig(streamq.ConsumerConfig{}))
			}

			start := time.Now()
			expect := workload(t, w, updates, keys, 16, 10, nil)
			t.Logf("wrote %d updates in %s", updates, time.Since(start).Round(time.Millisecond))
			waitDrained(t, q)
			t.Logf("persisted in %s", time.Since(start).Round(time.Millisecond))

			var total writebehind.HandlerStats
			for _, h := range handlers {
				s := h.Stats()
				total.Changes += s.Changes
				total.Rows += s.Rows
				total.Batches += s.Batches
				total.WriteErrors += s.WriteErrors
				total.Rejected += s.Rejected
			}
			t.Logf("handlers: %+v", total)
			if total.Changes < int64(updates) {
				t.Errorf("handlers committed %d changes, want at least %d", total.Changes, updates)
			}
			if total.Rejected != 0 || total.WriteErrors != 0 {
				t.Errorf("rejected %d, write errors %d; want none", total.Rejected, total.WriteErrors)
			}
			if total.Batches == 0 || total.Changes/total.Batches < 10 {
				t.Errorf("%d batches for %d changes: batching did not happen", total.Batches, total.Changes)
			}
			if n := deadLetters(t, q); n != 0 {
				t.Errorf("%d dead letters, want 0", n)
			}
			checkConsistent(t, w, sink.rows(t), expect)
		})
	}
}

// TestWriteBehind_Replay delivers an old batch of changes again after newer
// ones were persisted: the database keeps the newer data.
func TestWriteBehind_Replay(t *testing.T) {
	t.Parallel()
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sink := newSink(t, d, "")
			q := newQueue(t, nil)
			w := newWriter(t, q, nil)
			h := newHandler(t, sink, &writebehind.HandlerConfig{MaxLatency: 10 * time.Millisecond})
			runConsumer(t, q, h, consumerConfig(streamq.ConsumerConfig{}))

			// Old values, persisted.
			expect := workload(t, w, 300, 40, 4, 10, nil)
			waitDrained(t, q)
			old, err := core.Of(q).RDB.XRange(ctx, core.Of(q).Keys.Stream, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(old) != 300 {
				t.Fatalf("stream holds %d entries, want the 300 changes", len(old))
			}

			// Newer values (and deletions) of the same keys, persisted.
			for k, e := range workload(t, w, 300, 40, 4, 20, nil) {
				expect[k] = e
			}
			waitDrained(t, q)
			before := h.Stats().Changes

			// Replay the old entries as they were, in one go.
			pipe := core.Of(q).RDB.Pipeline()
			for _, m := range old {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: core.Of(q).Keys.Stream, Values: m.Values})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			waitDrained(t, q)
			if got := h.Stats().Changes - before; got != int64(len(old)) {
				t.Errorf("handler committed %d replayed changes, want %d", got, len(old))
			}
			checkConsistent(t, w, sink.rows(t), expect)
		})
	}
}

// flakySink fails every Write while down is set, with err (errSinkDown when
// nil), without calling the sink it wraps.
type flakySink struct {
	sink     writebehind.Sink
	err      error // set before the first Write
	down     atomic.Bool
	failures atomic.Int64
}

var errSinkDown = errors.New("test: sink is down")

func (s *flakySink) Write(ctx context.Context, changes []writebehind.Change) error {
	if s.down.Load() {
		s.failures.Add(1)
		if s.err != nil {
			return s.err
		}
		return errSinkDown
	}
	return s.sink.Write(ctx, changes)
}

// TestWriteBehind_SinkOutage makes the sink fail for a while (shorter than
// the retry budget) while updates keep coming: nothing is lost or
// dead-lettered, and the database catches up once the sink is back.
func TestWriteBehind_SinkOutage(t *testing.T) {
	t.Parallel()
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			sink := &flakySink{sink: newSink(t, d, "")}
			outage(t, sink.sink.(*testSink), sink,
				func() { sink.down.Store(true) },
				func() { sink.down.Store(false) })
			if sink.failures.Load() == 0 {
				t.Error("the sink never failed: the outage did not happen")
			}
		})
	}
}

// TestWriteBehind_PostgresOutage cuts the connections to PostgreSQL with a
// fault proxy and refuses new ones for a while: the changes are retried and
// written once the database is reachable again.
func TestWriteBehind_PostgresOutage(t *testing.T) {
	t.Parallel()
	// Probe the real server first, so that the test skips (or fails) with
	// the usual message when there is none.
	openDB(t, writebehind.DialectPostgres, "")

	u, err := url.Parse(postgresDSN())
	if err != nil || u.Host == "" {
		t.Skipf("POSTGRES_DSN is not a URL with a host; this test needs one to put a proxy in between")
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	proxy, err := faultproxy.New(target)
	if err != nil {
		t.Skipf("cannot proxy PostgreSQL at %s: %v", target, err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	u.Host = proxy.Addr()
	// Cleanups run in reverse order: the table is dropped (through the
	// proxy, which is open again by then) before the proxy closes.
	sink := newSink(t, writebehind.DialectPostgres, u.String())
	outage(t, sink, sink,
		func() { proxy.SetRefuse(true); proxy.CutAll() },
		func() { proxy.SetRefuse(false) })
}

// outage runs a consumer writing to sink, writes 500 updates, calls down,
// writes 500 more while the sink fails until some batches failed, calls up,
// writes 500 more, and checks that everything arrived without dead letters.
// The retry budget (40 attempts, backoff up to 2 s) is far longer than the
// outage.
func outage(t *testing.T, db *testSink, sink writebehind.Sink, down, up func()) {
	t.Helper()
	q := newQueue(t, nil)
	w := newWriter(t, q, nil)
	h := newHandler(t, sink, &writebehind.HandlerConfig{WriteTimeout: 5 * time.Second})
	c, _ := runConsumer(t, q, h, consumerConfig(streamq.ConsumerConfig{
		MaxDeliveries: 40,
		Backoff:       streamq.ExponentialBackoff(50*time.Millisecond, 2*time.Second),
	}))

	expect := workload(t, w, 500, 100, 4, 10, nil)
	waitDrained(t, q)

	down()
	failedBefore := h.Stats().WriteErrors
	for k, e := range workload(t, w, 500, 100, 4, 10, nil) {
		expect[k] = e
	}
	redistest.WaitFor(t, 30*time.Second, "3 failed batches during the outage", func() bool {
		return h.Stats().WriteErrors >= failedBefore+3
	})
	up()

	for k, e := range workload(t, w, 500, 100, 4, 10, nil) {
		expect[k] = e
	}
	waitDrained(t, q)
	cs, hs := c.Stats(), h.Stats()
	t.Logf("consumer: %+v; handler: %+v", cs, hs)
	if cs.Retried == 0 {
		t.Error("no change was retried: the outage did not happen")
	}
	if n := deadLetters(t, q); n != 0 {
		t.Errorf("%d dead letters, want none (the outage was shorter than the retry budget)", n)
	}
	checkConsistent(t, w, db.rows(t), expect)
}

// TestWriteBehind_EndToEndHash writes hashes (Writer.SetFields) mixed with
// strings and deletions of the same keys, so that keys switch between the
// two types, persists them with a consumer, and checks that the database
// ends up holding exactly what the cache holds: each hash as its canonical
// JSON, each string as it is: 5,000 updates over 500 keys, 2,000 with
// -short.
func TestWriteBehind_EndToEndHash(t *testing.T) {
	t.Parallel()
	updates := 5_000
	if testing.Short() {
		updates = 2_000
	}
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			sink := newSink(t, d, "")
			q := newQueueOn(t, redistest.NewIsolatedClient(t), nil) // a large backlog
			w := newWriter(t, q, nil)
			h := newHandler(t, sink, nil)
			runConsumer(t, q, h, consumerConfig(streamq.ConsumerConfig{}))

			expect := hashWorkload(t, w, updates, 500, 8, 10, 70)
			waitDrained(t, q)

			var hashes, strs, deleted int
			for _, e := range expect {
				switch {
				case e.deleted:
					deleted++
				case e.hash:
					hashes++
				default:
					strs++
				}
			}
			t.Logf("final state: %d hashes, %d strings, %d deleted; handler: %+v", hashes, strs, deleted, h.Stats())
			if hashes == 0 || strs == 0 || deleted == 0 {
				t.Fatalf("the workload ended with %d hashes, %d strings, %d deletions: want some of each", hashes, strs, deleted)
			}
			if s := h.Stats(); s.Rejected != 0 || s.WriteErrors != 0 || s.Changes < int64(updates) || s.Rows >= s.Changes {
				t.Errorf("handler stats %+v: want %d changes committed, coalesced into fewer rows, none rejected", s, updates)
			}
			if n := deadLetters(t, q); n != 0 {
				t.Errorf("%d dead letters, want 0", n)
			}
			rows := sink.rows(t)
			checkConsistent(t, w, rows, expect)
			// The stored hashes decode to the cached fields.
			for k, e := range expect {
				if !e.hash {
					continue
				}
				stored, err := writebehind.DecodeFields(rows[k].value)
				if err != nil {
					t.Fatalf("key %q: %v", k, err)
				}
				cached, _, err := w.GetFields(context.Background(), k)
				if err != nil || !maps.Equal(stored, cached) {
					t.Fatalf("key %q: stored fields %v, cached %v (%v)", k, stored, cached, err)
				}
			}
		})
	}
}

// errDatabaseGone is the error of a sink that stays down.
var errDatabaseGone = errors.New("test: database is gone (connection refused)")

// TestWriteBehind_SinkDownDeadLetters makes the sink fail every write for
// longer than the retry budget (MaxDeliveries 3, fast backoff): every change,
// hashes and deletions included, ends in the dead-letter stream with reason
// max_deliveries and the sink's error, nothing reaches the database, and the
// cache keeps the values. Once the sink works again and newer changes of a
// few keys were persisted, requeueing the dead letters makes the database
// equal the cache: the requeued changes keep their versions, so those the
// newer changes overtook are ignored.
func TestWriteBehind_SinkDownDeadLetters(t *testing.T) {
	t.Parallel()
	const (
		maxDeliveries = 3
		changes       = 300
	)
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := newSink(t, d, "")
			sink := &flakySink{sink: db}
			sink.down.Store(true)
			sink.err = errDatabaseGone
			q := newQueue(t, nil)
			w := newWriter(t, q, nil)
			h := newHandler(t, sink, &writebehind.HandlerConfig{MaxLatency: 10 * time.Millisecond})
			c, _ := runConsumer(t, q, h, consumerConfig(streamq.ConsumerConfig{
				MaxDeliveries:     maxDeliveries,
				Backoff:           streamq.ExponentialBackoff(5*time.Millisecond, 20*time.Millisecond),
				SchedulerInterval: 10 * time.Millisecond,
				Logger:            slog.New(slog.DiscardHandler), // one warning per dead letter
			}))

			// Versions come from the queue's counter: 1 to changes.
			expect := hashWorkload(t, w, changes, 60, 4, 10, 40)
			redistest.WaitFor(t, time.Minute, fmt.Sprintf("%d dead letters", changes), func() bool {
				n, err := q.DeadLetters().Len(ctx)
				return err == nil && n >= changes
			})
			waitDrained(t, q)

			dls := listDeadLetters(t, q)
			if len(dls) != changes {
				t.Fatalf("%d dead letters, want one per change: %d", len(dls), changes)
			}
			seen := make(map[int64]bool, changes)
			for _, dl := range dls {
				ch, err := writebehind.FromMessage(&streamq.Message{Payload: dl.Payload, Headers: dl.Headers})
				if err != nil {
					t.Fatalf("dead letter %s does not hold a change: %v", dl.ID, err)
				}
				if seen[ch.Version] || ch.Version < 1 || ch.Version > changes {
					t.Fatalf("dead letter %s: version %d twice or out of 1..%d", dl.ID, ch.Version, changes)
				}
				seen[ch.Version] = true
				if dl.Reason != streamq.ReasonMaxDeliveries || dl.Attempts != maxDeliveries {
					t.Errorf("dead letter %s: reason %q after %d attempts, want %q after %d", dl.ID, dl.Reason, dl.Attempts, streamq.ReasonMaxDeliveries, maxDeliveries)
				}
				if !strings.Contains(dl.Error, errDatabaseGone.Error()) {
					t.Errorf("dead letter %s: error %q does not carry the sink's error %q", dl.ID, dl.Error, errDatabaseGone)
				}
				if e := expect[ch.Key]; e.version == ch.Version && (e.deleted != ch.Deleted || e.hash != ch.Hash || !bytes.Equal(e.value, ch.Value)) {
					t.Errorf("dead letter %s holds %+v, want the key's last change %+v", dl.ID, ch, e)
				}
			}
			if len(dls) > 0 {
				t.Logf("a dead letter: reason %s, attempts %d, error %q", dls[0].Reason, dls[0].Attempts, dls[0].Error)
			}
			hs, cs := h.Stats(), c.Stats()
			if hs.Changes != 0 || hs.Batches != 0 || hs.WriteErrors < maxDeliveries || cs.DeadLettered != changes {
				t.Errorf("handler %+v, consumer %+v: want no commits, at least %d failed writes, %d dead-lettered", hs, cs, maxDeliveries, changes)
			}
			if rows := db.rows(t); len(rows) != 0 {
				t.Fatalf("the database holds %d rows although every write failed", len(rows))
			}
			checkCache(t, w, expect)

			// The database is back. Newer changes of the first 10 keys are
			// persisted before the dead letters are requeued.
			sink.down.Store(false)
			for k, e := range hashWorkload(t, w, 40, 10, 2, 10, 50) {
				expect[k] = e
			}
			waitDrained(t, q)
			missing := 0
			rows := db.rows(t)
			for k, e := range expect {
				if r, ok := rows[k]; !ok || r.version != e.version {
					missing++
				}
			}
			if missing == 0 {
				t.Fatal("the database already equals the cache before the requeue: the test proves nothing")
			}
			t.Logf("before the requeue the database misses the last change of %d of %d keys", missing, len(expect))
			n, err := q.DeadLetters().RequeueAll(ctx)
			if err != nil || n != changes {
				t.Fatalf("RequeueAll = %d, %v; want %d", n, err, changes)
			}
			waitDrained(t, q)
			if n := deadLetters(t, q); n != 0 {
				t.Errorf("%d dead letters after the requeue, want 0", n)
			}
			checkConsistent(t, w, db.rows(t), expect)
		})
	}
}

// listDeadLetters returns every dead letter of q, paging through them.
func listDeadLetters(t *testing.T, q *streamq.Queue) []streamq.DeadLetter {
	t.Helper()
	var (
		all    []streamq.DeadLetter
		cursor string
	)
	for range 1000 { // bounded: 1000 pages of 100
		page, next, err := q.DeadLetters().List(context.Background(), cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		cursor = next
	}
	t.Fatal("more than 100,000 dead letters")
	return nil
}

// TestWriteBehind_LargeVersions persists changes whose versions are at and
// beyond what a Lua number formats or holds exactly (1e14, 2^53) up to
// math.MaxInt64: each reaches the database with its exact version.
func TestWriteBehind_LargeVersions(t *testing.T) {
	t.Parallel()
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			sink := newSink(t, d, "")
			q := newQueue(t, nil)
			w := newWriter(t, q, nil)
			h := newHandler(t, sink, &writebehind.HandlerConfig{MaxLatency: 10 * time.Millisecond})
			runConsumer(t, q, h, consumerConfig(streamq.ConsumerConfig{}))

			expect := make(map[string]want)
			write := func(key, value string, wantVersion int64) {
				t.Helper()
				var (
					v   int64
					err error
				)
				if value == "" {
					v, err = w.Delete(ctx, key)
					expect[key] = want{deleted: true, version: v}
				} else {
					v, err = w.Set(ctx, key, []byte(value))
					expect[key] = want{value: []byte(value), version: v}
				}
				if err != nil || v != wantVersion {
					t.Fatalf("write %q = version %d, %v; want %d", key, v, err, wantVersion)
				}
			}
			seedCounter(t, q, "99999999999999") // as seeding from a clock would
			write("a", "at 1e14", 1e14)
			seedCounter(t, q, strconv.FormatInt(1<<53-1, 10))
			write("b", "at 2^53", 1<<53)
			write("c", "at 2^53+1", 1<<53+1)
			write("a", "at 2^53+2", 1<<53+2)
			seedCounter(t, q, strconv.FormatInt(math.MaxInt64-2, 10))
			write("d", "at MaxInt64-1", math.MaxInt64-1)
			write("b", "", math.MaxInt64)

			waitDrained(t, q)
			if n := deadLetters(t, q); n != 0 {
				for _, dl := range listDeadLetters(t, q) {
					t.Logf("dead letter %s: %s", dl.Reason, dl.Error)
				}
				t.Fatalf("%d dead letters, want 0", n)
			}
			checkConsistent(t, w, sink.rows(t), expect)
		})
	}
}

// lostCounterConsumer is the consumer configuration of the lost counter
// tests: quiet, since dead letters are expected.
// repairLogs returns the numbers logged by each repair of a version counter
// that went backwards (counter_before, sink_max_version, resynced_keys,
// uncached_keys, failed_keys), in the order of the log lines.
func repairLogs(log string) []map[string]int {
	var repairs []map[string]int
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "version counter went backwards") {
			continue
		}
		r := make(map[string]int)
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if n, err := strconv.Atoi(v); ok && err == nil {
				r[k] = n
			}
		}
		repairs = append(repairs, r)
	}
	return repairs
}

func lostCounterConsumer() *streamq.ConsumerConfig {
	return consumerConfig(streamq.ConsumerConfig{Logger: slog.New(slog.DiscardHandler)})
}

// lostCounterSetup persists 20 keys (k00 to k19, versions 1 to 20) through a
// handler made by newH, then deletes the version counter, as an eviction, a
// deletion or a failover to a replica that missed its increments would. The
// consumer keeps running until stop is called.
func lostCounterSetup(t *testing.T, d writebehind.Dialect, newH func(*testSink, *writebehind.Writer) *writebehind.Handler) (
	sink *testSink, q *streamq.Queue, w *writebehind.Writer, h *writebehind.Handler, expect map[string]want, stop func(),
) {
	t.Helper()
	ctx := t.Context()
	sink = newSink(t, d, "")
	q = newQueue(t, nil)
	w = newWriter(t, q, nil)
	h = newH(sink, w)
	_, stop = runConsumer(t, q, h, lostCounterConsumer())
	expect = make(map[string]want)
	for i := range 20 {
		key, value := fmt.Sprintf("k%02d", i), fmt.Sprintf("before-%d", i)
		v, err := w.Set(ctx, key, []byte(value))
		if err != nil || v != int64(i+1) {
			t.Fatalf("Set(%q) = %d, %v; want version %d", key, v, err, i+1)
		}
		expect[key] = want{value: []byte(value), version: v}
	}
	waitDrained(t, q)
	if err := core.Of(q).RDB.Del(ctx, core.Of(q).Keys.Part(writebehind.VersionKeyPart)).Err(); err != nil {
		t.Fatal(err)
	}
	return sink, q, w, h, expect, stop
}

// TestWriteBehind_CounterLost loses the version counter: the changes that
// get versions the database already holds are dead-lettered with
// ErrVersionRegressed instead of being ignored silently, and the repair of
// the README (raise the counter, resync the keys) brings the database back
// in step with the cache.
func TestWriteBehind_CounterLost(t *testing.T) {
	t.Parallel()
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			sink, q, w, _, expect, _ := lostCounterSetup(t, d, func(s *testSink, _ *writebehind.Writer) *writebehind.Handler {
				return newHandler(t, s, &writebehind.HandlerConfig{MaxLatency: 10 * time.Millisecond})
			})
			writes := []struct {
				key, value string // value "" deletes
				regressed  bool
			}{
				{"k00", "after-0", true},  // version 1 again, issued later
				{"k05", "after-5", true},  // version 2, the row has 6
				{"k19", "", true},         // a deletion at version 3, the row has 20
				{"new", "new-key", false}, // no row: written
				{"k03", "after-3", false}, // version 5, the row has 4: written
			}
			for _, wr := range writes {
				var (
					v   int64
					err error
				)
				if wr.value == "" {
					v, err = w.Delete(ctx, wr.key)
					expect[wr.key] = want{deleted: true, version: v}
				} else {
					v, err = w.Set(ctx, wr.key, []byte(wr.value))
					expect[wr.key] = want{value: []byte(wr.value), version: v}
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			waitDrained(t, q)

			// Nothing was dropped silently: each regressed change is a dead
			// letter that says what happened and what to do.
			refused := map[string]bool{}
			for _, dl := range listDeadLetters(t, q) {
				key := dl.Headers[writebehind.HeaderKey]
				refused[key] = true
				if dl.Reason != streamq.ReasonPermanent || !strings.Contains(dl.Error, writebehind.ErrVersionRegressed.Error()) ||
					!strings.Contains(dl.Error, "EnsureVersionAtLeast") {
					t.Errorf("dead letter of %s: %s: %s; want a permanent ErrVersionRegressed with the fix", key, dl.Reason, dl.Error)
				}
			}
			for _, wr := range writes {
				if refused[wr.key] != wr.regressed {
					t.Errorf("%s dead-lettered: %v, want %v (dead letters of %v)", wr.key, refused[wr.key], wr.regressed, refused)
				}
			}
			rows := sink.rows(t)
			if string(rows["k00"].value) != "before-0" || string(rows["new"].value) != "new-key" || string(rows["k03"].value) != "after-3" {
				t.Fatalf("rows before the repair: k00 %q, new %q, k03 %q", rows["k00"].value, rows["new"].value, rows["k03"].value)
			}

			// The repair, as the README describes it.
			maxVersion, err := sink.MaxVersion(ctx)
			if err != nil || maxVersion != 20 {
				t.Fatalf("MaxVersion = %d, %v; want 20", maxVersion, err)
			}
			if previous, err := w.EnsureVersionAtLeast(ctx, maxVersion); err != nil || previous != 5 {
				t.Fatalf("EnsureVersionAtLeast = %d, %v; want the lost counter's 5", previous, err)
			}
			for _, dl := range listDeadLetters(t, q) {
				ch, err := writebehind.FromMessage(&streamq.Message{Payload: dl.Payload, Headers: dl.Headers})
				if err != nil {
					t.Fatal(err)
				}
				v, found, err := w.Resync(ctx, ch.Key)
				switch {
				case err != nil:
					t.Fatal(err)
				case !found && ch.Deleted:
					v, err = w.Delete(ctx, ch.Key)
					expect[ch.Key] = want{deleted: true, version: v}
				case !found:
					t.Fatalf("%s is not cached", ch.Key)
				default:
					e := expect[ch.Key]
					e.version = v
					expect[ch.Key] = e
				}
				if err != nil || v <= maxVersion {
					t.Fatalf("repair of %s = version %d, %v; want above %d", ch.Key, v, err, maxVersion)
				}
				if _, err := q.DeadLetters().Purge(ctx, dl.ID); err != nil {
					t.Fatal(err)
				}
			}
			waitDrained(t, q)
			if n := deadLetters(t, q); n != 0 {
				t.Fatalf("%d dead letters after the repair, want 0", n)
			}
			checkConsistent(t, w, sink.rows(t), expect)
		})
	}
}

// logBuffer is an io.Writer for a test's logger, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestWriteBehind_CounterLostRepaired loses the version counter while
// writers keep going, with HandlerConfig.Writer set: the handler raises the
// counter and resyncs the refused keys by itself, so the database ends up
// holding what the cache holds, and only a deletion, which cannot be
// resynced from the cache, is dead-lettered.
func TestWriteBehind_CounterLostRepaired(t *testing.T) {
	t.Parallel()
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var logs logBuffer
			sink, q, w, h, expect, stop := lostCounterSetup(t, d, func(s *testSink, w *writebehind.Writer) *writebehind.Handler {
				return newHandler(t, s, &writebehind.HandlerConfig{
					MaxLatency: 10 * time.Millisecond,
					Writer:     w,
					Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
				})
			})
			// While no consumer runs, so that nothing overtakes them: a
			// deletion of k19 at version 1 (the row has 20), and Sets of k18
			// to k10 at versions 2 to 10, all below their rows' versions.
			stop()
			v, err := w.Delete(ctx, "k19")
			if err != nil {
				t.Fatal(err)
			}
			expect["k19"] = want{deleted: true, version: v}
			for i := 18; i >= 10; i-- {
				key, value := fmt.Sprintf("k%02d", i), fmt.Sprintf("after-%d", i)
				v, err := w.Set(ctx, key, []byte(value))
				if err != nil {
					t.Fatal(err)
				}
				expect[key] = want{value: []byte(value), version: v}
			}
			runConsumer(t, q, h, lostCounterConsumer())
			waitDrained(t, q)

			if s := h.Stats(); s.Resynced != 9 || s.Rejected != 1 {
				t.Fatalf("stats %+v, want 9 changes resynced (k10 to k18) and 1 rejected (k19)", s)
			}
			// One repair per batch that met a regressed version: the ten
			// changes usually form one batch, but a busy machine may split
			// them. The first repair finds the lost counter; together they
			// resync k10 to k18 and find k19 uncached.
			repairs := repairLogs(logs.String())
			if len(repairs) == 0 || repairs[0]["counter_before"] != 10 || repairs[0]["sink_max_version"] != 20 {
				t.Errorf("log %q: want a repair from counter_before=10 to sink_max_version=20 first", logs.String())
			}
			var resynced, uncached int
			for _, r := range repairs {
				resynced += r["resynced_keys"]
				uncached += r["uncached_keys"]
			}
			if resynced != 9 || uncached != 1 {
				t.Errorf("log %q: the repairs resynced %d keys and found %d uncached, want 9 and 1", logs.String(), resynced, uncached)
			}
			letters := listDeadLetters(t, q)
			if len(letters) != 1 || letters[0].Headers[writebehind.HeaderKey] != "k19" ||
				!strings.Contains(letters[0].Error, "not in the cache") {
				for _, dl := range letters {
					t.Logf("dead letter of %s: %s", dl.Headers[writebehind.HeaderKey], dl.Error)
				}
				t.Fatalf("%d dead letters, want only the deletion of k19, refused as not cached", len(letters))
			}
			v, err = w.Delete(ctx, "k19") // the counter was raised: written
			if err != nil || v <= 20 {
				t.Fatalf("Delete after the repair = version %d, %v; want above 20", v, err)
			}
			expect["k19"] = want{deleted: true, version: v}
			if _, err := q.DeadLetters().Purge(ctx, letters[0].ID); err != nil {
				t.Fatal(err)
			}
			// Writers keep going.
			maps.Copy(expect, workload(t, w, 400, 19, 4, 0, nil))
			waitDrained(t, q)
			if n := deadLetters(t, q); n != 0 {
				t.Fatalf("%d dead letters, want 0", n)
			}
			t.Logf("stats %+v", h.Stats())
			// The resynced rows carry the resync's version, newer than the
			// regressed one the writer returned: compare values, and
			// versions only as a lower bound.
			rows := sink.rows(t)
			keys := slices.Sorted(maps.Keys(expect))
			cached, _ := readCache(t, w, keys)
			for _, k := range keys {
				e, r := expect[k], rows[k]
				c, inCache := cached[k]
				switch {
				case e.deleted:
					if inCache || !r.deleted || r.version < e.version {
						t.Errorf("key %q: deleted at version %d, but cached %v, row %+v", k, e.version, inCache, r)
					}
				case !inCache || !bytes.Equal(c, e.value) || r.deleted || !bytes.Equal(r.value, e.value) || r.version < e.version:
					t.Errorf("key %q: cache %q, row %q (version %d, deleted %v); want %q at version %d or later", k, c, r.value, r.version, r.deleted, e.value, e.version)
				}
			}
		})
	}
}

// TestWriteBehind_LargeValues persists values of 1 MiB with batches bounded
// to 4 MiB: every Sink.Write (one transaction) stays within the bound, and
// every value arrives exactly.
func TestWriteBehind_LargeValues(t *testing.T) {
	t.Parallel()
	const (
		limit = 4 << 20
		size  = 1 << 20
	)
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			sink := newSink(t, d, "")
			q := newQueue(t, nil)
			w := newWriter(t, q, nil)
			var (
				mu      sync.Mutex
				flushes []writebehind.FlushInfo
			)
			h := newHandler(t, sink, &writebehind.HandlerConfig{
				MaxBatchBytes: limit,
				MaxLatency:    50 * time.Millisecond,
				OnFlush: func(fi writebehind.FlushInfo) {
					mu.Lock()
					defer mu.Unlock()
					flushes = append(flushes, fi)
				},
			})
			expect := make(map[string]want)
			for i := range 24 {
				key := fmt.Sprintf("big%02d", i%12)
				value := bytes.Repeat([]byte{byte('a' + i)}, size-len(key)+i%3) // about 1 MiB with the key
				v, err := w.Set(ctx, key, value)
				if err != nil {
					t.Fatal(err)
				}
				expect[key] = want{value: value, version: v}
			}
			// The consumer starts with the whole backlog waiting, so the
			// batches fill up by size.
			runConsumer(t, q, h, consumerConfig(streamq.ConsumerConfig{}))
			waitDrained(t, q)
			mu.Lock()
			defer mu.Unlock()
			var total int
			for _, fi := range flushes {
				total += fi.Changes
				if fi.Err != nil || fi.Bytes > limit && fi.Rows > 1 {
					t.Errorf("flush %+v: want a commit of at most %d bytes, or of a single change", fi, limit)
				}
			}
			if total != 24 || len(flushes) < 24/4 {
				t.Errorf("%d changes in %d batches, want 24 in at least 6 (4 per batch at the most)", total, len(flushes))
			}
			if n := deadLetters(t, q); n != 0 {
				t.Fatalf("%d dead letters, want 0", n)
			}
			checkConsistent(t, w, sink.rows(t), expect)
		})
	}
}
