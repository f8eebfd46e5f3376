package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/pgtest"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/outbox"
	"github.com/streamq/streamq/outbox/postgres"
	"github.com/streamq/streamq/outbox/sqlite"
	wbpostgres "github.com/streamq/streamq/writebehind/postgres"
	wbsqlite "github.com/streamq/streamq/writebehind/sqlite"
)

// testDSN is the test PostgreSQL (see pgtest.DSN).
func testDSN() string { return pgtest.DSN() }

// enqueueFunc enqueues a job through a transaction.
type enqueueFunc func(ctx context.Context, tx *sql.Tx, q *streamq.Queue, payload []byte, opts ...streamq.EnqueueOption) (string, error)

// table is an outbox table of one driver, made for one test.
type table struct {
	driver  string
	db      *sql.DB
	store   outbox.Store
	enqueue enqueueFunc
	name    string
	// dsn opens the same database elsewhere (a child process): a
	// PostgreSQL DSN or an SQLite file.
	dsn string
}

// drivers are the drivers the relay's tests run on.
var drivers = []string{"sqlite", "postgres"}

// openTable makes a fresh outbox table of driver, migrated, dropped at the
// end of the test. PostgreSQL tests skip when no server answers, unless
// STREAMQ_REQUIRE_POSTGRES is set.
func openTable(t testing.TB, driver string, notify bool) *table {
	t.Helper()
	name := fmt.Sprintf("obt_%016x", rand.Uint64())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tb := &table{driver: driver, name: name}
	switch driver {
	case "sqlite":
		tb.dsn = filepath.Join(t.TempDir(), "outbox.db")
		db, err := wbsqlite.Open(tb.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		ob, err := sqlite.New(db, &sqlite.Config{Table: name})
		if err != nil {
			t.Fatal(err)
		}
		tb.db, tb.store, tb.enqueue = db, ob, func(ctx context.Context, tx *sql.Tx, q *streamq.Queue, p []byte, opts ...streamq.EnqueueOption) (string, error) {
			return ob.Enqueue(ctx, tx, q, p, opts...)
		}
		if err := ob.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	case "postgres":
		tb.dsn = testDSN()
		db := openPostgres(t)
		ob, err := postgres.New(db, &postgres.Config{Table: name, Channel: name, NoNotify: !notify})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ob.Close() })
		tb.db, tb.store, tb.enqueue = db, ob, func(ctx context.Context, tx *sql.Tx, q *streamq.Queue, p []byte, opts ...streamq.EnqueueOption) (string, error) {
			return ob.Enqueue(ctx, tx, q, p, opts...)
		}
		if err := ob.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+name+`"`); err != nil {
				t.Errorf("drop table %s: %v", name, err)
			}
		})
	default:
		t.Fatalf("unknown driver %q", driver)
	}
	return tb
}

// openPostgres opens the test PostgreSQL, closed at the end of the test, or
// skips the test when it does not answer (fails with
// STREAMQ_REQUIRE_POSTGRES).
func openPostgres(t testing.TB) *sql.DB {
	t.Helper()
	db, err := wbpostgres.Open(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	pgtest.Require(t, db, testDSN())
	return db
}

// newQueue returns a queue with a fresh name on rdb, and a producer of it.
func newQueue(t testing.TB, rdb redis.UniversalClient) (*streamq.Queue, *streamq.Producer) {
	t.Helper()
	q, err := streamq.NewQueue(rdb, redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	redistest.DeleteKeysAtCleanup(t, rdb, keys(q).Pattern())
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q, p
}

// inTx runs fn in a transaction of db, and commits it when commit is true,
// else rolls it back.
func inTx(t testing.TB, db *sql.DB, commit bool, fn func(tx *sql.Tx) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// enqueueN enqueues payloads prefix-0 ... prefix-(n-1), each in a
// transaction of its own, committed unless rollback(i); it returns the
// committed payloads.
func (tb *table) enqueueN(t testing.TB, q *streamq.Queue, prefix string, n int, rollback func(i int) bool) []string {
	t.Helper()
	var committed []string
	for i := range n {
		p := fmt.Sprintf("%s-%d", prefix, i)
		commit := rollback == nil || !rollback(i)
		inTx(t, tb.db, commit, func(tx *sql.Tx) error {
			_, err := tb.enqueue(t.Context(), tx, q, []byte(p))
			return err
		})
		if commit {
			committed = append(committed, p)
		}
	}
	return committed
}

// payloads returns the payloads of the jobs in q's stream and delayed set.
func payloads(t testing.TB, rdb redis.UniversalClient, q *streamq.Queue) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	entries, err := rdb.XRange(ctx, keys(q).Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		p, _ := e.Values["payload"].(string)
		out = append(out, p)
	}
	return out
}

// checkOnce fails the test unless got holds every payload of want exactly
// once and nothing else.
func checkOnce(t testing.TB, got, want []string) {
	t.Helper()
	count := make(map[string]int, len(got))
	for _, p := range got {
		count[p]++
	}
	var dup, missing, extra []string
	for _, p := range want {
		switch count[p] {
		case 0:
			missing = append(missing, p)
		case 1:
		default:
			dup = append(dup, fmt.Sprintf("%s x%d", p, count[p]))
		}
		delete(count, p)
	}
	for p := range count {
		extra = append(extra, p)
	}
	slices.Sort(extra)
	if len(dup)+len(missing)+len(extra) > 0 {
		t.Errorf("jobs in Redis: %d, want %d once each; doubled %v; missing %v; not committed %v",
			len(got), len(want), cut(dup), cut(missing), cut(extra))
	}
}

// cut keeps error messages short.
func cut(s []string) string {
	if len(s) > 10 {
		return strings.Join(s[:10], " ") + fmt.Sprintf(" ... (%d)", len(s))
	}
	return strings.Join(s, " ")
}

// waitEmpty waits until the table's backlog is empty.
func (tb *table) waitEmpty(t testing.TB, timeout time.Duration) {
	t.Helper()
	redistest.WaitFor(t, timeout, "the outbox table to empty", func() bool {
		b, err := tb.store.Backlog(t.Context())
		return err == nil && b.Rows == 0
	})
}

// newRelay returns a relay of tb through p.
func newRelay(t testing.TB, store outbox.Store, cfg outbox.RelayConfig, p ...*streamq.Producer) *outbox.Relay {
	t.Helper()
	cfg.Producers = p
	r, err := outbox.NewRelay(store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// keys returns the keys of q.
func keys(q *streamq.Queue) rdb.Keys { return core.Of(q).Keys }
