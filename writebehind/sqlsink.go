package writebehind

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/streamq/streamq"
)

// Dialect is the SQL dialect an [SQLSink] speaks. The zero value is no
// dialect: [NewSQLSink] needs one, and the constructors of the driver
// packages writebehind/sqlite and writebehind/postgres set it.
type Dialect int

// Supported dialects.
const (
	// DialectSQLite is SQLite 3.32 or later. Package writebehind/sqlite
	// opens SQLite databases with the pure-Go modernc.org/sqlite driver and
	// creates sinks of this dialect.
	DialectSQLite Dialect = iota + 1
	// DialectPostgres is PostgreSQL 9.5 or later. Package
	// writebehind/postgres opens PostgreSQL pools with the
	// github.com/jackc/pgx/v5/stdlib driver and creates sinks of this
	// dialect.
	DialectPostgres
)

// String returns the dialect's name: "sqlite", "postgres", or "unset" for
// the zero value.
func (d Dialect) String() string {
	switch d {
	case 0:
		return "unset"
	case DialectSQLite:
		return "sqlite"
	case DialectPostgres:
		return "postgres"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// SQLSink defaults.
const (
	// DefaultTable is the table used when SQLSinkConfig.Table is empty.
	DefaultTable = "streamq_writebehind"
	// DefaultKeyColumn is the key column used when SQLSinkConfig.KeyColumn is empty.
	DefaultKeyColumn = "key"
	// DefaultValueColumn is the value column used when SQLSinkConfig.ValueColumn is empty.
	DefaultValueColumn = "value"
	// DefaultVersionColumn is the version column used when SQLSinkConfig.VersionColumn is empty.
	DefaultVersionColumn = "version"
	// DefaultDeletedColumn is the tombstone column used when SQLSinkConfig.DeletedColumn is empty.
	DefaultDeletedColumn = "deleted"
	// DefaultUpdatedAtColumn is the timestamp column used when SQLSinkConfig.UpdatedAtColumn is empty.
	DefaultUpdatedAtColumn = "updated_at"
	// DefaultIssuedColumn is the issue time column used when SQLSinkConfig.IssuedColumn is empty.
	DefaultIssuedColumn = "issued"

	// MaxIdentifierLen is the longest accepted table, schema or column name,
	// in bytes (PostgreSQL's limit; longer names would be silently truncated).
	MaxIdentifierLen = 63
)

// Bind parameter limits per statement, and the parameters one row takes.
const (
	sqliteMaxParams   = 32766 // SQLITE_MAX_VARIABLE_NUMBER of SQLite >= 3.32
	postgresMaxParams = 65535 // the wire protocol counts parameters in 16 bits
	paramsPerRow      = 5     // key, value, version, deleted, issued

	// maxStatementBytes bounds the keys and values one INSERT statement of
	// an SQLSink carries, whatever the batch: PostgreSQL refuses a message
	// (the statement with its parameters) over 1 GB.
	maxStatementBytes = 64 << 20
)

// sqliteTimeLayout matches strftime('%Y-%m-%dT%H:%M:%fZ'), the column's
// default, so all updated_at values sort as text.
const sqliteTimeLayout = "2006-01-02T15:04:05.000Z"

// SQLSinkConfig configures an [SQLSink]: its dialect, table and column
// names. The zero value is valid for the constructors of the driver
// packages (sqlite.NewSink in writebehind/sqlite, postgres.NewSink in
// writebehind/postgres): table DefaultTable and the default column names.
// [NewSQLSink], for other drivers, also needs Dialect.
//
// Names may contain only ASCII letters, digits and underscores, must not start
// with a digit and are at most MaxIdentifierLen bytes. They are always quoted
// in SQL, so they are case-sensitive in PostgreSQL and may be SQL keywords.
type SQLSinkConfig struct {
	// Dialect is the SQL dialect of the database. sqlite.NewSink and
	// postgres.NewSink set it (and refuse another one); [NewSQLSink]
	// requires it. No default.
	Dialect Dialect

	// Table is the table that holds the rows, optionally qualified by a
	// schema ("cache.users"; for SQLite the schema is an attached database
	// such as "main"). [SQLSink.CreateSchema] creates the table but not the
	// schema. Defaults to DefaultTable.
	Table string

	// KeyColumn is the primary key column (text). Defaults to DefaultKeyColumn.
	KeyColumn string
	// ValueColumn holds the value (BLOB in SQLite, BYTEA in PostgreSQL); NULL
	// for deleted keys. A hash (a Change with Hash set, from
	// Writer.SetFields) is stored as its fields' canonical JSON object (see
	// EncodeFields). Defaults to DefaultValueColumn.
	ValueColumn string
	// VersionColumn holds the row's version (BIGINT NOT NULL). Defaults to
	// DefaultVersionColumn.
	VersionColumn string
	// DeletedColumn is the tombstone flag (BOOLEAN NOT NULL). Defaults to
	// DefaultDeletedColumn.
	DeletedColumn string
	// UpdatedAtColumn is set whenever a change is applied to the row: in
	// PostgreSQL to now() (the transaction's start) in a TIMESTAMPTZ; in
	// SQLite, which runs in-process, to the Go clock at Write, as text in
	// RFC 3339 UTC with milliseconds ("2006-01-02T15:04:05.000Z").
	// Defaults to DefaultUpdatedAtColumn.
	UpdatedAtColumn string
	// IssuedColumn holds Change.Issued of the change that wrote the row, the
	// Redis clock in microseconds when the writer issued it (BIGINT NOT NULL
	// DEFAULT 0; 0 for rows written before the column existed, and for
	// changes without an issue time). With the version it tells a replay of
	// an old change from a change refused with ErrVersionRegressed.
	// [SQLSink.CreateSchema] adds it to a table created without it. Defaults
	// to DefaultIssuedColumn.
	IssuedColumn string
}

// SQLSink is a [Sink] that upserts changes into one table of a SQLite or
// PostgreSQL database through database/sql. Each key has one row holding
// its value, version, a tombstone flag and the issue time of the change that
// wrote it (Change.Issued): a deletion keeps the row with deleted = true and
// value = NULL, so that a replayed older change can not bring the key back. A
// change is applied only if its version is newer than the row's; one whose
// version and issue time contradict the row's is refused with
// [ErrVersionRegressed] (see [SQLSink.Write]).
//
// Hashes ([Writer.SetFields]) are stored in the same value column as their
// fields' canonical JSON object, as [EncodeFields] writes it (for example
// {"age":"36","name":"Ada"}), and are versioned like strings. The table does
// not record whether a value was a string or a hash: the application knows
// which keys it writes with SetFields, and reads their rows back with
// [DecodeFields] (in PostgreSQL, convert_from(value, 'UTF8')::jsonb turns
// the value into JSON).
//
// An SQLSink is safe for concurrent use. The caller owns the *sql.DB and
// closes it.
type SQLSink struct {
	db       *sql.DB
	dialect  Dialect
	table    string // as configured, for messages
	maxRows  int    // rows per INSERT statement
	maxBytes int    // keys and values per INSERT statement (one row may exceed it)

	createSQL     string
	upsertPrefix  string // INSERT INTO ... VALUES
	upsertSuffix  string // ON CONFLICT ... WHERE ...
	storedPrefix  string // SELECT key, version, issued ... WHERE key IN (
	getSQL        string
	allSQL        string
	maxVersionSQL string

	// Adding the issued column to a table created without it.
	hasIssuedSQL  string
	hasIssuedArgs []any
	addIssuedSQL  string

	// afterStatement, when set by tests, runs after each INSERT statement of
	// a Write, inside its transaction, with the statement's number of rows
	// and their size (Change.size).
	afterStatement func(rows, size int)
}

// NewSQLSink returns a sink writing to db as configured by cfg, whose
// Dialect must be set. It is the constructor for databases opened with a
// driver of your choice (github.com/lib/pq, github.com/mattn/go-sqlite3,
// ...): package writebehind links no SQL driver. With the drivers streamq
// tests, use sqlite.NewSink (package writebehind/sqlite) or
// postgres.NewSink (package writebehind/postgres), which set the dialect and
// check the driver.
//
// NewSQLSink validates the configuration but does not talk to the database:
// call [SQLSink.CreateSchema] to create the table, or create it yourself
// with the same columns and a primary key (or unique constraint) on the key
// column.
func NewSQLSink(db *sql.DB, cfg *SQLSinkConfig) (*SQLSink, error) {
	if db == nil {
		return nil, &streamq.ConfigError{Field: "db", Reason: "db is nil: open one with sqlite.Open (package writebehind/sqlite) or postgres.Open (package writebehind/postgres)"}
	}
	var c SQLSinkConfig
	if cfg != nil {
		c = *cfg
	}
	defaultString(&c.Table, DefaultTable)
	defaultString(&c.KeyColumn, DefaultKeyColumn)
	defaultString(&c.ValueColumn, DefaultValueColumn)
	defaultString(&c.VersionColumn, DefaultVersionColumn)
	defaultString(&c.DeletedColumn, DefaultDeletedColumn)
	defaultString(&c.UpdatedAtColumn, DefaultUpdatedAtColumn)
	defaultString(&c.IssuedColumn, DefaultIssuedColumn)

	dialect, err := checkDialect(c.Dialect)
	if err != nil {
		return nil, err
	}
	table, err := quoteTable(c.Table)
	if err != nil {
		return nil, err
	}
	cols := []struct{ field, name string }{
		{"KeyColumn", c.KeyColumn},
		{"ValueColumn", c.ValueColumn},
		{"VersionColumn", c.VersionColumn},
		{"DeletedColumn", c.DeletedColumn},
		{"UpdatedAtColumn", c.UpdatedAtColumn},
		{"IssuedColumn", c.IssuedColumn},
	}
	seen := make(map[string]string, len(cols))
	for _, col := range cols {
		if reason := identifierProblem(col.name); reason != "" {
			return nil, &streamq.ConfigError{Field: "SQLSinkConfig." + col.field, Reason: reason}
		}
		// SQLite compares column names case-insensitively, even quoted ones.
		lower := strings.ToLower(col.name)
		if other, dup := seen[lower]; dup {
			return nil, &streamq.ConfigError{
				Field:  "SQLSinkConfig." + col.field,
				Reason: fmt.Sprintf("%q is also used by SQLSinkConfig.%s: give each column its own name", col.name, other),
			}
		}
		seen[lower] = col.field
	}

	var (
		key     = quoteIdent(c.KeyColumn)
		value   = quoteIdent(c.ValueColumn)
		version = quoteIdent(c.VersionColumn)
		deleted = quoteIdent(c.DeletedColumn)
		updated = quoteIdent(c.UpdatedAtColumn)
		issued  = quoteIdent(c.IssuedColumn)
	)
	s := &SQLSink{db: db, dialect: dialect, table: c.Table, maxBytes: maxStatementBytes}
	var blobType, timeType, falseLit, nowExpr string
	switch dialect {
	case DialectSQLite:
		s.maxRows = (sqliteMaxParams - 1) / paramsPerRow // one more for the time
		blobType, timeType, falseLit, nowExpr = "BLOB", "TEXT", "0", "strftime('%Y-%m-%dT%H:%M:%fZ','now')"
	case DialectPostgres:
		s.maxRows = postgresMaxParams / paramsPerRow
		blobType, timeType, falseLit, nowExpr = "BYTEA", "TIMESTAMPTZ", "FALSE", "now()"
	}
	s.createSQL = fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (\n"+
		"\t%s TEXT NOT NULL PRIMARY KEY,\n"+
		"\t%s %s,\n"+
		"\t%s BIGINT NOT NULL,\n"+
		"\t%s BOOLEAN NOT NULL DEFAULT %s,\n"+
		"\t%s %s NOT NULL DEFAULT (%s),\n"+
		"\t%s BIGINT NOT NULL DEFAULT 0\n)",
		table, key, value, blobType, version, deleted, falseLit, updated, timeType, nowExpr, issued)
	s.addIssuedSQL = fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s BIGINT NOT NULL DEFAULT 0", table, issued)
	schemaName, tableName, qualified := strings.Cut(c.Table, ".")
	switch {
	case dialect == DialectPostgres:
		s.hasIssuedSQL = "SELECT COUNT(*) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2 AND NOT attisdropped"
		s.hasIssuedArgs = []any{table, c.IssuedColumn}
	case qualified:
		s.hasIssuedSQL = "SELECT COUNT(*) FROM pragma_table_info(?, ?) WHERE name = ? COLLATE NOCASE"
		s.hasIssuedArgs = []any{tableName, schemaName, c.IssuedColumn}
	default:
		s.hasIssuedSQL = "SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ? COLLATE NOCASE"
		s.hasIssuedArgs = []any{c.Table, c.IssuedColumn}
	}
	// The alias lets the WHERE clause name the stored row the same way in
	// both dialects, whether or not the table is schema-qualified.
	s.upsertPrefix = fmt.Sprintf("INSERT INTO %s AS cur (%s, %s, %s, %s, %s, %s) VALUES ",
		table, updated, key, value, version, deleted, issued)
	// A change replaces the row only if it is newer by version and not
	// older by issue time (0: unknown); Write sorts out the others.
	s.upsertSuffix = fmt.Sprintf(" ON CONFLICT (%[1]s) DO UPDATE SET "+
		"%[2]s = excluded.%[2]s, %[3]s = excluded.%[3]s, %[4]s = excluded.%[4]s, %[5]s = excluded.%[5]s, %[6]s = excluded.%[6]s "+
		"WHERE cur.%[3]s < excluded.%[3]s AND (excluded.%[6]s = 0 OR cur.%[6]s <= excluded.%[6]s)",
		key, value, version, deleted, updated, issued)
	s.storedPrefix = fmt.Sprintf("SELECT %s, %s, %s FROM %s WHERE %s IN (", key, version, issued, table, key)
	s.maxVersionSQL = fmt.Sprintf("SELECT COALESCE(MAX(%s), 0) FROM %s", version, table)
	param1 := "?"
	if dialect == DialectPostgres {
		param1 = "$1"
	}
	s.getSQL = fmt.Sprintf("SELECT %s, %s, %s FROM %s WHERE %s = %s",
		value, version, deleted, table, key, param1)
	s.allSQL = fmt.Sprintf("SELECT %s, %s FROM %s WHERE NOT %s", key, value, table, deleted)
	return s, nil
}

// Dialect returns the dialect the sink speaks.
func (s *SQLSink) Dialect() Dialect { return s.dialect }

// CreateSchema creates the sink's table if it does not exist yet, and adds
// the issued column (SQLSinkConfig.IssuedColumn) to a table created without
// it, as ALTER TABLE ... ADD COLUMN issued BIGINT NOT NULL DEFAULT 0 would
// (in PostgreSQL 10 and older that rewrites the table). It changes nothing
// else of an existing table, and does not create a schema named in
// SQLSinkConfig.Table.
func (s *SQLSink) CreateSchema(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, s.createSQL); err != nil {
		return fmt.Errorf("streamq: write-behind create table %s: %w", s.table, err)
	}
	if ok, err := s.hasIssuedColumn(ctx); err != nil || ok {
		return err
	}
	if _, err := s.db.ExecContext(ctx, s.addIssuedSQL); err != nil {
		// Another process may have added it meanwhile.
		if ok, cerr := s.hasIssuedColumn(ctx); cerr == nil && ok {
			return nil
		}
		return fmt.Errorf("streamq: write-behind add the issued column to %s: %w", s.table, err)
	}
	return nil
}

func (s *SQLSink) hasIssuedColumn(ctx context.Context) (bool, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, s.hasIssuedSQL, s.hasIssuedArgs...).Scan(&n); err != nil {
		return false, fmt.Errorf("streamq: write-behind read the columns of %s: %w", s.table, err)
	}
	return n > 0, nil
}

// MaxVersion returns the highest version of any row, deletions included, or
// 0 when the table is empty; see [Writer.EnsureVersionAtLeast]. Without an
// index on the version column it reads the whole table.
func (s *SQLSink) MaxVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := s.db.QueryRowContext(ctx, s.maxVersionSQL).Scan(&v); err != nil {
		return 0, fmt.Errorf("streamq: write-behind highest version in %s: %w", s.table, err)
	}
	return v, nil
}

// Write stores changes in one transaction: each change replaces its key's row
// only if the row does not exist or holds an older version, so replays and
// out-of-order batches are harmless. Of several changes of one key in the
// batch only the one with the highest version is kept (on a tie, the later
// one). Large batches are split into several statements, within the same
// transaction, to respect the database's limit of bind parameters, and so
// that no statement carries more than 64 MiB of keys and values (PostgreSQL
// refuses messages over 1 GB); a larger change goes in a statement of its
// own.
//
// Write checks every change first and returns a [*ChangeError] without
// writing anything when one is invalid. A change that contradicts its key's
// row or another change of the key in the batch (see [VersionRegressed]) is
// neither applied nor ignored: Write writes nothing and returns a
// *ChangeError wrapping [ErrVersionRegressed] for each such change (joined
// with [errors.Join] when there are several); the caller writes the rest
// again without them. On any error nothing of the batch is written, except
// when committing fails because the connection broke: the commit may then
// have happened or not, and since Write is idempotent the caller simply
// retries. Rows are written in key order, so that concurrent Writes to
// PostgreSQL lock rows in the same order and do not deadlock.
func (s *SQLSink) Write(ctx context.Context, changes []Change) error {
	if len(changes) == 0 {
		return nil
	}
	for i := range changes {
		if reason := changes[i].invalidReason(); reason != "" {
			return &ChangeError{Index: i, Key: changes[i].Key, Reason: reason}
		}
	}
	keep, refused := newestPerKey(changes)
	if len(refused) > 0 {
		return joinRefused(refused)
	}

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("streamq: write-behind begin transaction on %s: %w", s.table, err)
	}
	// Rollback after a successful Commit is a no-op returning sql.ErrTxDone.
	defer func() { _ = tx.Rollback() }()

	var sqliteNow string
	if s.dialect == DialectSQLite {
		// SQLite runs in-process, so the Go clock is the database's clock;
		// binding the time is much cheaper than running strftime per row.
		sqliteNow = time.Now().UTC().Format(sqliteTimeLayout)
	}
	var sb strings.Builder
	args := make([]any, 0, 1+min(len(keep), s.maxRows)*paramsPerRow)
	for start := 0; start < len(keep); {
		end := s.chunkEnd(changes, keep, start)
		chunk := keep[start:end]
		start = end
		sb.Reset()
		args = args[:0]
		if s.dialect == DialectSQLite {
			args = append(args, sqliteNow)
		}
		s.buildUpsert(&sb, len(chunk))
		for _, i := range chunk {
			ch := changes[i]
			value := ch.Value
			switch {
			case ch.Deleted:
				value = nil // NULL
			case value == nil:
				value = []byte{}
			}
			args = append(args, ch.Key, value, ch.Version, ch.Deleted, ch.Issued)
		}
		res, err := tx.ExecContext(ctx, sb.String(), args...)
		if err != nil {
			return fmt.Errorf("streamq: write-behind upsert %d rows into %s: %w", len(chunk), s.table, err)
		}
		if n, err := res.RowsAffected(); err != nil || n < int64(len(chunk)) {
			// Some rows were not replaced: replays, or contradictions.
			found, err := s.regressed(ctx, tx, changes, chunk)
			if err != nil {
				return err
			}
			refused = append(refused, found...)
		}
		if s.afterStatement != nil {
			size := 0
			for _, i := range chunk {
				size += changes[i].size()
			}
			s.afterStatement(len(chunk), size)
		}
	}
	if len(refused) > 0 {
		return joinRefused(refused) // and roll back
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("streamq: write-behind commit %d rows into %s: %w", len(keep), s.table, err)
	}
	return nil
}

// chunkEnd returns the end of the chunk of keep that starts at start: at
// most maxRows rows and maxBytes of keys and values, and at least one row.
func (s *SQLSink) chunkEnd(changes []Change, keep []int, start int) int {
	end, size := start, 0
	for end < len(keep) && end-start < s.maxRows {
		n := changes[keep[end]].size()
		if end > start && size+n > s.maxBytes {
			break
		}
		size += n
		end++
	}
	return end
}

// regressed reads the rows of the chunk's keys after its upsert, inside tx,
// and returns a *ChangeError for each change that was not applied and
// contradicts its row (see VersionRegressed). The other changes were applied,
// or are replays that the row already covers.
func (s *SQLSink) regressed(ctx context.Context, tx *sql.Tx, changes []Change, chunk []int) ([]*ChangeError, error) {
	var sb strings.Builder
	sb.WriteString(s.storedPrefix)
	args := make([]any, len(chunk))
	for n, i := range chunk {
		if n > 0 {
			sb.WriteByte(',')
		}
		if s.dialect == DialectPostgres {
			sb.WriteString("$" + strconv.Itoa(n+1))
		} else {
			sb.WriteByte('?')
		}
		args[n] = changes[i].Key
	}
	sb.WriteByte(')')
	rows, err := tx.QueryContext(ctx, sb.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("streamq: write-behind read %d rows of %s: %w", len(chunk), s.table, err)
	}
	defer rows.Close()
	stored := make(map[string]Change, len(chunk))
	for rows.Next() {
		var c Change
		if err := rows.Scan(&c.Key, &c.Version, &c.Issued); err != nil {
			return nil, fmt.Errorf("streamq: write-behind read rows of %s: %w", s.table, err)
		}
		stored[c.Key] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("streamq: write-behind read rows of %s: %w", s.table, err)
	}
	var refused []*ChangeError
	for _, i := range chunk {
		c := changes[i]
		row, ok := stored[c.Key]
		switch {
		case !ok:
			return nil, fmt.Errorf("streamq: write-behind upsert of %q into %s: the row is missing after the upsert", c.Key, s.table)
		case row.Version == c.Version && row.Issued == c.Issued: // applied, or the same change
		case VersionRegressed(c, row):
			refused = append(refused, &ChangeError{Index: i, Key: c.Key, Err: ErrVersionRegressed, Reason: regressedReason(c, row)})
		}
	}
	return refused, nil
}

// joinRefused returns the refusals as one error: the *ChangeError itself when
// there is one.
func joinRefused(refused []*ChangeError) error {
	if len(refused) == 1 {
		return refused[0]
	}
	errs := make([]error, len(refused))
	for i, ce := range refused {
		errs[i] = ce
	}
	return errors.Join(errs...)
}

// buildUpsert writes an INSERT ... ON CONFLICT statement for n rows to sb.
// Each row is (updated_at, key, value, version, deleted, issued).
func (s *SQLSink) buildUpsert(sb *strings.Builder, n int) {
	sb.Grow(len(s.upsertPrefix) + len(s.upsertSuffix) + n*32)
	sb.WriteString(s.upsertPrefix)
	param := 1
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		switch s.dialect {
		case DialectSQLite:
			// The time is parameter 1, bound by the first row's first "?"
			// and named "?1" by the others. All other parameters are plain
			// "?": SQLite looks numbered ones up in a list, which would
			// make a long statement quadratic to prepare and bind.
			if i == 0 {
				sb.WriteString("(?,?,?,?,?,?)")
			} else {
				sb.WriteString("(?1,?,?,?,?,?)")
			}
		case DialectPostgres:
			sb.WriteString("(now()")
			for range paramsPerRow {
				sb.WriteString(",$")
				sb.WriteString(strconv.Itoa(param))
				param++
			}
			sb.WriteByte(')')
		}
	}
	sb.WriteString(s.upsertSuffix)
}

// Get returns the stored row of key. found is false when the key has no row.
// A deleted key is found, with deleted true, a nil value and the version of
// its deletion. Get is meant for tests and tools.
func (s *SQLSink) Get(ctx context.Context, key string) (value []byte, version int64, deleted, found bool, err error) {
	err = s.db.QueryRowContext(ctx, s.getSQL, key).Scan(&value, &version, &deleted)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, false, false, nil
	}
	if err != nil {
		return nil, 0, false, false, fmt.Errorf("streamq: write-behind get %q from %s: %w", key, s.table, err)
	}
	if deleted {
		value = nil
	} else if value == nil {
		value = []byte{} // SQLite stores an empty blob as NULL
	}
	return value, version, deleted, true, nil
}

// All returns every live (not deleted) key and its value. It reads the whole
// table into memory, so it is meant for tests, tools and demos.
func (s *SQLSink) All(ctx context.Context) (map[string][]byte, error) {
	rows, err := s.db.QueryContext(ctx, s.allSQL)
	if err != nil {
		return nil, fmt.Errorf("streamq: write-behind read %s: %w", s.table, err)
	}
	defer rows.Close()
	all := make(map[string][]byte)
	for rows.Next() {
		var (
			key   string
			value []byte
		)
		if err := rows.Scan(&key, &value); err != nil {
			return nil, fmt.Errorf("streamq: write-behind read %s: %w", s.table, err)
		}
		if value == nil {
			value = []byte{}
		}
		all[key] = value
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("streamq: write-behind read %s: %w", s.table, err)
	}
	return all, nil
}

// checkDialect returns the configured dialect, or an error saying how to
// choose one.
func checkDialect(d Dialect) (Dialect, error) {
	switch d {
	case DialectSQLite, DialectPostgres:
		return d, nil
	case 0:
		return 0, &streamq.ConfigError{Field: "SQLSinkConfig.Dialect", Reason: "no dialect: create the sink with sqlite.NewSink (package writebehind/sqlite) or postgres.NewSink (package writebehind/postgres), or set DialectSQLite or DialectPostgres for a database opened with another driver"}
	}
	return 0, &streamq.ConfigError{Field: "SQLSinkConfig.Dialect", Reason: fmt.Sprintf("%s is not a dialect: use DialectSQLite or DialectPostgres", d)}
}

// quoteTable validates a table name, optionally schema-qualified, and
// returns it quoted.
func quoteTable(name string) (string, error) {
	schema, table, qualified := strings.Cut(name, ".")
	if !qualified {
		if reason := identifierProblem(name); reason != "" {
			return "", &streamq.ConfigError{Field: "SQLSinkConfig.Table", Reason: reason + ` (a schema may be given as "schema.table")`}
		}
		return quoteIdent(name), nil
	}
	if reason := identifierProblem(schema); reason != "" {
		return "", &streamq.ConfigError{Field: "SQLSinkConfig.Table", Reason: "schema: " + reason}
	}
	if reason := identifierProblem(table); reason != "" {
		return "", &streamq.ConfigError{Field: "SQLSinkConfig.Table", Reason: "table: " + reason + ` (use "table" or "schema.table")`}
	}
	return quoteIdent(schema) + "." + quoteIdent(table), nil
}

// identifierProblem returns why name is not an acceptable identifier, or "".
func identifierProblem(name string) string {
	if name == "" {
		return "name is empty"
	}
	if len(name) > MaxIdentifierLen {
		return fmt.Sprintf("%q is %d bytes long: use at most MaxIdentifierLen (%d)", name, len(name), MaxIdentifierLen)
	}
	for i, r := range name {
		switch {
		case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return fmt.Sprintf("%q has %q at byte %d: use only ASCII letters, digits and underscores, not starting with a digit", name, r, i)
		}
	}
	return ""
}

// quoteIdent quotes a validated identifier. Validated names cannot contain
// quotes, so no escaping is needed.
func quoteIdent(name string) string { return `"` + name + `"` }

func defaultString(v *string, def string) {
	if *v == "" {
		*v = def
	}
}
