package writebehind

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on the size of one [Change]. Sinks refuse larger changes with a
// [*ChangeError] instead of truncating them.
const (
	// MaxKeyBytes is the longest accepted Change.Key, in bytes.
	MaxKeyBytes = 1024
	// MaxValueBytes is the largest accepted Change.Value, in bytes (16 MiB).
	MaxValueBytes = 16 << 20
)

// ErrInvalidChange marks a [Change] that a [Sink] refused because it can never
// be written (empty key, version not positive, too large, ...). Retrying cannot
// help; the refusal is reported as a [*ChangeError] that wraps ErrInvalidChange.
var ErrInvalidChange = errors.New("streamq: invalid write-behind change")

// Change is one cache mutation to persist.
//
// Version orders the mutations of one key: the writer assigns it when it
// updates the cache, it is strictly increasing per key and starts at 1. Sinks
// use it to stay correct under replays: a change never overwrites a stored
// row whose version is the same or newer.
type Change struct {
	// Key identifies the row. It must be non-empty valid UTF-8 without NUL
	// bytes, at most MaxKeyBytes long.
	Key string
	// Value is the new value, at most MaxValueBytes long. It must be empty
	// (normally nil) when Deleted is true. A nil Value of a change that is
	// not Deleted is stored as an empty value.
	Value []byte
	// Deleted marks a deletion. Sinks store deletions as tombstones that
	// carry the version, so a replayed older change cannot bring the key back.
	Deleted bool
	// Version is the key's version after this change: strictly increasing
	// per key, and greater than 0.
	Version int64
}

// Validate reports whether c can be written by a [Sink]. It returns nil or a
// [*ChangeError] (with Index -1) that wraps [ErrInvalidChange].
func (c Change) Validate() error {
	if reason := c.invalidReason(); reason != "" {
		return &ChangeError{Index: -1, Key: c.Key, Reason: reason}
	}
	return nil
}

func (c Change) invalidReason() string {
	switch {
	case c.Key == "":
		return "key is empty: every change needs the cache key it belongs to"
	case len(c.Key) > MaxKeyBytes:
		return fmt.Sprintf("key is %d bytes long: the limit is MaxKeyBytes (%d)", len(c.Key), MaxKeyBytes)
	case !utf8.ValidString(c.Key):
		return "key is not valid UTF-8: SQL sinks store keys as text, so encode binary keys (for example as hex or base64)"
	case strings.IndexByte(c.Key, 0) >= 0:
		return "key contains a NUL byte, which PostgreSQL text cannot store: encode binary keys (for example as hex or base64)"
	case c.Version <= 0:
		return fmt.Sprintf("version is %d: versions are assigned by the writer, strictly increasing per key, starting at 1", c.Version)
	case len(c.Value) > MaxValueBytes:
		return fmt.Sprintf("value is %d bytes long: the limit is MaxValueBytes (%d)", len(c.Value), MaxValueBytes)
	case c.Deleted && len(c.Value) > 0:
		return "value is set on a deletion: a Deleted change must have a nil Value"
	}
	return ""
}

// ChangeError reports a [Change] that a [Sink] refused. When Write returns a
// ChangeError it has written none of the batch. It wraps [ErrInvalidChange].
type ChangeError struct {
	// Index is the position of the refused change in the batch passed to
	// Write, or -1 when the error comes from [Change.Validate].
	Index int
	// Key is the refused change's key.
	Key string
	// Reason says what is wrong and how to fix it.
	Reason string
}

// Error describes the refused change; long keys are shortened.
func (e *ChangeError) Error() string {
	key := e.Key
	const maxShown = 64
	if len(key) > maxShown {
		key = key[:maxShown] + "..."
	}
	if e.Index >= 0 {
		return fmt.Sprintf("%s: change %d (key %q): %s", ErrInvalidChange, e.Index, key, e.Reason)
	}
	return fmt.Sprintf("%s: key %q: %s", ErrInvalidChange, key, e.Reason)
}

// Unwrap returns [ErrInvalidChange].
func (e *ChangeError) Unwrap() error { return ErrInvalidChange }

// Sink persists a batch of changes in one transaction; it must be idempotent
// and must not let an older Version overwrite a newer one.
//
// Write either stores the whole batch or none of it: when it returns nil the
// batch is committed durably and the caller may acknowledge the changes' stream
// entries; on error nothing of the batch may remain written, and the caller
// retries later or, for a [*ChangeError], removes the refused change. A batch
// may hold several changes of one key; the one with the highest Version wins.
// Because changes are delivered at least once, Write must accept changes it
// has already stored (same key and Version) and changes older than the stored
// row, and leave the row as it is. Write must be safe for concurrent use.
type Sink interface {
	Write(ctx context.Context, changes []Change) error
}
