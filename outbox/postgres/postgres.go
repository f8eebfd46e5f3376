// Package postgres is the PostgreSQL driver of package outbox: enqueue
// streamq jobs in a database/sql (*sql.Tx) or pgx (pgx.Tx) transaction,
// and let an [outbox.Relay] move them to Redis, claiming rows with FOR
// UPDATE SKIP LOCKED and waking on LISTEN/NOTIFY.
//
// It is a package of its own so that only programs that use PostgreSQL
// link pgx: package outbox links no SQL driver.
//
//	db, err := sql.Open("pgx", dsn) // or writebehind/postgres.Open(dsn)
//	ob, err := postgres.New(db, nil)
//	err = ob.Migrate(ctx)
//	...
//	id, err := ob.Enqueue(ctx, tx, queue, payload)
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/outbox"
	"github.com/streamq/streamq/outbox/internal/sqlutil"
)

// DefaultChannel is the LISTEN/NOTIFY channel when Config.Channel is empty.
const DefaultChannel = "streamq_outbox"

// Config configures an [Outbox]. The zero value is valid.
type Config struct {
	// Table is the outbox table, "table" or "schema.table", plain
	// identifiers. Defaults to outbox.DefaultTable.
	Table string
	// Channel is the channel that Enqueue notifies (pg_notify, delivered
	// when the transaction commits) and that relays listen on. Defaults to
	// DefaultChannel.
	Channel string
	// NoNotify turns the notifications off: Enqueue does not notify, and
	// relays poll (RelayConfig.PollInterval). A NOTIFY takes a lock at
	// commit that serialises committing transactions that notified, which
	// may matter at thousands of commits per second. Defaults to false.
	NoNotify bool
}

// Outbox is an outbox table in PostgreSQL: it enqueues jobs in the
// caller's transactions, and is the [outbox.Store] of the relays over the
// table. It is safe for concurrent use.
type Outbox struct {
	db        *sql.DB
	cfg       Config
	table     string // quoted
	insertSQL string
	claim     string
	putBack   string
	backlog   string

	mu     sync.Mutex // guards listen
	listen *sql.Conn  // the LISTEN connection, once a relay waited
}

// New returns the outbox table of cfg (nil means the zero config) in db.
// db is a pool of any database/sql driver for PostgreSQL for enqueueing
// and claiming; relays wait for notifications only on the pgx stdlib
// driver (github.com/jackc/pgx/v5/stdlib) and poll on others. It validates
// cfg without talking to the database, and never modifies *cfg.
func New(db *sql.DB, cfg *Config) (*Outbox, error) {
	if db == nil {
		return nil, &streamq.ConfigError{Field: "db", Reason: "is nil: open one with sql.Open(\"pgx\", dsn) or writebehind/postgres.Open"}
	}
	o := &Outbox{db: db}
	if cfg != nil {
		o.cfg = *cfg
	}
	if o.cfg.Table == "" {
		o.cfg.Table = outbox.DefaultTable
	}
	if o.cfg.Channel == "" {
		o.cfg.Channel = DefaultChannel
	}
	if _, _, err := sqlutil.Table("Config.Channel", o.cfg.Channel, false); err != nil {
		return nil, err
	}
	t, _, err := sqlutil.Table("Config.Table", o.cfg.Table, true)
	if err != nil {
		return nil, err
	}
	o.table = t
	o.insertSQL = `INSERT INTO ` + t + ` (id, queue, payload, options) VALUES ($1, $2, $3, $4)`
	if !o.cfg.NoNotify {
		o.insertSQL = `WITH ins AS (` + o.insertSQL + `) SELECT pg_notify($5, '')`
	}
	// The claim deletes the rows it takes, in a transaction that commits
	// only after Redis accepted their jobs: one statement per batch both
	// claims and removes, and a relay that dies holding it loses the
	// deletion with its connection. WITH ... ORDER BY keeps the rows in
	// the order they were committed. The rows are deleted by the ctids the
	// locking sub-select returns (a TID scan; no statement here updates a
	// row, so a locked row keeps its ctid): "id IN (SELECT id ...)" let
	// the planner join the sub-select with a sequential scan of the whole
	// table, so that every batch cost time in proportion to the backlog.
	o.claim = `WITH d AS (DELETE FROM ` + t + ` WHERE ctid = ANY(ARRAY(SELECT ctid FROM ` + t + `
  WHERE available_at <= now() ORDER BY available_at LIMIT $1 FOR UPDATE SKIP LOCKED))
  RETURNING ctid, id, queue, payload, options, created_at, available_at, attempts, last_error)
SELECT id, queue, payload, options, (EXTRACT(EPOCH FROM now() - created_at) * 1000)::bigint, attempts,
  created_at, available_at, last_error FROM d ORDER BY available_at, ctid`
	o.putBack = `INSERT INTO ` + t + ` (id, queue, payload, options, created_at, available_at, attempts, last_error)
VALUES ($1, $2, $3, $4, $5, COALESCE($6::timestamptz, now() + $7 * interval '1 millisecond'), $8, $9)`
	o.backlog = `SELECT queue, count(*), (EXTRACT(EPOCH FROM now() - min(created_at)) * 1000)::bigint,
count(*) FILTER (WHERE attempts > 0), COALESCE(max(last_error) FILTER (WHERE attempts > 0), ''),
COALESCE((EXTRACT(EPOCH FROM now() - min(available_at) FILTER (WHERE attempts = 0 AND available_at <= now())) * 1000)::bigint, 0)
FROM ` + t + ` GROUP BY queue ORDER BY queue`
	return o, nil
}

// Table returns the outbox table's name.
func (o *Outbox) Table() string { return o.cfg.Table }

// Migrate creates the outbox table and its index if they do not exist. It
// is idempotent: run it at every start. The schema is in docs/outbox.md.
func (o *Outbox) Migrate(ctx context.Context) error {
	_, bare, _ := sqlutil.Table("Config.Table", o.cfg.Table, true)
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + o.table + ` (
  id           text        PRIMARY KEY,
  queue        text        NOT NULL,
  payload      bytea       NOT NULL,
  options      text        NOT NULL DEFAULT '',
  created_at   timestamptz NOT NULL DEFAULT now(),
  available_at timestamptz NOT NULL DEFAULT now(),
  attempts     integer     NOT NULL DEFAULT 0,
  last_error   text        NOT NULL DEFAULT ''
)`,
		`CREATE INDEX IF NOT EXISTS "` + bare + `_available_idx" ON ` + o.table + ` (available_at)`,
	}
	return sqlutil.Migrate(ctx, o.db, o.cfg.Table, stmts...)
}

// Execer is a database/sql transaction: *sql.Tx (also *sql.Conn or
// *sql.DB, outside a transaction).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// PgxExecer is a pgx transaction: pgx.Tx (also *pgx.Conn or a pgxpool
// pool or transaction).
type PgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Enqueue writes a job for queue q into the outbox table through tx, the
// caller's transaction, and returns the row's ID. The job is enqueued once
// tx commits, and never if it rolls back. The options are
// [streamq.Producer.Enqueue]'s (see [outbox.Prepare] for the ones the
// outbox refuses); a job they or q's limits refuse fails here, before
// anything is written. A database error fails it as any write in tx
// would.
func (o *Outbox) Enqueue(ctx context.Context, tx Execer, q *streamq.Queue, payload []byte, opts ...streamq.EnqueueOption) (string, error) {
	return o.insert(ctx, tx, nil)(outbox.Prepare(q, payload, opts))
}

// EnqueueArgs is [Outbox.Enqueue] for typed args (see [outbox.PrepareArgs]:
// JSON-encoded, the kind from args, the args' own options first).
func (o *Outbox) EnqueueArgs(ctx context.Context, tx Execer, q *streamq.Queue, args streamq.JobArgs, opts ...streamq.EnqueueOption) (string, error) {
	return o.insert(ctx, tx, nil)(outbox.PrepareArgs(q, args, nil, opts))
}

// EnqueuePgx is [Outbox.Enqueue] through a pgx transaction.
func (o *Outbox) EnqueuePgx(ctx context.Context, tx PgxExecer, q *streamq.Queue, payload []byte, opts ...streamq.EnqueueOption) (string, error) {
	return o.insert(ctx, nil, tx)(outbox.Prepare(q, payload, opts))
}

// EnqueueArgsPgx is [Outbox.EnqueueArgs] through a pgx transaction.
func (o *Outbox) EnqueueArgsPgx(ctx context.Context, tx PgxExecer, q *streamq.Queue, args streamq.JobArgs, opts ...streamq.EnqueueOption) (string, error) {
	return o.insert(ctx, nil, tx)(outbox.PrepareArgs(q, args, nil, opts))
}

// insert returns a function that inserts a prepared row through tx or
// ptx, and returns its ID.
func (o *Outbox) insert(ctx context.Context, tx Execer, ptx PgxExecer) func(*outbox.Row, error) (string, error) {
	return func(row *outbox.Row, err error) (string, error) {
		if err != nil {
			return "", err
		}
		if tx != nil {
			_, err = tx.ExecContext(ctx, o.insertSQL, o.args(row)...)
		} else {
			_, err = ptx.Exec(ctx, o.insertSQL, o.args(row)...)
		}
		if err != nil {
			return "", fmt.Errorf("streamq: outbox enqueue into %s: %w", o.cfg.Table, err)
		}
		return row.ID, nil
	}
}

// args returns the insert's arguments for row.
func (o *Outbox) args(row *outbox.Row) []any {
	args := []any{row.ID, row.Queue, row.Payload, row.Options}
	if !o.cfg.NoNotify {
		args = append(args, o.cfg.Channel)
	}
	return args
}

// Claim implements [outbox.Store]: in a transaction, one statement
// deletes up to n due rows that no other relay holds (FOR UPDATE SKIP
// LOCKED) and returns them. Finish puts back the rows it did not relay and
// commits; Release rolls back. A relay that dies holding a claim loses it
// with its connection, and the rows are back.
func (o *Outbox) Claim(ctx context.Context, n int) (outbox.Claim, error) {
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	c := &claim{o: o, tx: tx}
	if err := c.read(ctx, n); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return c, nil
}

// claim is rows deleted by a transaction that is still open.
type claim struct {
	o    *Outbox
	tx   *sql.Tx
	rows []outbox.Row
	kept []kept // the columns a put-back row keeps, by index of rows
}

// kept are the columns of a claimed row that a row put back keeps.
type kept struct {
	created, available time.Time
	lastError          string
}

// read runs the claim's statement.
func (c *claim) read(ctx context.Context, n int) error {
	rows, err := c.tx.QueryContext(ctx, c.o.claim, n)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var r outbox.Row
		var k kept
		var ageMS int64
		if err := rows.Scan(&r.ID, &r.Queue, &r.Payload, &r.Options, &ageMS, &r.Attempts, &k.created, &k.available, &k.lastError); err != nil {
			return err
		}
		r.Age = time.Duration(ageMS) * time.Millisecond
		c.rows = append(c.rows, r)
		c.kept = append(c.kept, k)
	}
	return rows.Err()
}

func (c *claim) Rows() []outbox.Row { return c.rows }

func (c *claim) Release(context.Context) error { return c.tx.Rollback() }

// Finish implements [outbox.Claim]: the rows of done stay deleted, the
// others are put back (those of failed with their error, due after their
// backoff), and the transaction commits. With no row done or failed it
// rolls back.
func (c *claim) Finish(ctx context.Context, done []string, failed []outbox.Failure) ([]string, error) {
	if len(done) == 0 && len(failed) == 0 {
		return nil, c.tx.Rollback()
	}
	if err := c.putBack(ctx, done, failed); err != nil {
		_ = c.tx.Rollback()
		return nil, err
	}
	if err := c.tx.Commit(); err != nil {
		return nil, err
	}
	return done, nil
}

// putBack inserts again the claimed rows that are not in done: those of
// failed with one more attempt, their error and their backoff, the others
// as they were.
func (c *claim) putBack(ctx context.Context, done []string, failed []outbox.Failure) error {
	if len(done) == len(c.rows) {
		return nil
	}
	isDone := make(map[string]bool, len(done))
	for _, id := range done {
		isDone[id] = true
	}
	fails := make(map[string]outbox.Failure, len(failed))
	for _, f := range failed {
		fails[f.ID] = f
	}
	for i, r := range c.rows {
		if isDone[r.ID] {
			continue
		}
		k := c.kept[i]
		available, retryMS, attempts, lastError := any(k.available), int64(0), r.Attempts, k.lastError
		if f, ok := fails[r.ID]; ok {
			available, retryMS, attempts, lastError = nil, f.Retry.Milliseconds(), attempts+1, f.Error
		}
		if _, err := c.tx.ExecContext(ctx, c.o.putBack, r.ID, r.Queue, r.Payload, r.Options, k.created, available, retryMS, attempts, lastError); err != nil {
			return err
		}
	}
	return nil
}

// Backlog implements [outbox.Store].
func (o *Outbox) Backlog(ctx context.Context) (*outbox.Backlog, error) {
	rows, err := o.db.QueryContext(ctx, o.backlog)
	if err != nil {
		return nil, fmt.Errorf("streamq: outbox backlog of %s: %w", o.cfg.Table, err)
	}
	return sqlutil.Backlog(rows, o.cfg.Table)
}

// Wait implements [outbox.Waker]: it returns when a transaction that
// enqueued committed (a notification on the channel), after d, or when
// ctx ends. It listens on a connection of its own, taken from the pool at
// the first call and kept; an error drops it (the next call takes a new
// one). With Config.NoNotify, or a driver other than pgx's, it waits d.
func (o *Outbox) Wait(ctx context.Context, d time.Duration) error {
	if o.cfg.NoNotify {
		return sleep(ctx, d)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.listen == nil {
		conn, err := o.db.Conn(ctx)
		if err != nil {
			return err
		}
		if _, err := conn.ExecContext(ctx, `LISTEN "`+o.cfg.Channel+`"`); err != nil {
			_ = conn.Close()
			return err
		}
		o.listen = conn
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := o.listen.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		pc := c.Conn()
		if _, err := pc.WaitForNotification(wctx); err != nil {
			return err
		}
		// Take the notifications that are already here, so that one
		// wake-up covers them: for drainTime in all, and at most
		// drainMax, so that a steady stream of commits cannot hold the
		// relay here.
		dctx, cancel := context.WithTimeout(ctx, drainTime)
		defer cancel()
		for range drainMax {
			if _, err := pc.WaitForNotification(dctx); err != nil {
				return nil
			}
		}
		return nil
	})
	switch {
	case err == nil, wctx.Err() != nil:
		// Notified, or d passed or ctx ended: a timeout leaves pgx's
		// connection usable.
		return nil
	case errors.Is(err, errNotPgx):
		return sleep(ctx, d)
	}
	_ = o.listen.Close()
	o.listen = nil
	return err
}

// Close releases the LISTEN connection, if a relay waited. It does not
// close the *sql.DB.
func (o *Outbox) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.listen == nil {
		return nil
	}
	err := o.listen.Close()
	o.listen = nil
	return err
}

// drainTime and drainMax bound the notifications that Wait takes after the
// one that woke it.
const (
	drainTime = time.Millisecond
	drainMax  = 1000
)

// errNotPgx reports a pool whose driver is not pgx's stdlib.
var errNotPgx = errors.New("streamq: outbox notifications need the pgx stdlib driver")

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return nil
}

var (
	_ outbox.Store = (*Outbox)(nil)
	_ outbox.Waker = (*Outbox)(nil)
	_ PgxExecer    = (pgx.Tx)(nil)
)
