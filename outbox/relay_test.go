package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/faultproxy"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/outbox"
	"github.com/streamq/streamq/outbox/postgres"
	"github.com/streamq/streamq/outbox/sqlite"
)

// relayAll runs r until a batch finds nothing to move.
func relayAll(t testing.TB, r *outbox.Relay) int {
	t.Helper()
	total := 0
	for range 10_000 {
		n, err := r.RunOnce(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
	t.Fatal("the relay did not run out of rows in 10,000 batches")
	return total
}

// checkJobIDs fails the test unless every job in q's stream has the job ID
// of its row (outbox.JobID: "outbox:" and 32 hex digits), each a different
// one, and the relay left no mark of the earlier design in Redis.
func checkJobIDs(t testing.TB, c redis.UniversalClient, q *streamq.Queue) {
	t.Helper()
	entries, err := c.XRange(t.Context(), keys(q).Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		jid, _ := e.Values["jid"].(string)
		row, ok := strings.CutPrefix(jid, "outbox:")
		if !ok || len(row) != 32 || outbox.JobID(row) != jid || seen[jid] {
			t.Fatalf("entry %s has job ID %q: want outbox:<row ID>, once", e.ID, jid)
		}
		seen[jid] = true
	}
	if marks := redistest.ScanKeys(t, c, keys(q).OutboxMark("*")); len(marks) != 0 {
		t.Errorf("the relay left marks %v", marks)
	}
}

// TestRelay_CommitRollback: of many transactions, each committed one's job
// reaches Redis exactly once and no rolled-back one's does; the table ends
// empty and each job has its row's job ID.
func TestRelay_CommitRollback(t *testing.T) {
	t.Parallel()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			tb := openTable(t, driver, true)
			c := redistest.NewClient(t)
			q, p := newQueue(t, c)
			want := tb.enqueueN(t, q, "job", 150, func(i int) bool { return i%3 == 2 })
			r := newRelay(t, tb.store, outbox.RelayConfig{BatchSize: 40}, p)
			if n := relayAll(t, r); n != len(want) {
				t.Errorf("relayed %d rows, want %d", n, len(want))
			}
			checkOnce(t, payloads(t, c, q), want)
			b, err := r.Backlog(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if b.Rows != 0 {
				t.Errorf("backlog %+v after relaying, want empty", b)
			}
			checkJobIDs(t, c, q)
		})
	}
}

// TestRelay_Options: the enqueue options travel with the row: headers, and
// a delay (counted from the insert) that puts the job in the delayed set.
// Options the outbox cannot keep exactly once, and jobs over the queue's
// limits, fail at the enqueue with nothing written.
func TestRelay_Options(t *testing.T) {
	t.Parallel()
	tb := openTable(t, "sqlite", false)
	c := redistest.NewClient(t)
	q, err := streamq.NewQueue(c, redistest.Name(t), &streamq.QueueConfig{MaxPayloadBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	redistest.DeleteKeysAtCleanup(t, c, keys(q).Pattern())
	if err := q.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	inTx(t, tb.db, true, func(tx *sql.Tx) error {
		if _, err := tb.enqueue(t.Context(), tx, q, []byte("now"), streamq.WithHeader("k", "v")); err != nil {
			return err
		}
		_, err := tb.enqueue(t.Context(), tx, q, []byte("later"), streamq.ProcessIn(time.Hour))
		return err
	})
	for _, tc := range []struct {
		name string
		opts []streamq.EnqueueOption
		pay  string
		want string
	}{
		{"unique", []streamq.EnqueueOption{streamq.Unique("k", time.Minute)}, "x", "Unique"},
		{"negative delay", []streamq.EnqueueOption{streamq.ProcessIn(-time.Second)}, "x", "ProcessIn"},
		{"too large", nil, "more than ten bytes", "too large"},
	} {
		inTx(t, tb.db, true, func(tx *sql.Tx) error {
			_, err := tb.enqueue(t.Context(), tx, q, []byte(tc.pay), tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: enqueue error %v, want one about %q", tc.name, err, tc.want)
			}
			return nil
		})
	}
	inTx(t, tb.db, true, func(tx *sql.Tx) error {
		if _, err := tb.enqueue(t.Context(), tx, nil, []byte("x")); err == nil {
			t.Error("enqueue with a nil queue succeeded")
		}
		return nil
	})
	r := newRelay(t, tb.store, outbox.RelayConfig{}, p)
	if n := relayAll(t, r); n != 2 {
		t.Fatalf("relayed %d rows, want 2 (the refused jobs must not be written)", n)
	}
	entries := c.XRange(t.Context(), keys(q).Stream, "-", "+").Val()
	if len(entries) != 1 || entries[0].Values["payload"] != "now" || !strings.Contains(fmt.Sprint(entries[0].Values["headers"]), `"k":"v"`) {
		t.Errorf("stream holds %v, want the job \"now\" with header k=v", entries)
	}
	due := c.ZRangeWithScores(t.Context(), keys(q).Delayed, 0, -1).Val()
	if len(due) != 1 {
		t.Fatalf("delayed set holds %v, want the job \"later\"", due)
	}
	if in := time.Until(time.UnixMilli(int64(due[0].Score))); in < 59*time.Minute || in > time.Hour {
		t.Errorf("the delayed job is due in %s, want about 1h", in)
	}
}

// TestRelay_Racing: two and three relays at once over one table, each
// working on two batches at once, while rows are committed: every job
// once, nothing left.
func TestRelay_Racing(t *testing.T) {
	t.Parallel()
	for _, driver := range drivers {
		for _, relays := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d", driver, relays), func(t *testing.T) {
				t.Parallel()
				tb := openTable(t, driver, true)
				c := redistest.NewClient(t)
				q, p := newQueue(t, c)
				for i := range relays {
					// Small batches, two at once per relay: many claims race.
					r := newRelay(t, tb.store, outbox.RelayConfig{BatchSize: 7, Batches: 2, PollInterval: 10 * time.Millisecond}, p)
					redistest.Background(t, fmt.Sprintf("relay %d", i), time.Minute, r.Run)
				}
				want := tb.enqueueN(t, q, "job", 300, nil)
				tb.waitEmpty(t, time.Minute)
				checkOnce(t, payloads(t, c, q), want)
				checkJobIDs(t, c, q)
			})
		}
	}
}

// TestRelay_LostReply: the reply to a relay's enqueue is lost (the proxy
// ends the connection once Redis ran the script, and the client does not
// retry): the relay gives the row back, and the next batch finds the
// row's job ID taken: one job, and the row is removed.
func TestRelay_LostReply(t *testing.T) {
	t.Parallel()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			tb := openTable(t, driver, false)
			proxy, err := faultproxy.New(redistest.Addr())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			q, p := newQueue(t, c)
			want := tb.enqueueN(t, q, "job", 5, nil)
			// The script must be in Redis's cache, or the EVALSHA the proxy
			// waits for gets NOSCRIPT and the client's EVAL runs it instead.
			if err := rdb.Scripts()["enqueue_ids"].Load(t.Context(), c).Err(); err != nil {
				t.Fatal(err)
			}
			dropped := proxy.DropReply(faultproxy.Command("EVALSHA", rdb.Scripts()["enqueue_ids"].Hash()))
			r := newRelay(t, tb.store, outbox.RelayConfig{}, p)
			n, err := r.RunOnce(t.Context())
			// The client can see the cut before the proxy reports it: wait.
			select {
			case <-dropped:
			case <-time.After(10 * time.Second):
				t.Fatalf("no reply was dropped (relayed %d, %v)", n, err)
			}
			if err == nil || n != 0 {
				t.Errorf("batch with a lost reply: relayed %d rows, error %v; want 0 and the error", n, err)
			}
			checkOnce(t, payloads(t, c, q), want) // Redis ran the script
			relayAll(t, r)
			checkOnce(t, payloads(t, c, q), want)
			tb.waitEmpty(t, 10*time.Second)
			checkJobIDs(t, c, q)
		})
	}
}

// TestRelay_RedisDown: while Redis is stopped, committed rows wait and the
// relay keeps trying; once Redis is back, every row is enqueued once.
func TestRelay_RedisDown(t *testing.T) {
	t.Parallel()
	tb := openTable(t, "postgres", true)
	// Kept on disk at every write, so the jobs relayed before the stop survive it.
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	q, p := newQueue(t, c)
	r := newRelay(t, tb.store, outbox.RelayConfig{BatchSize: 10, PollInterval: 50 * time.Millisecond}, p)
	redistest.Background(t, "relay", 2*time.Minute, r.Run)
	want := tb.enqueueN(t, q, "before", 20, nil)
	tb.waitEmpty(t, 30*time.Second)
	srv.Stop()
	want = append(want, tb.enqueueN(t, q, "during", 50, func(i int) bool { return i%5 == 0 })...)
	b, err := tb.store.Backlog(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if b.Rows != 40 {
		t.Errorf("backlog while Redis is down: %d rows, want 40", b.Rows)
	}
	srv.Restart()
	tb.waitEmpty(t, time.Minute)
	checkOnce(t, payloads(t, c, q), want)
}

// TestRelay_RowErrors: a row of a queue the relay has no producer for
// waits with its error and a backoff, visible in the backlog; the other
// rows move.
func TestRelay_RowErrors(t *testing.T) {
	t.Parallel()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			tb := openTable(t, driver, false)
			c := redistest.NewClient(t)
			q, p := newQueue(t, c)
			other, _ := newQueue(t, c)
			want := tb.enqueueN(t, q, "job", 3, nil)
			tb.enqueueN(t, other, "stray", 1, nil)
			r := newRelay(t, tb.store, outbox.RelayConfig{}, p)
			if n := relayAll(t, r); n != 3 {
				t.Errorf("relayed %d, want 3", n)
			}
			checkOnce(t, payloads(t, c, q), want)
			b, err := r.Backlog(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if b.Rows != 1 || b.Failing != 1 || len(b.Queues) != 1 || b.Queues[0].Queue != other.Name() ||
				!strings.Contains(b.Queues[0].LastError, "RelayConfig.Producers") {
				t.Errorf("backlog %+v, want the stray row failing with an error that names RelayConfig.Producers", b)
			}
			if b.Lag != 0 {
				t.Errorf("backlog lag %s, want 0: the only row waits for its retry after a failure", b.Lag)
			}
		})
	}
}

// TestPostgres_Notify: a relay that polls once an hour relays committed
// rows at once: it wakes on the notification of the commit.
func TestPostgres_Notify(t *testing.T) {
	t.Parallel()
	tb := openTable(t, "postgres", true)
	c := redistest.NewClient(t)
	q, p := newQueue(t, c)
	r := newRelay(t, tb.store, outbox.RelayConfig{PollInterval: time.Hour}, p)
	redistest.Background(t, "relay", 2*time.Minute, r.Run)
	waitListening(t, tb)
	var want []string
	for i := range 5 {
		want = append(want, tb.enqueueN(t, q, fmt.Sprintf("job%d", i), 1, nil)...)
		tb.waitEmpty(t, 20*time.Second)
	}
	checkOnce(t, payloads(t, c, q), want)
}

// waitListening waits until a session of the test PostgreSQL listens on the
// table's channel.
func waitListening(t testing.TB, tb *table) {
	t.Helper()
	redistest.WaitFor(t, 30*time.Second, "the relay to LISTEN", func() bool {
		var n int
		err := tb.db.QueryRowContext(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, `LISTEN "`+tb.name+`"`).Scan(&n)
		return err == nil && n > 0
	})
}

// TestPostgres_EnqueuePgx: a pgx transaction enqueues as a database/sql
// one does: committed once, rolled back never.
func TestPostgres_EnqueuePgx(t *testing.T) {
	t.Parallel()
	tb := openTable(t, "postgres", true)
	ob := tb.store.(*postgres.Outbox)
	c := redistest.NewClient(t)
	q, p := newQueue(t, c)
	conn, err := pgx.Connect(t.Context(), testDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, commit := range []bool{true, false} {
		tx, err := conn.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ob.EnqueuePgx(t.Context(), tx, q, []byte(fmt.Sprint(commit))); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(t.Context())
		} else {
			err = tx.Rollback(t.Context())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	relayAll(t, newRelay(t, tb.store, outbox.RelayConfig{}, p))
	checkOnce(t, payloads(t, c, q), []string{"true"})
}

// TestMigrate_Idempotent: running the migration again changes nothing and
// keeps the rows.
func TestMigrate_Idempotent(t *testing.T) {
	t.Parallel()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			tb := openTable(t, driver, false)
			c := redistest.NewClient(t)
			q, _ := newQueue(t, c)
			tb.enqueueN(t, q, "job", 2, nil)
			var err error
			switch ob := tb.store.(type) {
			case *postgres.Outbox:
				err = ob.Migrate(t.Context())
			case interface{ Migrate(context.Context) error }:
				err = ob.Migrate(t.Context())
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := tb.store.Backlog(t.Context())
			if err != nil || b.Rows != 2 {
				t.Errorf("backlog after a second migration: %+v, %v; want 2 rows", b, err)
			}
		})
	}
}

// TestNewRelay_Config: bad configs fail with errors that name the field.
func TestNewRelay_Config(t *testing.T) {
	t.Parallel()
	tb := openTable(t, "sqlite", false)
	c := redistest.NewClient(t)
	q, p := newQueue(t, c)
	p2, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	qd, err := streamq.NewQueue(c, redistest.Name(t)+"-nodone", &streamq.QueueConfig{DoneRetention: -1})
	if err != nil {
		t.Fatal(err)
	}
	noDone, err := streamq.NewProducer(qd, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		store outbox.Store
		cfg   *outbox.RelayConfig
		want  string
	}{
		{"nil store", nil, &outbox.RelayConfig{Producers: []*streamq.Producer{p}}, "store"},
		{"nil config", tb.store, nil, "RelayConfig"},
		{"no producers", tb.store, &outbox.RelayConfig{}, "RelayConfig.Producers"},
		{"nil producer", tb.store, &outbox.RelayConfig{Producers: []*streamq.Producer{nil}}, "Producers[0]"},
		{"two of a queue", tb.store, &outbox.RelayConfig{Producers: []*streamq.Producer{p, p2}}, "Producers[1]"},
		{"negative batch", tb.store, &outbox.RelayConfig{Producers: []*streamq.Producer{p}, BatchSize: -1}, "BatchSize"},
		{"negative batches", tb.store, &outbox.RelayConfig{Producers: []*streamq.Producer{p}, Batches: -1}, "Batches"},
		{"negative poll", tb.store, &outbox.RelayConfig{Producers: []*streamq.Producer{p}, PollInterval: -1}, "PollInterval"},
		{"retention", tb.store, &outbox.RelayConfig{Producers: []*streamq.Producer{p}, Retention: time.Hour}, "Retention"},
		{"no done markers", tb.store, &outbox.RelayConfig{Producers: []*streamq.Producer{p, noDone}}, "Producers[1]"},
	} {
		_, err := outbox.NewRelay(tc.store, tc.cfg)
		var ce *streamq.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(ce.Field, tc.want) {
			t.Errorf("%s: %v, want a ConfigError about %s", tc.name, err, tc.want)
		}
	}
}

// TestRelay_MinReplicas: with a producer that waits for a replica, rows are
// removed once the replica holds their jobs; while it is down, the rows stay
// (the jobs are on the master), and once it is back they are removed
// without being enqueued again.
func TestRelay_MinReplicas(t *testing.T) {
	t.Parallel()
	tb := openTable(t, "sqlite", false)
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	c := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	q, err := streamq.NewQueue(c, redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, &streamq.ProducerConfig{MinReplicas: 1, ReplicaTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, tb.store, outbox.RelayConfig{}, p)
	want := tb.enqueueN(t, q, "first", 5, nil)
	relayAll(t, r)
	checkOnce(t, payloads(t, rc, q), want) // on the replica, once the rows are gone
	replica.Stop()
	want = append(want, tb.enqueueN(t, q, "second", 3, nil)...)
	if n, err := r.RunOnce(t.Context()); n != 0 || !errors.Is(err, streamq.ErrNotReplicated) {
		t.Errorf("relay without the replica: removed %d rows, error %v; want 0 and ErrNotReplicated", n, err)
	}
	if b, err := tb.store.Backlog(t.Context()); err != nil || b.Rows != 3 {
		t.Fatalf("backlog without the replica: %+v, %v; want 3 rows", b, err)
	}
	replica.Restart()
	redistest.WaitFor(t, 30*time.Second, "the rows to go once the replica is back", func() bool {
		_, _ = r.RunOnce(t.Context())
		b, err := tb.store.Backlog(t.Context())
		return err == nil && b.Rows == 0
	})
	checkOnce(t, payloads(t, c, q), want)
}

// sendMail is the typed args of TestRelay_Typed.
type sendMail struct {
	To string `json:"to"`
}

func (sendMail) Kind() string { return "send_mail" }

func (sendMail) InsertOpts() []streamq.EnqueueOption {
	return []streamq.EnqueueOption{streamq.MaxAttempts(3)}
}

// TestRelay_Typed: typed args travel as their JSON with their kind, their
// own options and the caller's (max attempts, tags, deadline): the relayed
// entry carries them (wire version 2). A job ID, a flow key or a passed
// deadline are refused at the enqueue.
func TestRelay_Typed(t *testing.T) {
	t.Parallel()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			tb := openTable(t, driver, false)
			c := redistest.NewClient(t)
			q, p := newQueue(t, c)
			var enqueueArgs func(ctx context.Context, tx *sql.Tx, q *streamq.Queue, a streamq.JobArgs, opts ...streamq.EnqueueOption) (string, error)
			switch ob := tb.store.(type) {
			case *postgres.Outbox:
				enqueueArgs = func(ctx context.Context, tx *sql.Tx, q *streamq.Queue, a streamq.JobArgs, opts ...streamq.EnqueueOption) (string, error) {
					return ob.EnqueueArgs(ctx, tx, q, a, opts...)
				}
			case *sqlite.Outbox:
				enqueueArgs = func(ctx context.Context, tx *sql.Tx, q *streamq.Queue, a streamq.JobArgs, opts ...streamq.EnqueueOption) (string, error) {
					return ob.EnqueueArgs(ctx, tx, q, a, opts...)
				}
			}
			deadline := time.Now().Add(time.Hour)
			inTx(t, tb.db, true, func(tx *sql.Tx) error {
				_, err := enqueueArgs(t.Context(), tx, q, sendMail{To: "ada@example.com"}, streamq.Tags("welcome"), streamq.Deadline(deadline))
				return err
			})
			for _, tc := range []struct {
				name string
				opt  streamq.EnqueueOption
				want string
			}{
				{"bad job ID", func(o *streamq.EnqueueOptions) error { o.JobID = "x y"; return nil }, "JobID"},
				{"outbox job ID", func(o *streamq.EnqueueOptions) error { o.JobID = outbox.JobID("1"); return nil }, "JobID"},
				{"flow key", func(o *streamq.EnqueueOptions) error { o.FlowKey = "x"; return nil }, "FlowKey"},
				{"priority", func(o *streamq.EnqueueOptions) error { n := 1; o.Priority = &n; return nil }, "priority"},
				{"passed deadline", streamq.Deadline(time.Now().Add(-time.Minute)), "Deadline"},
			} {
				inTx(t, tb.db, true, func(tx *sql.Tx) error {
					_, err := enqueueArgs(t.Context(), tx, q, sendMail{}, tc.opt)
					if err == nil || !strings.Contains(err.Error(), tc.want) {
						t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.want)
					}
					return nil
				})
			}
			if n := relayAll(t, newRelay(t, tb.store, outbox.RelayConfig{}, p)); n != 1 {
				t.Fatalf("relayed %d rows, want 1", n)
			}
			entries := c.XRange(t.Context(), keys(q).Stream, "-", "+").Val()
			if len(entries) != 1 {
				t.Fatalf("stream holds %d entries, want 1", len(entries))
			}
			v := entries[0].Values
			if v["v"] != "2" || v["kind"] != "send_mail" || v["ma"] != "3" || !strings.Contains(fmt.Sprint(v["tags"]), "welcome") ||
				v["dl"] != fmt.Sprint(deadline.UnixMilli()) || v["payload"] != `{"to":"ada@example.com"}` {
				t.Errorf("entry %v, want v 2, kind send_mail, ma 3, tags [welcome], dl %d and the JSON args", v, deadline.UnixMilli())
			}
		})
	}
}

// TestRelay_JobID: a row's job has the row's job ID (outbox.JobID), under
// which inspect finds it; a row enqueued with WithJobID keeps the caller's
// ID, and a second row with that ID while the job lives is removed
// without a second job, as Producer.Enqueue would refuse it.
func TestRelay_JobID(t *testing.T) {
	t.Parallel()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			tb := openTable(t, driver, false)
			c := redistest.NewClient(t)
			q, p := newQueue(t, c)
			var rowID string
			inTx(t, tb.db, true, func(tx *sql.Tx) (err error) {
				rowID, err = tb.enqueue(t.Context(), tx, q, []byte("plain"))
				return err
			})
			for _, pay := range []string{"own", "own again"} {
				inTx(t, tb.db, true, func(tx *sql.Tx) error {
					_, err := tb.enqueue(t.Context(), tx, q, []byte(pay), streamq.WithJobID("order-7"), streamq.ProcessIn(time.Hour))
					return err
				})
			}
			if n := relayAll(t, newRelay(t, tb.store, outbox.RelayConfig{BatchSize: 1}, p)); n != 3 {
				t.Fatalf("relayed %d rows, want 3 (the duplicate removed too)", n)
			}
			in, err := inspect.New(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			iq, err := in.Queue(t.Context(), q.Name())
			if err != nil {
				t.Fatal(err)
			}
			if j, err := iq.Job(t.Context(), outbox.JobID(rowID)); err != nil || j.State != inspect.StateWaiting || string(j.Payload) != "plain" {
				t.Errorf("inspect of %s: %+v, %v; want the waiting job \"plain\"", outbox.JobID(rowID), j, err)
			}
			if j, err := iq.Job(t.Context(), "order-7"); err != nil || j.State != inspect.StateDelayed || string(j.Payload) != "own" {
				t.Errorf("inspect of order-7: %+v, %v; want the delayed job \"own\"", j, err)
			}
			if n := c.ZCard(t.Context(), keys(q).Delayed).Val(); n != 1 {
				t.Errorf("%d delayed jobs, want 1 (order-7 once)", n)
			}
			checkJobIDs(t, c, q)
		})
	}
}
