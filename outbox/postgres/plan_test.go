package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/streamq/streamq/internal/pgtest"
)

// TestClaim_NoSequentialScan checks the plan of the claim on a table with
// a backlog: it must find the rows it deletes without reading the whole
// table. The earlier "DELETE ... WHERE id IN (SELECT id ...)" was planned
// as a hash join over a sequential scan, so each batch of 500 rows cost
// time in proportion to the backlog (8 ms against 1.2 ms at 50,000 rows).
func TestClaim_NoSequentialScan(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.DSN()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	pgtest.Require(t, db, dsn)
	table := fmt.Sprintf("streamq_outbox_plan_%d", time.Now().UnixNano())
	o, err := New(db, &Config{Table: table, NoNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP TABLE IF EXISTS `+o.table) })
	if _, err := db.ExecContext(ctx, `INSERT INTO `+o.table+` (id, queue, payload)
SELECT 'r' || g, 'q', '\x00'::bytea FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE `+o.table); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, `EXPLAIN `+o.claim, 500)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if strings.Contains(text, "Seq Scan") {
		t.Fatalf("the claim reads the whole table of 20,000 rows to take 500:\n%s", text)
	}
	if !strings.Contains(text, "Tid Scan") {
		t.Fatalf("the claim does not delete by ctid:\n%s", text)
	}

	// The claim takes rows and deletes those relayed.
	c, err := o.Claim(ctx, 500)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(c.Rows()); got != 500 {
		t.Fatalf("claimed %d rows, want 500", got)
	}
	done := make([]string, 0, 500)
	for _, r := range c.Rows() {
		done = append(done, r.ID)
	}
	if _, err := c.Finish(ctx, done, nil); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+o.table).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 20000-500 {
		t.Fatalf("%d rows left after a claim of 500, want %d", left, 20000-500)
	}
}
