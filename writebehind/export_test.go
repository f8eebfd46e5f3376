package writebehind

import "database/sql"

// Hooks for the external tests of SQLSink.

// SQLiteTimeLayout is the text layout of updated_at in SQLite.
const SQLiteTimeLayout = sqliteTimeLayout

// QuoteIdent quotes a validated identifier.
func QuoteIdent(name string) string { return quoteIdent(name) }

// QuoteTable validates and quotes a table name.
func QuoteTable(name string) (string, error) { return quoteTable(name) }

// SetAfterStatement sets a hook run after each INSERT statement of a Write.
func (s *SQLSink) SetAfterStatement(f func(rows, size int)) { s.afterStatement = f }

// MaxRows returns the rows per INSERT statement.
func (s *SQLSink) MaxRows() int { return s.maxRows }

// SetMaxRows sets the rows per INSERT statement.
func (s *SQLSink) SetMaxRows(n int) { s.maxRows = n }

// SetMaxBytes sets the key and value bytes per INSERT statement.
func (s *SQLSink) SetMaxBytes(n int) { s.maxBytes = n }

// DB returns the sink's database.
func (s *SQLSink) DB() *sql.DB { return s.db }

// Table returns the sink's table as configured.
func (s *SQLSink) Table() string { return s.table }

// ChangeErrors returns the *ChangeErrors in err.
func ChangeErrors(err error) []*ChangeError { return changeErrors(err) }
