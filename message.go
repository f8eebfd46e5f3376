package streamq

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// WireVersion is the version of the stream entry format written by this
// package, stored in the "v" field of every entry.
const WireVersion = 1

// Wire format field names (version 1). Any Redis client can produce a job with
//
//	XADD streamq:{orders}:stream * v 1 payload <bytes>
//
// and every other field is optional. See the README for the full table.
const (
	fieldVersion   = "v"       // format version, "1"; required
	fieldPayload   = "payload" // job payload, raw bytes; required
	fieldHeaders   = "headers" // JSON object of string values; optional
	fieldEnqueued  = "enq"     // enqueue time, Unix milliseconds; optional
	fieldAttempt   = "attempt" // retries so far; optional, default 0
	fieldKey       = "key"     // unique key; optional
	fieldKeyToken  = "kt"      // token of the unique-key lock; set with key
	fieldFirstFail = "ff"      // first failure time, Unix milliseconds; set on retries
	fieldLastError = "err"     // last error text; set on retries
	fieldCrashed   = "crashed" // "1": runs cut short by crashes before a hand-back; see LastAttemptAfterCrash
)

// Message is one job as delivered to a [Handler].
type Message struct {
	// ID is the stream entry ID. A retried job is re-added to the stream and
	// gets a new ID.
	ID string
	// Queue is the queue name.
	Queue string
	// Group is the consumer group that delivered the job ("" when it was not
	// delivered by a consumer group).
	Group string
	// Payload is the job's payload as enqueued.
	Payload []byte
	// Headers are the job's string headers (user headers and trace context).
	// Never nil.
	Headers map[string]string
	// EnqueuedAt is when the job was first enqueued (zero if unknown).
	EnqueuedAt time.Time
	// Attempt counts the failed attempts before this one that were retried.
	Attempt int
	// Deliveries is Redis's delivery counter for this stream entry: 1 on the
	// first delivery, more when the job was taken over from a crashed worker.
	Deliveries int
	// Key is the job's unique key, if it was enqueued with [Unique].
	Key string
	// FirstFailedAt is the time of the first failed attempt (zero if none).
	FirstFailedAt time.Time
	// LastError is the error text of the previous failed attempt, if any.
	LastError string

	keyToken string         // unique-key lock token
	crashed  bool           // earlier runs were cut short by crashes (fieldCrashed)
	fields   map[string]any // raw entry, kept for dead-lettering
}

// Attempts is the number of the current attempt, counting retries and
// redeliveries after crashes: 1 on the first run. It is what
// ConsumerConfig.MaxDeliveries is compared with.
func (m *Message) Attempts() int { return m.Attempt + max(m.Deliveries, 1) }

// jobFields is a job as written to the stream.
type jobFields struct {
	payload   []byte
	headers   map[string]string
	enqMillis int64
	attempt   int
	key       string
	keyToken  string
	firstFail int64
	lastErr   string
	crashed   bool
}

// args returns the entry as a flat field/value list for XADD.
func (j *jobFields) args() []any {
	a := make([]any, 0, 16)
	a = append(a, fieldVersion, "1", fieldPayload, j.payload)
	if len(j.headers) > 0 {
		h, _ := json.Marshal(j.headers) // map[string]string always marshals
		a = append(a, fieldHeaders, h)
	}
	a = append(a, fieldEnqueued, strconv.FormatInt(j.enqMillis, 10))
	if j.attempt > 0 {
		a = append(a, fieldAttempt, strconv.Itoa(j.attempt))
	}
	if j.key != "" {
		a = append(a, fieldKey, j.key, fieldKeyToken, j.keyToken)
	}
	if j.firstFail > 0 {
		a = append(a, fieldFirstFail, strconv.FormatInt(j.firstFail, 10))
	}
	if j.lastErr != "" {
		a = append(a, fieldLastError, j.lastErr)
	}
	if j.crashed {
		a = append(a, fieldCrashed, "1")
	}
	return a
}

// decodeMessage parses a stream entry. The returned error wraps ErrMalformed
// and says which field is wrong.
func decodeMessage(queue, id string, values map[string]any) (*Message, error) {
	m := &Message{ID: id, Queue: queue, fields: values, Headers: map[string]string{}}
	if values == nil {
		return m, fmt.Errorf("%w: entry %s has no fields (deleted?)", ErrMalformed, id)
	}
	v, ok := str(values[fieldVersion])
	if !ok {
		return m, fmt.Errorf("%w: missing field %q", ErrMalformed, fieldVersion)
	}
	if v != "1" {
		return m, fmt.Errorf("%w: unsupported format version %q (this consumer reads version %d)", ErrMalformed, v, WireVersion)
	}
	p, ok := str(values[fieldPayload])
	if !ok {
		return m, fmt.Errorf("%w: missing field %q", ErrMalformed, fieldPayload)
	}
	m.Payload = []byte(p)
	if h, ok := str(values[fieldHeaders]); ok && h != "" {
		if err := json.Unmarshal([]byte(h), &m.Headers); err != nil {
			return m, fmt.Errorf("%w: field %q is not a JSON object of strings: %v", ErrMalformed, fieldHeaders, err)
		}
		if m.Headers == nil { // "null"
			m.Headers = map[string]string{}
		}
	}
	var err error
	if m.EnqueuedAt, err = millisField(values, fieldEnqueued); err != nil {
		return m, err
	}
	if m.FirstFailedAt, err = millisField(values, fieldFirstFail); err != nil {
		return m, err
	}
	if a, ok := str(values[fieldAttempt]); ok {
		n, err := strconv.Atoi(a)
		if err != nil || n < 0 {
			return m, fmt.Errorf("%w: field %q must be a non-negative integer, got %q", ErrMalformed, fieldAttempt, a)
		}
		m.Attempt = n
	}
	m.Key, _ = str(values[fieldKey])
	m.keyToken, _ = str(values[fieldKeyToken])
	m.LastError, _ = str(values[fieldLastError])
	m.crashed = isCrashed(values)
	return m, nil
}

func millisField(values map[string]any, name string) (time.Time, error) {
	s, ok := str(values[name])
	if !ok || s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("%w: field %q must be Unix milliseconds, got %q", ErrMalformed, name, s)
	}
	return time.UnixMilli(n), nil
}

// isCrashed reports whether an entry carries the crashed mark.
func isCrashed(values map[string]any) bool {
	c, _ := str(values[fieldCrashed])
	return c == "1"
}

func str(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case []byte:
		return string(s), true
	}
	return "", false
}

// jobFromMessage rebuilds the stream fields of a decoded message, for retries.
func jobFromMessage(m *Message) *jobFields {
	j := &jobFields{
		payload:  m.Payload,
		headers:  m.Headers,
		attempt:  m.Attempt,
		key:      m.Key,
		keyToken: m.keyToken,
		lastErr:  m.LastError,
		crashed:  m.crashed,
	}
	if !m.EnqueuedAt.IsZero() {
		j.enqMillis = m.EnqueuedAt.UnixMilli()
	}
	if !m.FirstFailedAt.IsZero() {
		j.firstFail = m.FirstFailedAt.UnixMilli()
	}
	return j
}
