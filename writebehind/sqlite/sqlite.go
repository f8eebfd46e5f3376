// Package sqlite stores write-behind changes in SQLite: [Open] opens a
// database file with the pure-Go modernc.org/sqlite driver, set up for a
// sink, and [NewSink] returns a [writebehind.SQLSink] of dialect
// [writebehind.DialectSQLite] on it.
//
// It is a package of its own so that only programs that write to SQLite
// link the driver: package writebehind links none.
//
//	db, err := sqlite.Open("users.db")
//	...
//	defer db.Close()
//	sink, err := sqlite.NewSink(db, nil) // table "streamq_writebehind"
//	...
//	err = sink.CreateSchema(ctx)
//	h, err := writebehind.NewHandler(sink, nil)
package sqlite

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	modernc "modernc.org/sqlite"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
)

// busyTimeout is how long a writer waits for another one's lock.
const busyTimeout = 10 * time.Second

// Open opens the SQLite database file at path (created if missing; use
// ":memory:" for a private in-memory database) with the pure-Go
// modernc.org/sqlite driver, set up for a write-behind sink:
//
//   - WAL journal, so readers do not block the writer, and synchronous=FULL,
//     so a committed batch survives a power failure before its stream entries
//     are acknowledged;
//   - a busy timeout of 10 s and BEGIN IMMEDIATE transactions, so writers from
//     other processes wait for each other instead of failing with
//     SQLITE_BUSY;
//   - foreign keys enforced;
//   - one open connection: SQLite runs one write transaction at a time
//     anyway, and queueing writers in the pool is cheaper than retrying
//     busy locks. Do not hold a *sql.Rows open while writing through the same
//     *sql.DB: the write would wait for the connection forever.
//
// Like [sql.Open], it does not touch the file: errors show on first use, for
// example in [writebehind.SQLSink.CreateSchema] or [sql.DB.PingContext]. The
// caller closes the returned *sql.DB.
func Open(path string) (*sql.DB, error) {
	if path == "" {
		return nil, &streamq.ConfigError{Field: "path", Reason: `path is empty: give a database file name, or ":memory:" for an in-memory database`}
	}
	// A "file:" URI keeps '?' and '#' in the path from being read as query
	// parameters; SQLite decodes the %-escapes.
	dsn := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path) +
		"?_txlock=immediate" +
		"&_pragma=busy_timeout(" + strconv.FormatInt(busyTimeout.Milliseconds(), 10) + ")" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=synchronous(FULL)" +
		"&_pragma=foreign_keys(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("streamq: open sqlite %q: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	// Keep the connection: an in-memory database lives only as long as it.
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
}

// NewSink returns a sink writing to db, a database opened with [Open] (or
// with the modernc.org/sqlite driver otherwise), as configured by cfg (nil
// means the zero config: table writebehind.DefaultTable with the default
// column names). cfg.Dialect may be left zero. For another SQLite driver,
// use [writebehind.NewSQLSink] with Dialect [writebehind.DialectSQLite].
//
// Like writebehind.NewSQLSink, it validates the configuration without
// talking to the database, and never modifies *cfg.
func NewSink(db *sql.DB, cfg *writebehind.SQLSinkConfig) (*writebehind.SQLSink, error) {
	if db == nil {
		return nil, &streamq.ConfigError{Field: "db", Reason: "db is nil: open one with sqlite.Open"}
	}
	if _, ok := db.Driver().(*modernc.Driver); !ok {
		return nil, &streamq.ConfigError{Field: "db", Reason: fmt.Sprintf("db's driver is %T, not modernc.org/sqlite: open db with sqlite.Open, or use writebehind.NewSQLSink with Dialect DialectSQLite for another SQLite driver", db.Driver())}
	}
	var c writebehind.SQLSinkConfig
	if cfg != nil {
		c = *cfg
	}
	switch c.Dialect {
	case 0:
		c.Dialect = writebehind.DialectSQLite
	case writebehind.DialectSQLite:
	default:
		return nil, &streamq.ConfigError{Field: "SQLSinkConfig.Dialect", Reason: fmt.Sprintf("%s does not match the sqlite driver: leave it zero, or open a PostgreSQL database with postgres.Open and use postgres.NewSink", c.Dialect)}
	}
	return writebehind.NewSQLSink(db, &c)
}
