// Package sqlutil holds what the outbox drivers share: table names and
// their quoting.
package sqlutil

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/outbox"
)

// identifier is one unquoted SQL identifier part.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Table checks name ("table" or, when schemas is true, "schema.table")
// and returns it quoted, and the bare table name (for index names).
func Table(field, name string, schemas bool) (quoted, bare string, err error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 || (len(parts) == 2 && !schemas) {
		return "", "", &streamq.ConfigError{Field: field, Reason: fmt.Sprintf("%q has too many dots: give a table name%s", name, map[bool]string{true: " or schema.table", false: ""}[schemas])}
	}
	for i, p := range parts {
		if !identifier.MatchString(p) {
			return "", "", &streamq.ConfigError{Field: field, Reason: fmt.Sprintf("%q is not a plain identifier: use letters, digits and underscores, not starting with a digit, at most 63", name)}
		}
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, "."), parts[len(parts)-1][1 : len(parts[len(parts)-1])-1], nil
}

// Rows reads claimed rows: id, queue, payload, options, age (ms),
// attempts.
func Rows(rows *sql.Rows) ([]outbox.Row, error) {
	defer rows.Close()
	var out []outbox.Row
	for rows.Next() {
		var r outbox.Row
		var ageMS int64
		if err := rows.Scan(&r.ID, &r.Queue, &r.Payload, &r.Options, &ageMS, &r.Attempts); err != nil {
			return nil, err
		}
		r.Age = time.Duration(ageMS) * time.Millisecond
		out = append(out, r)
	}
	return out, rows.Err()
}

// IDs reads a column of row IDs.
func IDs(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// Backlog reads a backlog per queue: queue, rows, oldest age (ms), rows
// failing, a last error, the lag (ms); and sums it up.
func Backlog(rows *sql.Rows, table string) (*outbox.Backlog, error) {
	defer rows.Close()
	b := &outbox.Backlog{}
	for rows.Next() {
		var q outbox.QueueBacklog
		var ageMS, lagMS int64
		if err := rows.Scan(&q.Queue, &q.Rows, &ageMS, &q.Failing, &q.LastError, &lagMS); err != nil {
			return nil, fmt.Errorf("streamq: outbox backlog of %s: %w", table, err)
		}
		q.Oldest = time.Duration(ageMS) * time.Millisecond
		q.Lag = time.Duration(max(lagMS, 0)) * time.Millisecond
		b.Queues = append(b.Queues, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("streamq: outbox backlog of %s: %w", table, err)
	}
	b.Total()
	return b, nil
}

// Migrate runs the statements of a migration of table.
func Migrate(ctx context.Context, db *sql.DB, table string, stmts ...string) error {
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("streamq: outbox migrate %s: %w", table, err)
		}
	}
	return nil
}
