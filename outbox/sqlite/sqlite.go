// Package sqlite is the SQLite driver of package outbox: enqueue streamq
// jobs in a database/sql transaction (*sql.Tx) on SQLite, and let an
// [outbox.Relay] move them to Redis.
//
// SQLite has no row locks, so relays hold rows by lease: one UPDATE sets a
// fresh claim token and an expiry on up to n due rows whose lease (if any)
// has expired, and returns them. SQLite runs one write at a time, so two
// relays never take the same row with live leases; a relay removes only
// rows that still carry its token; and a relay that takes a row over after
// a lease expired (its holder died, or was slower than the lease) finds the
// mark its holder left in Redis and does not enqueue the job again. See
// docs/outbox.md for the argument in full.
//
// It links no driver: open the database with one (writebehind/sqlite.Open
// opens modernc.org/sqlite with WAL, a busy timeout and IMMEDIATE
// transactions, which suit the outbox too).
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/outbox"
	"github.com/streamq/streamq/outbox/internal/sqlutil"
)

// DefaultLease is how long a relay holds the rows it claimed when
// Config.Lease is 0.
const DefaultLease = 30 * time.Second

// nowMS is SQLite's clock in Unix milliseconds: every time of the table is
// the database's, so the clocks of the relays do not matter.
const nowMS = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`

// Config configures an [Outbox]. The zero value is valid.
type Config struct {
	// Table is the outbox table, a plain identifier. Defaults to
	// outbox.DefaultTable.
	Table string
	// Lease is how long a relay holds the rows it claimed; rows of a relay
	// that died are taken by another one after it. A relay slower than its
	// lease doubles no job, but wastes work. Defaults to DefaultLease.
	Lease time.Duration
}

// Outbox is an outbox table in SQLite: it enqueues jobs in the caller's
// transactions, and is the [outbox.Store] of the relays over the table. It
// is safe for concurrent use.
type Outbox struct {
	db    *sql.DB
	cfg   Config
	table string // quoted
	bare  string
}

// New returns the outbox table of cfg (nil means the zero config) in db,
// an SQLite database. It validates cfg without talking to the database,
// and never modifies *cfg.
func New(db *sql.DB, cfg *Config) (*Outbox, error) {
	if db == nil {
		return nil, &streamq.ConfigError{Field: "db", Reason: "is nil: open one with writebehind/sqlite.Open or sql.Open"}
	}
	o := &Outbox{db: db}
	if cfg != nil {
		o.cfg = *cfg
	}
	if o.cfg.Table == "" {
		o.cfg.Table = outbox.DefaultTable
	}
	switch {
	case o.cfg.Lease < 0:
		return nil, &streamq.ConfigError{Field: "Config.Lease", Reason: fmt.Sprintf("is negative (%s): use 0 for the default, %s", o.cfg.Lease, DefaultLease)}
	case o.cfg.Lease == 0:
		o.cfg.Lease = DefaultLease
	case o.cfg.Lease < time.Millisecond:
		return nil, &streamq.ConfigError{Field: "Config.Lease", Reason: fmt.Sprintf("is %s: use at least 1ms, longer than a batch takes to enqueue", o.cfg.Lease)}
	}
	t, bare, err := sqlutil.Table("Config.Table", o.cfg.Table, false)
	if err != nil {
		return nil, err
	}
	o.table, o.bare = t, bare
	return o, nil
}

// Table returns the outbox table's name.
func (o *Outbox) Table() string { return o.cfg.Table }

// Migrate creates the outbox table and its index if they do not exist. It
// is idempotent: run it at every start. The schema is in docs/outbox.md.
func (o *Outbox) Migrate(ctx context.Context) error {
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + o.table + ` (
  id             TEXT    PRIMARY KEY,
  queue          TEXT    NOT NULL,
  payload        BLOB    NOT NULL,
  options        TEXT    NOT NULL DEFAULT '',
  created_ms     INTEGER NOT NULL,
  available_ms   INTEGER NOT NULL,
  claim          TEXT,
  claim_until_ms INTEGER NOT NULL DEFAULT 0,
  attempts       INTEGER NOT NULL DEFAULT 0,
  last_error     TEXT    NOT NULL DEFAULT ''
)`,
		`CREATE INDEX IF NOT EXISTS "` + o.bare + `_available_idx" ON ` + o.table + ` (available_ms)`,
	}
	return sqlutil.Migrate(ctx, o.db, o.cfg.Table, stmts...)
}

// Execer is a database/sql transaction: *sql.Tx (also *sql.Conn or
// *sql.DB, outside a transaction).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Enqueue writes a job for queue q into the outbox table through tx, the
// caller's transaction, and returns the row's ID. The job is enqueued once
// tx commits, and never if it rolls back. The options are
// [streamq.Producer.Enqueue]'s (see [outbox.Prepare] for the ones the
// outbox refuses); a job they or q's limits refuse fails here, before
// anything is written. A database error fails it as any write in tx
// would.
func (o *Outbox) Enqueue(ctx context.Context, tx Execer, q *streamq.Queue, payload []byte, opts ...streamq.EnqueueOption) (string, error) {
	return o.insert(ctx, tx)(outbox.Prepare(q, payload, opts))
}

// EnqueueArgs is [Outbox.Enqueue] for typed args (see [outbox.PrepareArgs]:
// JSON-encoded, the kind from args, the args' own options first).
func (o *Outbox) EnqueueArgs(ctx context.Context, tx Execer, q *streamq.Queue, args streamq.JobArgs, opts ...streamq.EnqueueOption) (string, error) {
	return o.insert(ctx, tx)(outbox.PrepareArgs(q, args, nil, opts))
}

// insert returns a function that inserts a prepared row through tx and
// returns its ID.
func (o *Outbox) insert(ctx context.Context, tx Execer) func(*outbox.Row, error) (string, error) {
	return func(row *outbox.Row, err error) (string, error) {
		if err != nil {
			return "", err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+o.table+` (id, queue, payload, options, created_ms, available_ms)
VALUES (?, ?, ?, ?, `+nowMS+`, `+nowMS+`)`, row.ID, row.Queue, row.Payload, row.Options); err != nil {
			return "", fmt.Errorf("streamq: outbox enqueue into %s: %w", o.cfg.Table, err)
		}
		return row.ID, nil
	}
}

// Claim implements [outbox.Store]: one UPDATE leases up to n due rows whose
// lease, if any, expired, to a new claim token, for Config.Lease.
func (o *Outbox) Claim(ctx context.Context, n int) (outbox.Claim, error) {
	c := &claim{o: o, token: outbox.NewID()}
	rows, err := o.db.QueryContext(ctx, `UPDATE `+o.table+` SET claim = ?1, claim_until_ms = `+nowMS+` + ?2
WHERE id IN (SELECT id FROM `+o.table+` WHERE available_ms <= `+nowMS+` AND claim_until_ms <= `+nowMS+`
             ORDER BY available_ms LIMIT ?3)
RETURNING id, queue, payload, options, `+nowMS+` - created_ms, attempts`, c.token, o.cfg.Lease.Milliseconds(), n)
	if err != nil {
		return nil, err
	}
	if c.rows, err = sqlutil.Rows(rows); err != nil {
		return nil, err
	}
	return c, nil
}

// claim is rows leased under a token.
type claim struct {
	o     *Outbox
	token string
	rows  []outbox.Row
}

func (c *claim) Rows() []outbox.Row { return c.rows }

func (c *claim) Release(ctx context.Context) error {
	if len(c.rows) == 0 {
		return nil
	}
	_, err := c.o.db.ExecContext(ctx, `UPDATE `+c.o.table+` SET claim = NULL, claim_until_ms = 0
WHERE id IN (SELECT value FROM json_each(?)) AND claim = ?`, c.ids(), c.token)
	return err
}

// Finish implements [outbox.Claim]. When every claimed row is done, as
// in a batch that Redis accepted, it is one DELETE; else one transaction
// also puts back the failed rows and releases the others.
func (c *claim) Finish(ctx context.Context, done []string, failed []outbox.Failure) ([]string, error) {
	if len(done) == len(c.rows) {
		return c.remove(ctx, c.o.db, done)
	}
	tx, err := c.o.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	removed, err := c.finish(ctx, tx, done, failed)
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return removed, nil
}

// finish removes the rows of done and puts back those of failed, each
// only while it carries the claim's token, and releases the rest.
func (c *claim) finish(ctx context.Context, tx *sql.Tx, done []string, failed []outbox.Failure) ([]string, error) {
	t := c.o.table
	removed, err := c.remove(ctx, tx, done)
	if err != nil {
		return nil, err
	}
	for _, f := range failed {
		if _, err := tx.ExecContext(ctx, `UPDATE `+t+` SET claim = NULL, claim_until_ms = 0, attempts = attempts + 1,
last_error = ?, available_ms = `+nowMS+` + ? WHERE id = ? AND claim = ?`, f.Error, f.Retry.Milliseconds(), f.ID, c.token); err != nil {
			return nil, err
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE `+t+` SET claim = NULL, claim_until_ms = 0
WHERE id IN (SELECT value FROM json_each(?)) AND claim = ?`, c.ids(), c.token); err != nil {
		return nil, err
	}
	return removed, nil
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// remove deletes the rows of done that still carry the claim's token, and
// returns their IDs.
func (c *claim) remove(ctx context.Context, db querier, done []string) ([]string, error) {
	if len(done) == 0 {
		return nil, nil
	}
	ids, _ := json.Marshal(done) // strings: never fails
	rows, err := db.QueryContext(ctx, `DELETE FROM `+c.o.table+` WHERE id IN (SELECT value FROM json_each(?)) AND claim = ? RETURNING id`, string(ids), c.token)
	if err != nil {
		return nil, err
	}
	return sqlutil.IDs(rows)
}

// ids returns the IDs of the claimed rows as a JSON array.
func (c *claim) ids() string {
	ids := make([]string, len(c.rows))
	for i, r := range c.rows {
		ids[i] = r.ID
	}
	b, _ := json.Marshal(ids) // strings: never fails
	return string(b)
}

// Backlog implements [outbox.Store].
func (o *Outbox) Backlog(ctx context.Context) (*outbox.Backlog, error) {
	rows, err := o.db.QueryContext(ctx, `SELECT queue, count(*), `+nowMS+` - min(created_ms), sum(attempts > 0),
COALESCE(max(CASE WHEN attempts > 0 THEN last_error END), ''),
COALESCE(`+nowMS+` - min(CASE WHEN attempts = 0 AND available_ms <= `+nowMS+` THEN available_ms END), 0) FROM `+o.table+` GROUP BY queue ORDER BY queue`)
	if err != nil {
		return nil, fmt.Errorf("streamq: outbox backlog of %s: %w", o.cfg.Table, err)
	}
	return sqlutil.Backlog(rows, o.cfg.Table)
}

var _ outbox.Store = (*Outbox)(nil)
