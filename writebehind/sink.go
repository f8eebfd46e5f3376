package writebehind

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
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

// ErrVersionRegressed marks a [Change] that a [Sink] refused because its
// version and its issue time (Change.Issued) order it differently than the
// key's stored row, or than another change of the key in the same batch: a
// change issued later has the same or a lower version, or one issued earlier
// a higher version. That happens only when the writer's version counter went
// backwards (it was deleted or evicted, or a failover promoted a replica that
// missed increments), or the Redis server's clock did. Applying the change
// could overwrite a newer row, and ignoring it could drop the newest write, so
// the sink does neither. The refusal is a [*ChangeError] that wraps
// ErrVersionRegressed; the fix is to raise the counter above the sink's
// highest version ([Writer.EnsureVersionAtLeast], [SQLSink.MaxVersion]) and
// queue the key's cached value again ([Writer.Resync]). A [Handler] with
// HandlerConfig.Writer set does both by itself; otherwise the change is
// dead-lettered with the reason. See docs/writebehind.md, "When the version counter
// goes backwards".
var ErrVersionRegressed = errors.New("streamq: write-behind version counter went backwards")

// Change is one cache mutation to persist.
//
// Version orders the mutations of one key: the writer assigns it when it
// updates the cache, it is strictly increasing per key and starts at 1. Sinks
// use it to stay correct under replays: a change never overwrites a stored
// row whose version is the same or newer. Issued, the time the writer
// assigned the version, lets a sink tell a replay of an old change from a new
// change whose version is too low because the counter went backwards (see
// [ErrVersionRegressed]).
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
	// per key, greater than 0 and at most math.MaxInt64.
	Version int64
	// Issued is when the writer issued the change: the Redis server's clock,
	// in microseconds since the Unix epoch, read by the script that assigned
	// Version ([HeaderIssued]). 0 means unknown (a change queued before
	// writers recorded it, or built by hand): such a change is ordered by
	// Version alone. Sinks store it with the row and refuse a change whose
	// Version and Issued contradict the stored row's with
	// [ErrVersionRegressed] (see [VersionRegressed]).
	Issued int64
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
	case c.Issued < 0:
		return fmt.Sprintf("issued is %d: it is the Redis clock in microseconds since the Unix epoch when the writer issued the change, or 0 when unknown", c.Issued)
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

// ChangeError reports a [Change] that a [Sink] refused. When Write returns
// one or more ChangeErrors (several are joined with [errors.Join]) it has
// written none of the batch. It wraps Err: [ErrInvalidChange] or
// [ErrVersionRegressed].
type ChangeError struct {
	// Index is the position of the refused change in the batch passed to
	// Write, or -1 when the error comes from [Change.Validate].
	Index int
	// Key is the refused change's key.
	Key string
	// Reason says what is wrong and how to fix it.
	Reason string
	// Err says why the change was refused: [ErrInvalidChange] (it can never
	// be written) or [ErrVersionRegressed]. nil means ErrInvalidChange.
	Err error
}

// Error describes the refused change; long keys are shortened.
func (e *ChangeError) Error() string {
	key := e.Key
	const maxShown = 64
	if len(key) > maxShown {
		key = key[:maxShown] + "..."
	}
	if e.Index >= 0 {
		return fmt.Sprintf("%s: change %d (key %q): %s", e.Unwrap(), e.Index, key, e.Reason)
	}
	return fmt.Sprintf("%s: key %q: %s", e.Unwrap(), key, e.Reason)
}

// Unwrap returns Err, or [ErrInvalidChange] when Err is nil.
func (e *ChangeError) Unwrap() error {
	if e.Err == nil {
		return ErrInvalidChange
	}
	return e.Err
}

// changeErrors returns the *ChangeErrors in err: err itself or the errors it
// joins (see [errors.Join]), at any depth.
func changeErrors(err error) []*ChangeError {
	var ce *ChangeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce) && ce == err:
		return []*ChangeError{ce}
	}
	var out []*ChangeError
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			out = append(out, changeErrors(e)...)
		}
		return out
	}
	if errors.As(err, &ce) {
		out = append(out, ce)
	}
	return out
}

// VersionRegressed reports whether c and stored, a change of the same key
// and the key's stored row (or an earlier change of the key), contradict
// each other: c has the same or a lower version but was issued later, or a
// higher version but was issued earlier. Without a counter or clock going
// backwards versions and issue times grow together, so that a replay of an
// old change has both lower (or equal, for the same change) and the next
// change both higher.
//
// A change whose Issued is 0 (unknown) never contradicts anything; a stored
// row whose Issued is 0 (written before issue times were recorded) counts as
// issued before every change that has one. Sinks refuse a change for which
// VersionRegressed is true with a [*ChangeError] wrapping
// [ErrVersionRegressed], instead of applying or ignoring it.
func VersionRegressed(c, stored Change) bool {
	switch {
	case c.Issued == 0:
		return false
	case c.Version <= stored.Version:
		return c.Issued > stored.Issued
	default:
		return c.Issued < stored.Issued
	}
}

// regressedReason says why c contradicts stored, the key's row in the sink
// (see VersionRegressed), and how to fix it.
func regressedReason(c, stored Change) string {
	order := "but was issued later"
	if c.Version > stored.Version {
		order = "but was issued earlier"
	}
	return fmt.Sprintf("the sink holds version %d issued %s, this change has version %d %s (%s): %s",
		stored.Version, issuedString(stored.Issued), c.Version, order, issuedString(c.Issued), regressedFix)
}

// regressedFix ends the reason of every ErrVersionRegressed refusal.
const regressedFix = "the version counter went backwards (deleted or evicted, or a failover to a replica that missed increments) " +
	"or the Redis clock did; raise the counter above the sink's highest version with Writer.EnsureVersionAtLeast " +
	"(see SQLSink.MaxVersion), then queue the key's cached value again with Writer.Resync (HandlerConfig.Writer does both)"

// issuedString formats Change.Issued for messages.
func issuedString(us int64) string {
	if us == 0 {
		return "at an unknown time"
	}
	return "at " + time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000000Z")
}

// newestPerKey coalesces changes by key. It returns the indexes of the
// changes to write, sorted by key: the highest version of each key (on a tie,
// the later change). A key whose changes contradict each other (see
// VersionRegressed) is left out, and each of its changes gets a *ChangeError
// wrapping ErrVersionRegressed in refused. changes is not modified.
func newestPerKey(changes []Change) (keep []int, refused []*ChangeError) {
	order := make([]int, len(changes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(changes[a].Key, changes[b].Key) })
	keep = order[:0]
	for start := 0; start < len(order); {
		end := start + 1
		for end < len(order) && changes[order[end]].Key == changes[order[start]].Key {
			end++
		}
		group := order[start:end]
		start = end
		newest := group[0]
		for _, i := range group[1:] {
			if changes[i].Version >= changes[newest].Version {
				newest = i
			}
		}
		reason := contradiction(changes, group, newest)
		if reason == "" {
			keep = append(keep, newest)
			continue
		}
		for _, i := range group {
			refused = append(refused, &ChangeError{Index: i, Key: changes[i].Key, Err: ErrVersionRegressed, Reason: reason})
		}
	}
	return keep, refused
}

// contradiction returns why the changes of one key at group contradict each
// other (see VersionRegressed), or "" when they do not. Only contradictions
// with the change of the highest version count: when it is newer than each
// other change by version and by issue time, it is the key's newest state,
// whatever the order of the others.
func contradiction(changes []Change, group []int, newest int) string {
	n := changes[newest]
	for _, i := range group {
		c := changes[i]
		if VersionRegressed(c, n) || VersionRegressed(n, c) {
			return fmt.Sprintf("the batch holds changes of this key that contradict each other, version %d issued %s and version %d issued %s: %s",
				c.Version, issuedString(c.Issued), n.Version, issuedString(n.Issued), regressedFix)
		}
	}
	return ""
}

// Sink persists a batch of changes in one transaction; it must be idempotent
// and must not let an older Version overwrite a newer one.
//
// Write either stores the whole batch or none of it: when it returns nil the
// batch is committed durably and the caller may acknowledge the changes' stream
// entries; on error nothing of the batch may remain written, and the caller
// retries later or, for [*ChangeError]s (one, or several joined with
// [errors.Join]), removes the refused changes and writes the rest again. A
// batch may hold several changes of one key; the one with the highest Version
// wins. Because changes are delivered at least once, Write must accept changes
// it has already stored (same key and Version) and changes older than the
// stored row, and leave the row as it is. A change that is not such a replay
// but contradicts the stored row (see [VersionRegressed]) must be refused with
// a *ChangeError wrapping [ErrVersionRegressed] rather than ignored, so that
// no write is dropped silently. Write must be safe for concurrent use.
type Sink interface {
	Write(ctx context.Context, changes []Change) error
}

// VersionedSink is a [Sink] that can report the highest version it stores,
// so that a writer's version counter can be raised above it (see
// HandlerConfig.Writer and [Writer.EnsureVersionAtLeast]). [SQLSink]
// implements it.
type VersionedSink interface {
	Sink
	// MaxVersion returns the highest Version of any stored row, deletions
	// included, or 0 when there is none.
	MaxVersion(ctx context.Context) (int64, error)
}
