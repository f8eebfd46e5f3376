package postgres_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/pgtest"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/postgres"
)

// testDSN is the test PostgreSQL (see pgtest.DSN).
func testDSN() string { return pgtest.DSN() }

func TestOpen(t *testing.T) {
	t.Parallel()
	if _, err := postgres.Open(""); err == nil {
		t.Error(`Open("") succeeded, want an error`)
	}
	if _, err := postgres.Open("postgres://user:secret@host:notaport/db"); err == nil {
		t.Error("Open with an invalid port succeeded, want an error")
	} else if strings.Contains(err.Error(), "secret") {
		t.Errorf("Open error shows the password: %v", err)
	}
}

// TestNewSink_RoundTrip writes through a sink on the test PostgreSQL. It
// skips when none answers, unless STREAMQ_REQUIRE_POSTGRES is set.
func TestNewSink_RoundTrip(t *testing.T) {
	t.Parallel()
	db, err := postgres.Open(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	pgtest.Require(t, db, testDSN())
	ctx := t.Context()
	table := fmt.Sprintf("wbt_postgres_roundtrip_%016x", rand.Uint64())
	s, err := postgres.NewSink(db, &writebehind.SQLSinkConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if s.Dialect() != writebehind.DialectPostgres {
		t.Errorf("Dialect() = %v, want postgres", s.Dialect())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS "`+table+`"`); err != nil {
			t.Errorf("drop table %s: %v", table, err)
		}
	})
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []writebehind.Change{{Key: "k", Value: []byte("v"), Version: 1}}); err != nil {
		t.Fatal(err)
	}
	value, version, deleted, found, err := s.Get(ctx, "k")
	if err != nil || !found || deleted || version != 1 || string(value) != "v" {
		t.Errorf("Get(k) = %q, %d, deleted %v, found %v, %v; want v at version 1", value, version, deleted, found, err)
	}
}

// otherConnector is a connector of a driver that is not pgx's.
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
	db, err := postgres.Open(testDSN()) // does not connect
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	otherDB := sql.OpenDB(otherConnector{})
	t.Cleanup(func() { _ = otherDB.Close() })

	for _, cfg := range []*writebehind.SQLSinkConfig{nil, {}, {Dialect: writebehind.DialectPostgres, Table: "cache.Users_2"}} {
		var before writebehind.SQLSinkConfig
		if cfg != nil {
			before = *cfg
		}
		if _, err := postgres.NewSink(db, cfg); err != nil {
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
		{"nil db", nil, nil, "db", "postgres.Open"},
		{"other driver", otherDB, nil, "db", "writebehind.NewSQLSink"},
		{"sqlite dialect", db, &writebehind.SQLSinkConfig{Dialect: writebehind.DialectSQLite}, "SQLSinkConfig.Dialect", "sqlite.NewSink"},
		{"bad column", db, &writebehind.SQLSinkConfig{ValueColumn: "val ue"}, "SQLSinkConfig.ValueColumn", "ASCII letters"},
	} {
		_, err := postgres.NewSink(tt.db, tt.cfg)
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
