// Package pgtest finds the PostgreSQL server that tests use: POSTGRES_DSN,
// else a local server with trust authentication. A test that needs it and
// cannot reach it is skipped, or fails when STREAMQ_REQUIRE_POSTGRES is set
// (as CI sets it).
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"
)

// DefaultDSN is the test server when POSTGRES_DSN is not set.
const DefaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DSN returns POSTGRES_DSN, else DefaultDSN.
func DSN() string {
	if dsn := os.Getenv("POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return DefaultDSN
}

// Require pings db, opened on dsn, and skips tb when PostgreSQL does not
// answer within 30 seconds, or fails it when STREAMQ_REQUIRE_POSTGRES is
// set. The message shows dsn without its password.
func Require(tb testing.TB, db *sql.DB, dsn string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := db.PingContext(ctx)
	if err == nil {
		return
	}
	msg := fmt.Sprintf("PostgreSQL is not reachable at %s (POSTGRES_DSN, else the local default): %v; start one (for example: "+
		"docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust -e POSTGRES_DB=test postgres:15) "+
		"or point POSTGRES_DSN at a database where the tests may create tables", Redact(dsn), err)
	if os.Getenv("STREAMQ_REQUIRE_POSTGRES") != "" {
		tb.Fatalf("%s (STREAMQ_REQUIRE_POSTGRES is set)", msg)
	}
	tb.Skipf("%s; set STREAMQ_REQUIRE_POSTGRES=1 to fail instead of skipping", msg)
}

// Redact returns a URL DSN without its password; a key=value DSN is not
// shown at all.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "(key=value DSN not shown)"
	}
	return u.Redacted()
}
