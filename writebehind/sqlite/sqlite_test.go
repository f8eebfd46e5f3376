package sqlite_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/sqlite"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	if _, err := sqlite.Open(""); err == nil {
		t.Error(`Open("") succeeded, want an error`)
	}

	// Characters that mean something in a URI stay part of the file name.
	dir := t.TempDir()
	path := filepath.Join(dir, "odd?name#with%25chars.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	for pragma, want := range map[string]string{
		"journal_mode": "wal",
		"synchronous":  "2", // FULL
		"foreign_keys": "1",
		"busy_timeout": "10000",
	} {
		var got string
		if err := db.QueryRowContext(t.Context(), "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", pragma, err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %q, want %q", pragma, got, want)
		}
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database file: %v", err)
	}
	if stats := db.Stats(); stats.MaxOpenConnections != 1 {
		t.Errorf("MaxOpenConnections = %d, want 1", stats.MaxOpenConnections)
	}
}

// TestNewSink_InMemory writes through a sink on an in-memory database, which
// keeps its data on Open's one connection.
func TestNewSink_InMemory(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlite.NewSink(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Dialect() != writebehind.DialectSQLite {
		t.Errorf("Dialect() = %v, want sqlite", s.Dialect())
	}
	ctx := t.Context()
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []writebehind.Change{{Key: "k", Value: []byte("v"), Version: 1}}); err != nil {
		t.Fatal(err)
	}
	all, err := s.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || string(all["k"]) != "v" {
		t.Errorf("All() = %q, want k=v", all)
	}
}

// otherConnector is a connector of a driver that is not modernc.org/sqlite.
type otherConnector struct{}

func (otherConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("fake driver: no connections")
}
func (otherConnector) Driver() driver.Driver { return otherDriver{} }

type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("fake driver: no connections")
}

func TestNewSink_Config(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	otherDB := sql.OpenDB(otherConnector{})
	t.Cleanup(func() { _ = otherDB.Close() })

	for _, cfg := range []*writebehind.SQLSinkConfig{nil, {}, {Dialect: writebehind.DialectSQLite, Table: "t"}} {
		var before writebehind.SQLSinkConfig
		if cfg != nil {
			before = *cfg
		}
		if _, err := sqlite.NewSink(db, cfg); err != nil {
			t.Errorf("NewSink(%+v): %v", cfg, err)
		}
		if cfg != nil && *cfg != before {
			t.Errorf("NewSink modified the caller's config: %+v, was %+v", *cfg, before)
		}
	}

	for _, tt := range []struct {
		name  string
		db    *sql.DB
		cfg   *writebehind.SQLSinkConfig
		field string
		hint  string // part of the reason
	}{
		{"nil db", nil, nil, "db", "sqlite.Open"},
		{"other driver", otherDB, nil, "db", "writebehind.NewSQLSink"},
		{"postgres dialect", db, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectPostgres}, "SQLSinkConfig.Dialect", "postgres.NewSink"},
		{"bad table", db, &writebehind.SQLSinkConfig{Table: "my-table"}, "SQLSinkConfig.Table", `'-'`},
	} {
		_, err := sqlite.NewSink(tt.db, tt.cfg)
		var ce *streamq.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%s: NewSink() = %v, want a *streamq.ConfigError", tt.name, err)
			continue
		}
		if ce.Field != tt.field || !strings.Contains(ce.Reason, tt.hint) {
			t.Errorf("%s: ConfigError{Field: %q, Reason: %q}, want field %q and a reason mentioning %q", tt.name, ce.Field, ce.Reason, tt.field, tt.hint)
		}
	}
}
