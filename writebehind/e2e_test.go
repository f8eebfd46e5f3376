package writebehind_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/faultproxy"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/writebehind"
)

// TestWriteBehind_EndToEnd writes 50,000 random updates (sets and some
// deletes) over 1,000 keys through a Writer, persists them with two
// consumers, each with its own Handler on the same database, and checks that
// the database ends up holding exactly what the cache holds. With -short it
// writes 5,000 updates.
func TestWriteBehind_EndToEnd(t *testing.T) {
	t.Parallel()
	const keys = 1_000
	updates := 50_000
	if testing.Short() {
		updates = 5_000
	}
	for _, d := range e2eDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			sink := newSink(t, d, "")
			q := newQueue(t, nil)
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
			old, err := q.Client().XRange(ctx, q.StreamKey(), "-", "+").Result()
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
			pipe := q.Client().Pipeline()
			for _, m := range old {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: q.StreamKey(), Values: m.Values})
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

// flakySink fails every Write while down is set.
type flakySink struct {
	sink     writebehind.Sink
	down     atomic.Bool
	failures atomic.Int64
}

var errSinkDown = errors.New("test: sink is down")

func (s *flakySink) Write(ctx context.Context, changes []writebehind.Change) error {
	if s.down.Load() {
		s.failures.Add(1)
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

// outage runs a consumer writing to sink, writes updates, calls down, writes
// more while the sink fails until some batches failed, calls up, writes more,
// and checks that everything arrived without dead letters. The retry budget
// (40 attempts, backoff up to 2 s) is far longer than the outage.
func outage(t *testing.T, db *testSink, sink writebehind.Sink, down, up func()) {
	t.Helper()
	q := newQueue(t, nil)
	w := newWriter(t, q, nil)
	h := newHandler(t, sink, &writebehind.HandlerConfig{WriteTimeout: 5 * time.Second})
	c, _ := runConsumer(t, q, h, consumerConfig(streamq.ConsumerConfig{
		MaxDeliveries: 40,
		Backoff:       streamq.ExponentialBackoff(50*time.Millisecond, 2*time.Second),
	}))

	expect := workload(t, w, 1000, 100, 4, 10, nil)
	waitDrained(t, q)

	down()
	failedBefore := h.Stats().WriteErrors
	for k, e := range workload(t, w, 1000, 100, 4, 10, nil) {
		expect[k] = e
	}
	redistest.WaitFor(t, 30*time.Second, "3 failed batches during the outage", func() bool {
		return h.Stats().WriteErrors >= failedBefore+3
	})
	up()

	for k, e := range workload(t, w, 1000, 100, 4, 10, nil) {
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
