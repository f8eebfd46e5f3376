package writebehind_test

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/pgtest"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/postgres"
	"github.com/streamq/streamq/writebehind/sqlite"
)

// sinkDialects lists the dialects every shared sink test runs against.
func sinkDialects() []writebehind.Dialect {
	return []writebehind.Dialect{writebehind.DialectSQLite, writebehind.DialectPostgres}
}

// openSinkTestDB returns a database of dialect d for one test: a fresh SQLite
// file, or a pool on the PostgreSQL server named by POSTGRES_DSN. It skips
// the test when PostgreSQL cannot be reached, unless STREAMQ_REQUIRE_POSTGRES
// is set.
func openSinkTestDB(tb testing.TB, d writebehind.Dialect) *sql.DB {
	tb.Helper()
	switch d {
	case writebehind.DialectSQLite:
		db, err := sqlite.Open(filepath.Join(tb.TempDir(), "sink.db"))
		if err != nil {
			tb.Fatalf("sqlite.Open: %v", err)
		}
		tb.Cleanup(func() { _ = db.Close() })
		return db
	case writebehind.DialectPostgres:
		dsn := pgtest.DSN()
		db, err := postgres.Open(dsn)
		if err != nil {
			tb.Fatalf("postgres.Open: %v", err)
		}
		tb.Cleanup(func() { _ = db.Close() })
		db.SetMaxOpenConns(8)
		pgtest.Require(tb, db, dsn)
		return db
	}
	tb.Fatalf("no test database for dialect %v", d)
	return nil
}

// uniqueTableName returns a table name that no other test uses, derived from
// the test's name.
func uniqueTableName(tb testing.TB) string {
	var sb strings.Builder
	sb.WriteString("wb_")
	for _, r := range strings.ToLower(tb.Name()) {
		if sb.Len() >= 40 {
			break
		}
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('_')
		}
	}
	fmt.Fprintf(&sb, "_%016x", rand.Uint64())
	return sb.String()
}

// dropTableOnCleanup drops table (quoted, possibly schema-qualified) when the
// test ends.
func dropTableOnCleanup(tb testing.TB, db *sql.DB, table string) {
	tb.Helper()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			tb.Errorf("drop table %s: %v", table, err)
		}
	})
}

// setupSink returns a sink of dialect d on a table of its own, created
// with CreateSchema and dropped when the test ends. cfg may be nil; its
// Table is set to a unique name when empty.
func setupSink(tb testing.TB, d writebehind.Dialect, cfg *writebehind.SQLSinkConfig) *writebehind.SQLSink {
	tb.Helper()
	db := openSinkTestDB(tb, d)
	var c writebehind.SQLSinkConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Table == "" {
		c.Table = uniqueTableName(tb)
	}
	newSink := sqlite.NewSink
	if d == writebehind.DialectPostgres {
		newSink = postgres.NewSink
	}
	s, err := newSink(db, &c)
	if err != nil {
		tb.Fatalf("NewSink: %v", err)
	}
	if s.Dialect() != d {
		tb.Fatalf("Dialect() = %v, want %v", s.Dialect(), d)
	}
	table, err := writebehind.QuoteTable(c.Table)
	if err != nil {
		tb.Fatal(err)
	}
	dropTableOnCleanup(tb, db, table)
	if err := s.CreateSchema(context.Background()); err != nil {
		tb.Fatalf("CreateSchema: %v", err)
	}
	return s
}

// forEachDialect runs body as a parallel subtest per dialect, each with its
// own sink from setupSink.
func forEachDialect(t *testing.T, body func(t *testing.T, s *writebehind.SQLSink)) {
	t.Helper()
	for _, d := range sinkDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			body(t, setupSink(t, d, nil))
		})
	}
}

// mustWrite writes changes and fails the test on error.
func mustWriteSink(t *testing.T, s *writebehind.SQLSink, changes ...writebehind.Change) {
	t.Helper()
	if err := s.Write(t.Context(), changes); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// wantRow checks the stored row of key.
func wantSinkRow(t *testing.T, s *writebehind.SQLSink, key string, value string, version int64, deleted bool) {
	t.Helper()
	got, gotVersion, gotDeleted, found, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if !found {
		t.Fatalf("Get(%q): not found, want version %d", key, version)
	}
	if gotVersion != version || gotDeleted != deleted {
		t.Fatalf("Get(%q): version %d deleted %v, want version %d deleted %v", key, gotVersion, gotDeleted, version, deleted)
	}
	if deleted {
		if got != nil {
			t.Fatalf("Get(%q): value %q for a deleted key, want nil", key, got)
		}
		return
	}
	if got == nil || string(got) != value {
		t.Fatalf("Get(%q): value %q (nil: %v), want %q", key, got, got == nil, value)
	}
}

// wantAll checks the live rows of the sink.
func wantSinkAll(t *testing.T, s *writebehind.SQLSink, want map[string]string) {
	t.Helper()
	all, err := s.All(t.Context())
	if err != nil {
		t.Fatalf("All: %v", err)
	}
	got := make(map[string]string, len(all))
	for k, v := range all {
		got[k] = string(v)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("All() = %v, want %v", got, want)
	}
}

func setChange(key, value string, version int64) writebehind.Change {
	return writebehind.Change{Key: key, Value: []byte(value), Version: version}
}

func delChange(key string, version int64) writebehind.Change {
	return writebehind.Change{Key: key, Deleted: true, Version: version}
}

func TestSQLSink_Write_Upsert(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		mustWriteSink(t, s, setChange("a", "a1", 1), setChange("b", "b1", 1))
		wantSinkRow(t, s, "a", "a1", 1, false)
		wantSinkAll(t, s, map[string]string{"a": "a1", "b": "b1"})

		mustWriteSink(t, s, setChange("a", "a2", 2), setChange("c", "c7", 7))
		wantSinkRow(t, s, "a", "a2", 2, false)
		wantSinkAll(t, s, map[string]string{"a": "a2", "b": "b1", "c": "c7"})

		// Empty and nil values are stored as empty, not as deletions.
		mustWriteSink(t, s, writebehind.Change{Key: "empty", Value: []byte{}, Version: 1}, writebehind.Change{Key: "nil", Version: 1})
		wantSinkRow(t, s, "empty", "", 1, false)
		wantSinkRow(t, s, "nil", "", 1, false)

		// Binary values and keys of any valid UTF-8 survive unchanged.
		bin := string([]byte{0, 1, 2, 0xff, 0xfe})
		mustWriteSink(t, s, setChange("clé 🔑 'quoted' \"x\"", bin, 3))
		wantSinkRow(t, s, "clé 🔑 'quoted' \"x\"", bin, 3, false)

		// An empty batch is a no-op.
		mustWriteSink(t, s)

		if _, _, _, found, err := s.Get(t.Context(), "missing"); err != nil || found {
			t.Fatalf("Get(missing): found %v, err %v; want not found", found, err)
		}
	})
}

func TestSQLSink_Write_OlderVersionIgnored(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		mustWriteSink(t, s, setChange("k", "v5", 5))
		mustWriteSink(t, s, setChange("k", "v3", 3)) // replay of an older change
		wantSinkRow(t, s, "k", "v5", 5, false)
		mustWriteSink(t, s, setChange("k", "other", 5)) // same version: already stored
		wantSinkRow(t, s, "k", "v5", 5, false)
		mustWriteSink(t, s, setChange("k", "v5", 5), setChange("j", "j1", 1)) // replayed batch
		wantSinkRow(t, s, "k", "v5", 5, false)
		wantSinkAll(t, s, map[string]string{"k": "v5", "j": "j1"})
		mustWriteSink(t, s, setChange("k", "v6", 6))
		wantSinkRow(t, s, "k", "v6", 6, false)
	})
}

func TestSQLSink_Write_DeleteTombstone(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		mustWriteSink(t, s, setChange("k", "v1", 1), setChange("keep", "x", 1))
		mustWriteSink(t, s, delChange("k", 2))
		wantSinkRow(t, s, "k", "", 2, true)
		wantSinkAll(t, s, map[string]string{"keep": "x"})

		// A replayed older set must not resurrect the key.
		mustWriteSink(t, s, setChange("k", "v1", 1))
		wantSinkRow(t, s, "k", "", 2, true)
		wantSinkAll(t, s, map[string]string{"keep": "x"})

		// A delete of a key never stored leaves a tombstone, too.
		mustWriteSink(t, s, delChange("ghost", 4))
		mustWriteSink(t, s, setChange("ghost", "old", 3))
		wantSinkRow(t, s, "ghost", "", 4, true)

		// A newer set brings the key back.
		mustWriteSink(t, s, setChange("k", "v3", 3))
		wantSinkRow(t, s, "k", "v3", 3, false)
		wantSinkAll(t, s, map[string]string{"k": "v3", "keep": "x"})

		// A replayed older delete does not delete it again.
		mustWriteSink(t, s, delChange("k", 2))
		wantSinkRow(t, s, "k", "v3", 3, false)
	})
}

func TestSQLSink_Write_SameKeyInBatch(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		batch := []writebehind.Change{
			setChange("k", "k2", 2), setChange("k", "k3", 3), setChange("k", "k1", 1),
			delChange("j", 1), setChange("j", "j2", 2),
			setChange("d", "d1", 1), delChange("d", 2),
			setChange("tie", "first", 4), setChange("tie", "second", 4),
		}
		before := append([]writebehind.Change(nil), batch...)
		mustWriteSink(t, s, batch...)
		wantSinkRow(t, s, "k", "k3", 3, false)
		wantSinkRow(t, s, "j", "j2", 2, false)
		wantSinkRow(t, s, "d", "", 2, true)
		wantSinkRow(t, s, "tie", "second", 4, false) // tie: the later change wins
		for i := range batch {
			if batch[i].Key != before[i].Key || batch[i].Version != before[i].Version {
				t.Fatalf("Write modified the caller's slice at %d: %+v, was %+v", i, batch[i], before[i])
			}
		}
	})
}

func TestSQLSink_Write_LargeBatch(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		// More rows than one statement may bind in the dialect: a full
		// statement, at the dialect's limit of parameters, and one more row.
		n := s.MaxRows() + 1
		statements := 0
		s.SetAfterStatement(func(int, int) { statements++ })
		batch := make([]writebehind.Change, n)
		want := make(map[string]string, n)
		for i := range batch {
			key, value := fmt.Sprintf("key-%05d", i), fmt.Sprintf("value-%d", i)
			batch[i] = setChange(key, value, int64(i%7+1))
			want[key] = value
		}
		rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		mustWriteSink(t, s, batch...)
		if wantStatements := (n + s.MaxRows() - 1) / s.MaxRows(); statements != wantStatements {
			t.Errorf("Write used %d statements, want %d", statements, wantStatements)
		}
		wantSinkAll(t, s, want)
		last := n - 1
		wantSinkRow(t, s, fmt.Sprintf("key-%05d", last), fmt.Sprintf("value-%d", last), int64(last%7+1), false)

		// Replaying the whole batch changes nothing.
		for i := range batch {
			batch[i].Value = []byte("replayed")
		}
		mustWriteSink(t, s, batch...)
		wantSinkAll(t, s, want)
	})
}

func TestSQLSink_Write_Validation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change writebehind.Change
		reason string // part of the error message
	}{
		{"empty key", writebehind.Change{Value: []byte("v"), Version: 1}, "key is empty"},
		{"zero version", setChange("k", "v", 0), "version is 0"},
		{"negative version", setChange("k", "v", -3), "version is -3"},
		{"key too long", setChange(strings.Repeat("k", writebehind.MaxKeyBytes+1), "v", 1), "MaxKeyBytes"},
		{"value too long", writebehind.Change{Key: "k", Value: make([]byte, writebehind.MaxValueBytes+1), Version: 1}, "MaxValueBytes"},
		{"deletion with value", writebehind.Change{Key: "k", Value: []byte("v"), Deleted: true, Version: 1}, "Deleted change must have a nil Value"},
		{"key not UTF-8", setChange("k\xff", "v", 1), "UTF-8"},
		{"key with NUL", setChange("k\x00", "v", 1), "NUL"},
		{"hash deletion", writebehind.Change{Key: "k", Hash: true, Deleted: true, Version: 1}, "Hash is set on a deletion"},
		{"hash not an object", writebehind.Change{Key: "k", Value: []byte(`["a"]`), Hash: true, Version: 1}, "not a JSON object"},
		{"hash with a number", writebehind.Change{Key: "k", Value: []byte(`{"a":1}`), Hash: true, Version: 1}, "not a JSON object of strings"},
	}
	for _, tt := range tests {
		if err := tt.change.Validate(); !errors.Is(err, writebehind.ErrInvalidChange) || !strings.Contains(err.Error(), tt.reason) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidChange mentioning %q", tt.name, err, tt.reason)
		}
	}
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		for _, tt := range tests {
			err := s.Write(t.Context(), []writebehind.Change{setChange("good", "g", 1), tt.change})
			var ce *writebehind.ChangeError
			if !errors.As(err, &ce) || !errors.Is(err, writebehind.ErrInvalidChange) {
				t.Fatalf("%s: Write() = %v, want a *ChangeError wrapping ErrInvalidChange", tt.name, err)
			}
			if ce.Index != 1 || !strings.Contains(ce.Reason, tt.reason) {
				t.Errorf("%s: ChangeError{Index: %d, Reason: %q}, want index 1 and a reason mentioning %q", tt.name, ce.Index, ce.Reason, tt.reason)
			}
			if len(err.Error()) > 400 {
				t.Errorf("%s: error message is %d bytes long, want long keys shortened", tt.name, len(err.Error()))
			}
		}
		wantSinkAll(t, s, map[string]string{}) // the valid change was not written either

		// The limits themselves are accepted.
		maxKey := strings.Repeat("k", writebehind.MaxKeyBytes)
		maxValue := bytes.Repeat([]byte{0xab}, writebehind.MaxValueBytes)
		if err := (writebehind.Change{Key: maxKey, Value: maxValue, Version: 1}).Validate(); err != nil {
			t.Fatalf("Validate at the limits: %v", err)
		}
		mustWriteSink(t, s, writebehind.Change{Key: maxKey, Value: maxValue, Version: 1})
		got, _, _, _, err := s.Get(t.Context(), maxKey)
		if err != nil || !bytes.Equal(got, maxValue) {
			t.Fatalf("Get(max key): %d bytes, err %v; want the %d-byte value", len(got), err, len(maxValue))
		}
	})
}

// TestSQLSink_Write_Hash stores hashes as their canonical JSON, versioned
// like strings, in a form the database's own JSON functions read.
func TestSQLSink_Write_Hash(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		ada, err := writebehind.EncodeFields(map[string]string{"name": "Ada", "born": "1815", "motto": "<math & \"poetry\">"})
		if err != nil {
			t.Fatal(err)
		}
		hash := func(key string, value []byte, version int64) writebehind.Change {
			return writebehind.Change{Key: key, Value: value, Hash: true, Version: version}
		}
		mustWriteSink(t, s, hash("h", ada, 2), setChange("s", "plain", 3), hash("s", []byte(`{"n":"old"}`), 1))
		wantSinkRow(t, s, "h", string(ada), 2, false)
		wantSinkRow(t, s, "s", "plain", 3, false) // the older hash did not overwrite the string
		mustWriteSink(t, s, hash("s", []byte(`{"n":"new"}`), 4), hash("h", []byte(`{"n":"replayed"}`), 2))
		wantSinkRow(t, s, "s", `{"n":"new"}`, 4, false)
		wantSinkRow(t, s, "h", string(ada), 2, false) // same version: a replay, ignored
		mustWriteSink(t, s, delChange("h", 5))
		wantSinkRow(t, s, "h", "", 5, true)
		mustWriteSink(t, s, hash("h", ada, 3))
		wantSinkRow(t, s, "h", "", 5, true) // the tombstone keeps the older hash out

		got, _, _, _, err := s.Get(t.Context(), "s")
		if err != nil {
			t.Fatal(err)
		}
		if fields, err := writebehind.DecodeFields(got); err != nil || fields["n"] != "new" {
			t.Fatalf("DecodeFields(%s) = %v, %v", got, fields, err)
		}
		// The database can read the fields itself.
		query := `SELECT json_extract(CAST("value" AS TEXT), '$.n') FROM ` + writebehind.QuoteIdent(s.Table()) + ` WHERE "key" = 's'`
		if s.Dialect() == writebehind.DialectPostgres {
			query = `SELECT convert_from("value", 'UTF8')::jsonb ->> 'n' FROM ` + writebehind.QuoteIdent(s.Table()) + ` WHERE "key" = 's'`
		}
		var n string
		if err := s.DB().QueryRowContext(t.Context(), query).Scan(&n); err != nil || n != "new" {
			t.Fatalf("%s = %q, %v; want \"new\"", query, n, err)
		}
	})
}

func TestSQLSink_Write_Concurrent(t *testing.T) {
	t.Parallel()
	const (
		writers  = 4
		keys     = 40
		versions = 60 // per key; writer w writes the versions v with v%writers == w
	)
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for w := range writers {
			wg.Go(func() {
				// Each batch carries one version of every key, keys and
				// batches in a shuffled order, so writers overtake each other.
				var mine []int64
				for v := int64(1); v <= versions; v++ {
					if v%writers == int64(w) {
						mine = append(mine, v)
					}
				}
				rand.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
				for _, v := range mine {
					batch := make([]writebehind.Change, keys)
					for k := range batch {
						key := fmt.Sprintf("k%02d", k)
						if v%5 == 0 {
							batch[k] = delChange(key, v)
						} else {
							batch[k] = setChange(key, fmt.Sprintf("%s@%d", key, v), v)
						}
					}
					rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
					if err := s.Write(t.Context(), batch); err != nil {
						errs[w] = fmt.Errorf("writer %d, version %d: %w", w, v, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		want := make(map[string]string, keys)
		for k := range keys {
			key := fmt.Sprintf("k%02d", k)
			// versions (60) is a multiple of 5: the last change is a deletion.
			wantSinkRow(t, s, key, "", versions, true)
		}
		wantSinkAll(t, s, want)
		// One more round of sets after the concurrent deletions.
		var batch []writebehind.Change
		for k := range keys {
			key := fmt.Sprintf("k%02d", k)
			batch = append(batch, setChange(key, "final", versions+1))
			want[key] = "final"
		}
		mustWriteSink(t, s, batch...)
		wantSinkAll(t, s, want)
	})
}

func TestSQLSink_Write_FailedTransactionWritesNothing(t *testing.T) {
	t.Parallel()
	// bigBatch updates the keys of the existing rows and adds new ones, in
	// more than one statement.
	bigBatch := func(s *writebehind.SQLSink) []writebehind.Change {
		batch := make([]writebehind.Change, 0, s.MaxRows()+10)
		for i := range s.MaxRows() + 10 {
			batch = append(batch, setChange(fmt.Sprintf("k%05d", i), "new", 2))
		}
		return batch
	}
	existing := map[string]string{"k00000": "old", "k00001": "old", "zzz": "old"}
	prepare := func(t *testing.T, s *writebehind.SQLSink) {
		mustWriteSink(t, s, setChange("k00000", "old", 1), setChange("k00001", "old", 1), setChange("zzz", "old", 1))
	}

	t.Run("cancelled before", func(t *testing.T) {
		t.Parallel()
		forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
			prepare(t, s)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if err := s.Write(ctx, bigBatch(s)); !errors.Is(err, context.Canceled) {
				t.Fatalf("Write with a cancelled context = %v, want context.Canceled", err)
			}
			wantSinkAll(t, s, existing)
		})
	})

	t.Run("cancelled between statements", func(t *testing.T) {
		t.Parallel()
		forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
			prepare(t, s)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			statements := 0
			s.SetAfterStatement(func(int, int) {
				statements++
				cancel() // the first statement ran; the transaction is still open
			})
			if err := s.Write(ctx, bigBatch(s)); !errors.Is(err, context.Canceled) {
				t.Fatalf("Write cancelled mid-transaction = %v, want context.Canceled", err)
			}
			if statements != 1 {
				t.Fatalf("%d statements ran, want 1", statements)
			}
			s.SetAfterStatement(nil)
			wantSinkAll(t, s, existing)
			wantSinkRow(t, s, "k00000", "old", 1, false)
		})
	})

	t.Run("database error in a later statement", func(t *testing.T) {
		t.Parallel()
		for _, d := range sinkDialects() {
			t.Run(d.String(), func(t *testing.T) {
				t.Parallel()
				// The caller creates the table, with a constraint that
				// refuses the key "poison". It sorts after every "k…" key,
				// so it lands in the last statement of the batch.
				db := openSinkTestDB(t, d)
				table := uniqueTableName(t)
				dropTableOnCleanup(t, db, writebehind.QuoteIdent(table))
				blob, ts := "BLOB", "TEXT"
				if d == writebehind.DialectPostgres {
					blob, ts = "BYTEA", "TIMESTAMPTZ"
				}
				ddl := fmt.Sprintf(`CREATE TABLE %s (
					"key" TEXT NOT NULL PRIMARY KEY CHECK ("key" <> 'poison'),
					"value" %s, "version" BIGINT NOT NULL, "deleted" BOOLEAN NOT NULL, "updated_at" %s,
					"issued" BIGINT NOT NULL DEFAULT 0)`,
					writebehind.QuoteIdent(table), blob, ts)
				if _, err := db.ExecContext(t.Context(), ddl); err != nil {
					t.Fatal(err)
				}
				s, err := writebehind.NewSQLSink(db, &writebehind.SQLSinkConfig{Dialect: d, Table: table})
				if err != nil {
					t.Fatal(err)
				}
				prepare(t, s)
				err = s.Write(t.Context(), append(bigBatch(s), setChange("poison", "p", 1)))
				if err == nil || errors.Is(err, writebehind.ErrInvalidChange) {
					t.Fatalf("Write = %v, want the database's constraint error", err)
				}
				wantSinkAll(t, s, existing)
			})
		}
	})
}

func TestSQLSink_CustomNames(t *testing.T) {
	t.Parallel()
	for _, d := range sinkDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			schema := "main" // SQLite's main database
			if d == writebehind.DialectPostgres {
				schema = "public"
			}
			s := setupSink(t, d, &writebehind.SQLSinkConfig{
				Dialect: d,
				Table:   schema + "." + uniqueTableName(t),
				// Mixed case and SQL keywords must be quoted to work.
				KeyColumn:       "Select",
				ValueColumn:     "from",
				VersionColumn:   "Where_V2",
				DeletedColumn:   "_gone",
				UpdatedAtColumn: "order",
				IssuedColumn:    "Group",
			})
			if err := s.CreateSchema(t.Context()); err != nil {
				t.Fatalf("second CreateSchema: %v", err)
			}
			mustWriteSink(t, s, setChange("a", "1", 1), issuedChange("b", "2", 1, issuedAt))
			mustWriteSink(t, s, delChange("a", 2), issuedChange("b", "old", 1, issuedAt-1))
			wantSinkRow(t, s, "a", "", 2, true)
			wantSinkAll(t, s, map[string]string{"b": "2"})
			if err := s.Write(t.Context(), []writebehind.Change{issuedChange("b", "lost", 1, issuedAt+1)}); !errors.Is(err, writebehind.ErrVersionRegressed) {
				t.Fatalf("Write of a regressed change = %v, want ErrVersionRegressed", err)
			}
		})
	}
}

func TestSQLSink_UpdatedAt(t *testing.T) {
	t.Parallel()
	for _, d := range sinkDialects() {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			s := setupSink(t, d, nil)
			table, err := writebehind.QuoteTable(s.Table())
			if err != nil {
				t.Fatal(err)
			}
			updatedAt := func() time.Time {
				t.Helper()
				row := s.DB().QueryRowContext(t.Context(), `SELECT "updated_at" FROM `+table+` WHERE "key" = 'k'`)
				if d == writebehind.DialectPostgres {
					var ts time.Time
					if err := row.Scan(&ts); err != nil {
						t.Fatal(err)
					}
					return ts
				}
				var text string
				if err := row.Scan(&text); err != nil {
					t.Fatal(err)
				}
				ts, err := time.Parse(writebehind.SQLiteTimeLayout, text)
				if err != nil {
					t.Fatalf("updated_at %q: %v", text, err)
				}
				return ts
			}

			start := time.Now()
			mustWriteSink(t, s, setChange("k", "v", 2))
			first := updatedAt()
			if first.Before(start.Add(-time.Minute)) || first.After(time.Now().Add(time.Minute)) {
				t.Fatalf("updated_at = %v, want about %v", first, start)
			}
			mustWriteSink(t, s, setChange("k", "old", 1)) // ignored: must not touch the row
			if again := updatedAt(); !again.Equal(first) {
				t.Fatalf("an ignored older change moved updated_at from %v to %v", first, again)
			}
			mustWriteSink(t, s, setChange("k", "new", 3))
			if later := updatedAt(); later.Before(first) {
				t.Fatalf("updated_at went back from %v to %v", first, later)
			}
		})
	}
}

// unknownConnector is a connector of a driver other than the two the driver
// packages open.
type unknownConnector struct{}

func (unknownConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("fake driver: no connections")
}
func (unknownConnector) Driver() driver.Driver { return unknownDriver{} }

type unknownDriver struct{}

func (unknownDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("fake driver: no connections")
}

func TestNewSQLSink_Config(t *testing.T) {
	t.Parallel()
	sqliteDB, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqliteDB.Close() })
	pgDB, err := postgres.Open(pgtest.DefaultDSN) // does not connect
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pgDB.Close() })
	otherDB := sql.OpenDB(unknownConnector{})
	t.Cleanup(func() { _ = otherDB.Close() })

	valid := []struct {
		name string
		db   *sql.DB
		cfg  *writebehind.SQLSinkConfig
		want writebehind.Dialect
	}{
		{"sqlite", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite}, writebehind.DialectSQLite},
		{"postgres", pgDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectPostgres}, writebehind.DialectPostgres},
		{"unknown driver with dialect", otherDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectPostgres}, writebehind.DialectPostgres},
		{"schema-qualified", pgDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectPostgres, Table: "cache.Users_2"}, writebehind.DialectPostgres},
		{"longest name", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, KeyColumn: strings.Repeat("k", writebehind.MaxIdentifierLen)}, writebehind.DialectSQLite},
	}
	for _, tt := range valid {
		s, err := writebehind.NewSQLSink(tt.db, tt.cfg)
		if err != nil {
			t.Errorf("%s: NewSQLSink: %v", tt.name, err)
			continue
		}
		if s.Dialect() != tt.want {
			t.Errorf("%s: Dialect() = %v, want %v", tt.name, s.Dialect(), tt.want)
		}
	}

	invalid := []struct {
		name  string
		db    *sql.DB
		cfg   *writebehind.SQLSinkConfig
		field string
		hint  string // part of the reason
	}{
		{"nil db", nil, nil, "db", "sqlite.Open"},
		{"no dialect", sqliteDB, nil, "SQLSinkConfig.Dialect", "sqlite.NewSink"},
		{"no dialect, unknown driver", otherDB, &writebehind.SQLSinkConfig{}, "SQLSinkConfig.Dialect", "DialectSQLite or DialectPostgres"},
		{"bad dialect", sqliteDB, &writebehind.SQLSinkConfig{Dialect: 9}, "SQLSinkConfig.Dialect", "not a dialect"},
		{"table with dash", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, Table: "my-table"}, "SQLSinkConfig.Table", `'-'`},
		{"table with quote", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, Table: `t"; DROP TABLE x; --`}, "SQLSinkConfig.Table", "ASCII letters"},
		{"table starting with digit", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, Table: "1t"}, "SQLSinkConfig.Table", "not starting with a digit"},
		{"table with space", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, Table: "t "}, "SQLSinkConfig.Table", "ASCII letters"},
		{"non-ASCII table", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, Table: "tablé"}, "SQLSinkConfig.Table", "ASCII letters"},
		{"two dots", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, Table: "a.b.c"}, "SQLSinkConfig.Table", "schema.table"},
		{"empty schema", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, Table: ".t"}, "SQLSinkConfig.Table", "schema: name is empty"},
		{"empty table after schema", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, Table: "s."}, "SQLSinkConfig.Table", "table: name is empty"},
		{"name too long", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, Table: strings.Repeat("t", writebehind.MaxIdentifierLen+1)}, "SQLSinkConfig.Table", "MaxIdentifierLen"},
		{"bad column", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, ValueColumn: "val ue"}, "SQLSinkConfig.ValueColumn", "ASCII letters"},
		{"duplicate column", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, DeletedColumn: "Key"}, "SQLSinkConfig.DeletedColumn", "KeyColumn"},
		{"issued column is the version column", sqliteDB, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite, IssuedColumn: "version"}, "SQLSinkConfig.IssuedColumn", "VersionColumn"},
	}
	for _, tt := range invalid {
		var before writebehind.SQLSinkConfig
		if tt.cfg != nil {
			before = *tt.cfg
		}
		_, err := writebehind.NewSQLSink(tt.db, tt.cfg)
		var ce *streamq.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: NewSQLSink() = %v, want a *streamq.ConfigError", tt.name, err)
			continue
		}
		if ce.Field != tt.field || !strings.Contains(ce.Reason, tt.hint) {
			t.Errorf("%s: ConfigError{Field: %q, Reason: %q}, want field %q and a reason mentioning %q", tt.name, ce.Field, ce.Reason, tt.field, tt.hint)
		}
		if tt.cfg != nil && *tt.cfg != before {
			t.Errorf("%s: NewSQLSink modified the caller's config: %+v, was %+v", tt.name, *tt.cfg, before)
		}
	}

	for d, want := range map[writebehind.Dialect]string{0: "unset", writebehind.DialectSQLite: "sqlite", writebehind.DialectPostgres: "postgres", 9: "Dialect(9)"} {
		if got := d.String(); got != want {
			t.Errorf("Dialect(%d).String() = %q, want %q", int(d), got, want)
		}
	}
}

// issuedAt is a Change.Issued for tests: a microsecond clock reading.
const issuedAt = int64(1_750_000_000_000_000)

// issuedChange is a change of key with a value, version and issue time.
func issuedChange(key, value string, version, issued int64) writebehind.Change {
	return writebehind.Change{Key: key, Value: []byte(value), Version: version, Issued: issued}
}

// storedRow reads the version and issue time of key's row.
func storedRow(t *testing.T, s *writebehind.SQLSink, key string) (version, issued int64) {
	t.Helper()
	table, err := writebehind.QuoteTable(s.Table())
	if err != nil {
		t.Fatal(err)
	}
	q := `SELECT "version", "issued" FROM ` + table + ` WHERE "key" = ?`
	if s.Dialect() == writebehind.DialectPostgres {
		q = strings.Replace(q, "?", "$1", 1)
	}
	if err := s.DB().QueryRowContext(t.Context(), q, key).Scan(&version, &issued); err != nil {
		t.Fatalf("read row %q: %v", key, err)
	}
	return version, issued
}

func TestSQLSink_Write_VersionRegressed(t *testing.T) {
	t.Parallel()
	const t0 = issuedAt
	tests := []struct {
		name      string
		stored    writebehind.Change // written first
		change    writebehind.Change
		regressed bool   // refused with ErrVersionRegressed
		applied   bool   // else: ignored, the row stays
		reason    string // part of the refusal's reason
	}{
		{name: "replay of the stored change", stored: issuedChange("k", "a", 5, t0+50), change: issuedChange("k", "a", 5, t0+50)},
		{name: "replay of an older change", stored: issuedChange("k", "a", 5, t0+50), change: issuedChange("k", "old", 3, t0+30)},
		{name: "replay of an older deletion", stored: issuedChange("k", "a", 5, t0+50), change: writebehind.Change{Key: "k", Deleted: true, Version: 4, Issued: t0 + 40}},
		{name: "newer change", stored: issuedChange("k", "a", 5, t0+50), change: issuedChange("k", "new", 6, t0+60), applied: true},
		{name: "newer change issued in the same microsecond", stored: issuedChange("k", "a", 5, t0+50), change: issuedChange("k", "new", 6, t0+50), applied: true},
		{name: "lower version issued later", stored: issuedChange("k", "a", 5, t0+50), change: issuedChange("k", "lost", 3, t0+70), regressed: true,
			reason: "the sink holds version 5 issued at 2025-06-15T15:06:40.000050Z, this change has version 3 but was issued later (at 2025-06-15T15:06:40.000070Z)"},
		{name: "same version issued later", stored: issuedChange("k", "a", 5, t0+50), change: issuedChange("k", "lost", 5, t0+70), regressed: true, reason: "version 5 but was issued later"},
		{name: "deletion with a lower version issued later", stored: issuedChange("k", "a", 5, t0+50), change: writebehind.Change{Key: "k", Deleted: true, Version: 2, Issued: t0 + 70}, regressed: true},
		{name: "higher version issued earlier", stored: issuedChange("k", "a", 5, t0+50), change: issuedChange("k", "stale", 9, t0+10), regressed: true, reason: "version 9 but was issued earlier"},
		{name: "change without issue time, lower version", stored: issuedChange("k", "a", 5, t0+50), change: issuedChange("k", "old", 3, 0)},
		{name: "change without issue time, higher version", stored: issuedChange("k", "a", 5, t0+50), change: issuedChange("k", "new", 6, 0), applied: true},
		{name: "row without issue time, lower version", stored: issuedChange("k", "a", 5, 0), change: issuedChange("k", "lost", 3, t0), regressed: true, reason: "the sink holds version 5 issued at an unknown time"},
		{name: "row without issue time, higher version", stored: issuedChange("k", "a", 5, 0), change: issuedChange("k", "new", 6, t0), applied: true},
	}
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		for i, tt := range tests {
			key := fmt.Sprintf("k%02d", i)
			stored, change := tt.stored, tt.change
			stored.Key, change.Key = key, key
			mustWriteSink(t, s, stored)
			// Another key in the same batch, to check that a refusal
			// writes nothing of the batch.
			other := issuedChange(fmt.Sprintf("other%02d", i), "o", 1, t0)
			err := s.Write(t.Context(), []writebehind.Change{change, other})
			want := stored
			switch {
			case tt.regressed:
				var ce *writebehind.ChangeError
				if !errors.As(err, &ce) || !errors.Is(err, writebehind.ErrVersionRegressed) || errors.Is(err, writebehind.ErrInvalidChange) {
					t.Fatalf("%s: Write = %v, want a *ChangeError wrapping ErrVersionRegressed", tt.name, err)
				}
				if ce.Index != 0 || ce.Key != key || !strings.Contains(ce.Reason, tt.reason) || !strings.Contains(ce.Reason, "Writer.EnsureVersionAtLeast") {
					t.Fatalf("%s: ChangeError{Index: %d, Key: %q, Reason: %q}, want index 0, key %q and a reason with %q and the fix", tt.name, ce.Index, ce.Key, ce.Reason, key, tt.reason)
				}
				if _, _, _, found, _ := s.Get(t.Context(), other.Key); found {
					t.Fatalf("%s: the batch's other change was written despite the refusal", tt.name)
				}
			case err != nil:
				t.Fatalf("%s: Write = %v, want nil", tt.name, err)
			case tt.applied:
				want = change
			}
			wantSinkRow(t, s, key, string(want.Value), want.Version, want.Deleted)
			if v, issued := storedRow(t, s, key); v != want.Version || issued != want.Issued {
				t.Fatalf("%s: row version %d issued %d, want %d issued %d", tt.name, v, issued, want.Version, want.Issued)
			}
		}
	})
}

func TestSQLSink_Write_VersionRegressedSeveral(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		mustWriteSink(t, s, issuedChange("a", "a", 10, issuedAt), issuedChange("b", "b", 11, issuedAt), issuedChange("c", "c", 12, issuedAt))
		s.SetMaxRows(2) // the refusals come from different statements
		batch := []writebehind.Change{
			issuedChange("c", "lost", 1, issuedAt+9),
			issuedChange("new", "n", 2, issuedAt+9),
			issuedChange("a", "lost", 3, issuedAt+9),
			issuedChange("b", "newer", 12, issuedAt+9),
		}
		err := s.Write(t.Context(), batch)
		var got []string
		for _, ce := range writebehind.ChangeErrors(err) {
			if !errors.Is(ce, writebehind.ErrVersionRegressed) || batch[ce.Index].Key != ce.Key {
				t.Fatalf("refusal %v does not match change %d", ce, ce.Index)
			}
			got = append(got, fmt.Sprintf("%d:%s", ce.Index, ce.Key))
		}
		slices.Sort(got)
		if want := []string{"0:c", "2:a"}; !slices.Equal(got, want) {
			t.Fatalf("Write = %v; refused %v, want %v, all in one error", err, got, want)
		}
		wantSinkAll(t, s, map[string]string{"a": "a", "b": "b", "c": "c"})

		// The caller writes the rest again without them.
		mustWriteSink(t, s, batch[1], batch[3])
		wantSinkAll(t, s, map[string]string{"a": "a", "b": "newer", "c": "c", "new": "n"})
	})
}

func TestSQLSink_Write_VersionRegressedInBatch(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		batch := []writebehind.Change{
			issuedChange("k", "old", 105, issuedAt),
			issuedChange("ok", "fine", 1, issuedAt),
			issuedChange("k", "after the loss", 2, issuedAt+100),
			issuedChange("z", "z", 7, issuedAt),
			issuedChange("z", "older", 6, issuedAt-1), // consistent: coalesced away
		}
		err := s.Write(t.Context(), batch)
		var refused []int
		for _, ce := range writebehind.ChangeErrors(err) {
			if !errors.Is(ce, writebehind.ErrVersionRegressed) || !strings.Contains(ce.Reason, "contradict each other, version 2") {
				t.Fatalf("refusal %v, want ErrVersionRegressed for contradicting changes of one key", ce)
			}
			refused = append(refused, ce.Index)
		}
		slices.Sort(refused)
		if !slices.Equal(refused, []int{0, 2}) {
			t.Fatalf("Write = %v; refused changes %v, want [0 2] (both changes of k)", err, refused)
		}
		wantSinkAll(t, s, map[string]string{})
	})
}

func TestSQLSink_MaxVersion(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		if v, err := s.MaxVersion(t.Context()); err != nil || v != 0 {
			t.Fatalf("MaxVersion of an empty table = %d, %v; want 0", v, err)
		}
		const big = int64(1)<<62 + 3
		mustWriteSink(t, s, setChange("a", "x", 7), delChange("b", big), setChange("c", "y", 3))
		if v, err := s.MaxVersion(t.Context()); err != nil || v != big {
			t.Fatalf("MaxVersion = %d, %v; want %d (a deletion's version counts)", v, err, big)
		}
	})
}

func TestSQLSink_CreateSchema_AddsIssuedColumn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d     writebehind.Dialect
		table func(name string) string // the configured table name
	}{
		{writebehind.DialectSQLite, func(name string) string { return name }},
		{writebehind.DialectSQLite, func(name string) string { return "main." + name }},
		{writebehind.DialectPostgres, func(name string) string { return name }},
		{writebehind.DialectPostgres, func(name string) string { return "public." + name }},
	} {
		t.Run(tc.d.String()+"/"+tc.table("t"), func(t *testing.T) {
			t.Parallel()
			db := openSinkTestDB(t, tc.d)
			name := uniqueTableName(t)
			dropTableOnCleanup(t, db, writebehind.QuoteIdent(name))
			// A table as CreateSchema made it before the issued column.
			blob, ts := "BLOB", "TEXT"
			if tc.d == writebehind.DialectPostgres {
				blob, ts = "BYTEA", "TIMESTAMPTZ"
			}
			ddl := fmt.Sprintf(`CREATE TABLE %s ("key" TEXT NOT NULL PRIMARY KEY, "value" %s, "version" BIGINT NOT NULL,
				"deleted" BOOLEAN NOT NULL DEFAULT FALSE, "updated_at" %s NOT NULL DEFAULT CURRENT_TIMESTAMP)`, writebehind.QuoteIdent(name), blob, ts)
			if _, err := db.ExecContext(t.Context(), ddl); err != nil {
				t.Fatal(err)
			}
			ins := `INSERT INTO ` + writebehind.QuoteIdent(name) + ` ("key", "value", "version") VALUES ('old', 'v', 5)`
			if _, err := db.ExecContext(t.Context(), ins); err != nil {
				t.Fatal(err)
			}
			s, err := writebehind.NewSQLSink(db, &writebehind.SQLSinkConfig{Dialect: tc.d, Table: tc.table(name)})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Write(t.Context(), []writebehind.Change{setChange("x", "y", 1)}); err == nil {
				t.Fatal("Write to a table without the issued column succeeded")
			}
			for range 2 { // the second call finds the column
				if err := s.CreateSchema(t.Context()); err != nil {
					t.Fatalf("CreateSchema on an existing table: %v", err)
				}
			}
			if v, issued := storedRow(t, s, "old"); v != 5 || issued != 0 {
				t.Fatalf("old row: version %d issued %d, want 5 and 0", v, issued)
			}
			// The old row counts as issued before every change with a time.
			err = s.Write(t.Context(), []writebehind.Change{issuedChange("old", "lost", 4, issuedAt)})
			if !errors.Is(err, writebehind.ErrVersionRegressed) {
				t.Fatalf("Write of a lower version issued later = %v, want ErrVersionRegressed", err)
			}
			mustWriteSink(t, s, issuedChange("old", "new", 6, issuedAt), setChange("x", "y", 1))
			wantSinkAll(t, s, map[string]string{"old": "new", "x": "y"})
		})
	}
}

func TestSQLSink_Write_StatementBytes(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, s *writebehind.SQLSink) {
		s.SetMaxBytes(1000)
		type statement struct{ rows, size int }
		var statements []statement
		s.SetAfterStatement(func(rows, size int) { statements = append(statements, statement{rows, size}) })
		var batch []writebehind.Change
		want := make(map[string]string)
		for i := range 10 {
			key := fmt.Sprintf("k%02d", i)
			value := strings.Repeat(strconv.Itoa(i), 297) // 300 bytes with the key
			batch = append(batch, setChange(key, value, 1))
			want[key] = value
		}
		huge := strings.Repeat("h", 2500) // larger than a statement may carry
		batch = append(batch, setChange("k10", huge, 1))
		want["k10"] = huge
		rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		mustWriteSink(t, s, batch...)
		wantSinkAll(t, s, want)
		// Rows go in key order: three of 300 bytes fit in 1000, the tenth
		// goes alone, and the large one has a statement of its own.
		wantStatements := []statement{{3, 900}, {3, 900}, {3, 900}, {1, 300}, {1, 2503}}
		if !slices.Equal(statements, wantStatements) {
			t.Fatalf("statements (rows, bytes) %v, want %v", statements, wantStatements)
		}
	})
}
