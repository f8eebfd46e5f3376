package writebehind

import (
	"bytes"
	"context"
	"encoding/json"
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
	// For a hash it bounds the fields' JSON encoding (see [EncodeFields]).
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
	// not Deleted is stored as an empty value. When Hash is true it is the
	// hash's fields as a JSON object (see [EncodeFields]).
	Value []byte
	// Deleted marks a deletion. Sinks store deletions as tombstones that
	// carry the version, so a replayed older change cannot bring the key back.
	Deleted bool
	// Hash marks a value that the cache holds as a Redis hash (written by
	// [Writer.SetFields]) rather than a string. Value then holds the fields
	// as a JSON object of strings, canonically encoded by [EncodeFields];
	// decode it with [DecodeFields]. A sink may store it like any other value
	// ([SQLSink] does) or map the fields to columns. Hash changes are
	// versioned and coalesced with the key's other changes: a key may switch
	// between a string and a hash, and the newest version wins. Deleted
	// changes are never Hash.
	Hash bool
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
	case c.Deleted && c.Hash:
		return "Hash is set on a deletion: a deletion removes the key whatever its type, so leave Hash false"
	case c.Hash:
		if _, reason := decodeFields(c.Value); reason != "" {
			return "Hash is set but " + reason
		}
	}
	return ""
}

// size is what a change counts towards HandlerConfig.MaxBatchBytes and the
// statement size of an SQLSink: its key and value bytes.
func (c Change) size() int { return len(c.Key) + len(c.Value) }

// EncodeFields returns the canonical JSON encoding of a hash's fields, the
// Value of a [Change] with Hash set, as a [Writer] puts it in the stream and
// [SQLSink] stores it: one compact JSON object of strings, members sorted by
// field name (bytewise), strings escaped as [encoding/json] does but without
// HTML escaping (so "<" stays "<"). For example {"age":"36","name":"Ada"}.
// Equal fields always encode to equal bytes, so a stored value can be
// compared with the cache byte for byte.
//
// Field names and values must be valid UTF-8 (JSON strings cannot hold other
// bytes; encode binary data, for example as base64); otherwise EncodeFields
// returns an error wrapping [ErrInvalidChange]. A nil or empty map encodes
// as {}.
func EncodeFields(fields map[string]string) ([]byte, error) {
	for name, value := range fields {
		if !utf8.ValidString(name) {
			return nil, fmt.Errorf("%w: hash field name %q is not valid UTF-8: the fields are stored as JSON, so encode binary field names (for example as hex or base64)", ErrInvalidChange, name)
		}
		if !utf8.ValidString(value) {
			return nil, fmt.Errorf("%w: value of hash field %q is not valid UTF-8: the fields are stored as JSON, so encode binary values (for example as base64)", ErrInvalidChange, name)
		}
	}
	if fields == nil {
		fields = map[string]string{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// encoding/json writes map keys sorted; a map of strings always encodes.
	if err := enc.Encode(fields); err != nil {
		return nil, fmt.Errorf("streamq: write-behind encode hash fields: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// DecodeFields decodes the Value of a [Change] with Hash set (or a value
// that [SQLSink] stored for one) back into the hash's fields. It accepts any
// JSON object whose members are all strings, not only the canonical encoding
// of [EncodeFields]; anything else is an error wrapping [ErrInvalidChange].
func DecodeFields(value []byte) (map[string]string, error) {
	fields, reason := decodeFields(value)
	if reason != "" {
		return nil, fmt.Errorf("%w: %s", ErrInvalidChange, reason)
	}
	return fields, nil
}

// decodeFields decodes a JSON object of strings, or says what is wrong.
func decodeFields(value []byte) (map[string]string, string) {
	var fields map[string]string
	// "null" would decode into a nil map without an error.
	if t := bytes.TrimLeft(value, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Sprintf("the value is not a JSON object (%s): a hash's fields are stored as a JSON object of strings, as writebehind.EncodeFields writes them", shortValue(value))
	}
	if err := json.Unmarshal(value, &fields); err != nil {
		return nil, fmt.Sprintf("the value is not a JSON object of strings (%v): a hash's fields are stored as writebehind.EncodeFields writes them", err)
	}
	return fields, ""
}

// shortValue quotes the start of a value for an error message.
func shortValue(v []byte) string {
	const maxShown = 32
	if len(v) > maxShown {
		return fmt.Sprintf("%q...", v[:maxShown])
	}
	return fmt.Sprintf("%q", v)
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
