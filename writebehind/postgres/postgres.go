// Package postgres stores write-behind changes in PostgreSQL: [Open] opens
// a connection pool with the github.com/jackc/pgx/v5/stdlib driver, and
// [NewSink] returns a [writebehind.SQLSink] of dialect
// [writebehind.DialectPostgres] on it.
//
// It is a package of its own so that only programs that write to PostgreSQL
// link the driver: package writebehind links none.
//
//	db, err := postgres.Open("postgres://app@localhost:5432/app?sslmode=disable")
//	...
//	defer db.Close()
//	sink, err := postgres.NewSink(db, &writebehind.SQLSinkConfig{Table: "cache.users"})
//	...
//	err = sink.CreateSchema(ctx)
//	h, err := writebehind.NewHandler(sink, nil)
package postgres

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
)

// Pool settings applied by Open.
const (
	maxIdleConns    = 4
	connMaxIdleTime = 5 * time.Minute
)

// Open opens a PostgreSQL connection pool with the pgx driver
// (github.com/jackc/pgx/v5/stdlib). dsn is a URL
// ("postgres://user:pass@host:5432/db?sslmode=disable") or a key=value string
// ("host=localhost user=app dbname=app"); as with libpq, settings it leaves
// out come from the PG* environment variables and the password file. The pool
// keeps up to 4 idle connections, closed after 5 minutes unused; its size is
// not capped (use [sql.DB.SetMaxOpenConns] to stay below the server's
// max_connections).
//
// It parses the DSN but, like [sql.Open], does not connect: connection errors
// show on first use, for example in [writebehind.SQLSink.CreateSchema] or
// [sql.DB.PingContext]. The caller closes the returned *sql.DB.
func Open(dsn string) (*sql.DB, error) {
	if dsn == "" {
		return nil, &streamq.ConfigError{Field: "dsn", Reason: `dsn is empty: give a URL such as "postgres://user@localhost:5432/db?sslmode=disable"`}
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx leaves the password out of its message.
		return nil, fmt.Errorf("streamq: open postgres: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxIdleConns(maxIdleConns)
	db.SetConnMaxIdleTime(connMaxIdleTime)
	return db, nil
}

// NewSink returns a sink writing to db, a pool opened with [Open] (or with
// the pgx stdlib driver otherwise), as configured by cfg (nil means the zero
// config: table writebehind.DefaultTable with the default column names).
// cfg.Dialect may be left zero. For another PostgreSQL driver, use
// [writebehind.NewSQLSink] with Dialect [writebehind.DialectPostgres].
//
// Like writebehind.NewSQLSink, it validates the configuration without
// talking to the database, and never modifies *cfg.
func NewSink(db *sql.DB, cfg *writebehind.SQLSinkConfig) (*writebehind.SQLSink, error) {
	if db == nil {
		return nil, &streamq.ConfigError{Field: "db", Reason: "db is nil: open one with postgres.Open"}
	}
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return nil, &streamq.ConfigError{Field: "db", Reason: fmt.Sprintf("db's driver is %T, not the pgx stdlib driver: open db with postgres.Open, or use writebehind.NewSQLSink with Dialect DialectPostgres for another PostgreSQL driver", db.Driver())}
	}
	var c writebehind.SQLSinkConfig
	if cfg != nil {
		c = *cfg
	}
	switch c.Dialect {
	case 0:
		c.Dialect = writebehind.DialectPostgres
	case writebehind.DialectPostgres:
	default:
		return nil, &streamq.ConfigError{Field: "SQLSinkConfig.Dialect", Reason: fmt.Sprintf("%s does not match the pgx driver: leave it zero, or open an SQLite database with sqlite.Open and use sqlite.NewSink", c.Dialect)}
	}
	return writebehind.NewSQLSink(db, &c)
}
