// Package wire is the stream entry format of streamq jobs (versions 1 and
// 2; version 2 adds the fields of typed jobs and per-job options): the
// flat field/value list that any Redis client can write with XADD and read
// with XRANGE, its decoding, the fields a job carries from one attempt to
// the next, and the fields of a dead letter. The engine, the producer, the
// adapters and the inspection tools all read and write jobs through it, so
// the format lives in one place.
//
// A minimal job is
//
//	XADD streamq:{orders}:stream * v 1 payload <bytes>
//
// and every other field is optional (see the wire format table in docs/operations.md).
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// Version is the format version written in the "v" field of an entry that
// uses no field of version 2. Entries written by streamq 0.1.0 have it.
const Version = 1

// Version2 is the format version written in the "v" field of an entry that
// carries any of the fields of typed jobs and per-job options (kind, ma,
// to, dl, rr, tags, fk, uk). Readers accept both versions.
const Version2 = 2

// HeaderPriority is the job header that carries a stream job's priority,
// for a priority set's forwarder (priority.HeaderPriority).
const HeaderPriority = "streamq-priority"

// Field names of a job entry.
const (
	FieldVersion   = "v"       // format version, "1" or "2"; required
	FieldPayload   = "payload" // job payload, raw bytes; required
	FieldHeaders   = "headers" // JSON object of string values; optional
	FieldEnqueued  = "enq"     // enqueue time, Unix milliseconds; optional
	FieldAttempt   = "attempt" // attempts charged to earlier copies of the job; optional, default 0
	FieldKey       = "key"     // unique key; optional
	FieldKeyToken  = "kt"      // token of the unique-key lock; set with key
	FieldFirstFail = "ff"      // first failure time, Unix milliseconds; set on retries
	FieldLastError = "err"     // last error text; set on retries
	FieldCrashed   = "crashed" // "1": the latest runs were cut short by crashes (see Job.Crashed)
	// FieldJobID is the job's stable ID: the entry ID (or priority job ID)
	// of its first copy. Absent on a first copy, whose stable ID is its own
	// ID; retried and requeued copies carry it.
	FieldJobID = "jid"
	// FieldErrors is the job's error history: a JSON array of its last
	// [MaxErrors] failures, newest last (see [Failure]).
	FieldErrors = "errs"
)

// Field names of version 2: each is written only when used, and an entry
// that has any of them is written with version 2.
const (
	FieldKind        = "kind" // the job's kind (typed jobs); absent: ""
	FieldMaxAttempts = "ma"   // max attempts of this job, overriding the queue's
	FieldTimeout     = "to"   // handler timeout of this job, milliseconds
	FieldDeadline    = "dl"   // deadline of this job, Unix milliseconds
	FieldRetention   = "rr"   // result retention of this job, milliseconds
	FieldTags        = "tags" // JSON array of strings
	FieldFlowKey     = "fk"   // flow-control key
	FieldUnknownKind = "uk"   // hand-backs because no handler knew the kind
)

// Error history bounds: the failures kept with a job and the bytes of the
// error text of each.
const (
	MaxErrors       = 5
	MaxHistoryError = 512
)

// Failure is one entry of a job's error history (the errs field).
type Failure struct {
	At      int64  `json:"at"` // Unix milliseconds
	Attempt int    `json:"attempt"`
	Error   string `json:"error"`
}

// AppendFailure returns the errs field history with f added: the last
// [MaxErrors] failures, each error cut to [MaxHistoryError] bytes. A history
// that does not parse is replaced.
func AppendFailure(history string, f Failure) string {
	var list []Failure
	if history != "" {
		_ = json.Unmarshal([]byte(history), &list)
	}
	f.Error = cut(f.Error, MaxHistoryError)
	list = append(list, f)
	if len(list) > MaxErrors {
		list = list[len(list)-MaxErrors:]
	}
	b, _ := json.Marshal(list)
	return string(b)
}

// ParseFailures decodes an errs field; nil when it is empty or malformed.
func ParseFailures(history string) []Failure {
	if history == "" {
		return nil
	}
	var list []Failure
	if json.Unmarshal([]byte(history), &list) != nil {
		return nil
	}
	return list
}

// cut shortens s to at most n bytes without splitting a UTF-8 sequence.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Field names of a dead letter. A dead letter holds these fields followed
// by the job's own fields unchanged (so a malformed entry is kept as it was).
const (
	FieldDLQueue     = "dl_queue"
	FieldDLID        = "dl_id"
	FieldDLReason    = "dl_reason"
	FieldDLError     = "dl_error"
	FieldDLAttempts  = "dl_attempts"
	FieldDLFirstFail = "dl_first_failed"
	FieldDLFailed    = "dl_failed"
	// FieldDLFields holds the job's own fields packed (see [Pack]) when
	// there are more than [MaxFields] of them (see [DeadLetterArgs]).
	FieldDLFields = "dl_fields"
	// DLPrefix starts every dead-letter field; a job's own fields never do.
	DLPrefix = "dl_"
)

// MaxErrorLen bounds the error text stored with a retried or dead-lettered job.
const MaxErrorLen = 4096

// MaxFields is the most fields a job's data may hold to be moved as plain
// fields by a Lua script, far below Lua's limit of about 8,000 values in one
// call (a job written by streamq has at most 10). A dead letter of a stream
// entry with more fields keeps them packed in one field (see
// [DeadLetterArgs]); a delayed job with more is dead-lettered as malformed.
const MaxFields = 1000

// ErrMalformed marks fields that do not follow the format. The root package
// exports the same value as streamq.ErrMalformed.
var ErrMalformed = errors.New("streamq: malformed job")

// Errors of [Check]. The root package exports the same values.
var (
	ErrTooLarge      = errors.New("streamq: job too large")
	ErrInvalidHeader = errors.New("streamq: invalid header")
)

// HeaderBytes is the size of headers as the limits count it: the bytes of
// every key and value.
func HeaderBytes(h map[string]string) int64 {
	var n int64
	for k, v := range h {
		n += int64(len(k) + len(v))
	}
	return n
}

// Check checks a job before it is written: its payload must be at most
// maxPayload bytes and its headers at most maxHeaders bytes ([HeaderBytes];
// a negative limit is none), and every header key and value must be valid
// UTF-8, since the headers field is JSON, which encoding/json would alter
// silently (invalid bytes become U+FFFD). The error wraps [ErrTooLarge] or
// [ErrInvalidHeader] and says how to fix it.
func Check(payload []byte, headers map[string]string, maxPayload, maxHeaders int64) error {
	if maxPayload >= 0 && int64(len(payload)) > maxPayload {
		return fmt.Errorf("%w: the payload is %d bytes, the limit is %d (QueueConfig.MaxPayloadBytes): store large data elsewhere and enqueue a reference",
			ErrTooLarge, len(payload), maxPayload)
	}
	if n := HeaderBytes(headers); maxHeaders >= 0 && n > maxHeaders {
		return fmt.Errorf("%w: the headers are %d bytes (keys and values, after the enqueue hooks ran), the limit is %d (QueueConfig.MaxHeaderBytes)",
			ErrTooLarge, n, maxHeaders)
	}
	for k, v := range headers {
		switch {
		case !utf8.ValidString(k):
			return fmt.Errorf("%w: key %q is not valid UTF-8: headers are stored as JSON strings; encode binary data, e.g. as base64", ErrInvalidHeader, k)
		case !utf8.ValidString(v):
			return fmt.Errorf("%w: the value of %q is not valid UTF-8: headers are stored as JSON strings; encode binary data, e.g. as base64", ErrInvalidHeader, k)
		}
	}
	return nil
}

// Job is a decoded job entry.
type Job struct {
	Payload   []byte
	Headers   map[string]string // nil when the job has none
	EnqMillis int64
	// Attempt counts the attempts charged to earlier copies of the job: a
	// retry or a hand-back writes the job again as a new entry, and the
	// count of the old one is carried over in this field.
	Attempt   int
	Key       string
	KeyToken  string
	FirstFail int64
	LastError string
	// Crashed marks a copy whose latest runs were cut short by crashes (the
	// worker died, hung or lost Redis) and that was then handed back
	// without a verdict: its next attempt counts as one after crashes.
	Crashed bool
	// JobID is the jid field: the stable ID of a retried or requeued copy
	// ("" on a first copy). The errs field is not decoded (it is only needed
	// when the job fails: see [ErrorsField]).
	JobID string

	// Opts are the fields of version 2.
	Opts
}

// Opts are the fields of version 2 of a job (zero: absent): its kind and
// per-job options, and its count of hand-backs for an unknown kind.
type Opts struct {
	// Kind names the job's type of work ("" for untyped jobs).
	Kind string
	// MaxAttempts overrides the queue's attempt budget (0: the queue's).
	MaxAttempts int
	// Timeout is the handler timeout in milliseconds (0: the queue's).
	Timeout int64
	// Deadline is when the job must have run by, Unix milliseconds (0: none).
	Deadline int64
	// Retention is how long progress and results are kept, milliseconds
	// (0: the queue's).
	Retention int64
	// Tags are the job's labels for inspection (nil: none).
	Tags []string
	// FlowKey is the job's flow-control key ("" for none).
	FlowKey string
	// UnknownKind counts the hand-backs of the job because no handler of the
	// worker that took it knew its kind.
	UnknownKind int
}

// V2 reports whether o holds a field of version 2: a job with one is written
// with [Version2].
func (o *Opts) V2() bool {
	return o.Kind != "" || len(o.Tags) > 0 || o.Rare()
}

// Rare reports whether o holds a field other than the kind and the tags:
// a per-job option (max attempts, timeout, deadline, retention, flow key)
// or a count of unknown-kind hand-backs. Most jobs have none, so a holder
// of many jobs (the consumer's messages) keeps these behind a pointer.
func (o *Opts) Rare() bool {
	return o.MaxAttempts > 0 || o.Timeout > 0 || o.Deadline > 0 || o.Retention > 0 ||
		o.FlowKey != "" || o.UnknownKind > 0
}

// ErrorsField returns the errs field of an entry ("" when absent).
func ErrorsField(values map[string]any) string {
	s, _ := Str(values[FieldErrors])
	return s
}

// PayloadArg is the index of the payload's value in [Job.Args].
const PayloadArg = 3

// Args returns the entry as a flat field/value list for XADD. Empty optional
// fields are left out, which keeps entries small. The payload's value is at
// index PayloadArg.
func (j *Job) Args() []any { return j.AppendArgs(make([]any, 0, 16)) }

// AppendArgs appends [Job.Args] to a.
func (j *Job) AppendArgs(a []any) []any {
	if j.V2() {
		return j.appendV2(append(a, FieldVersion, "2", FieldPayload, j.Payload))
	}
	return j.appendV1(append(a, FieldVersion, "1", FieldPayload, j.Payload))
}

// appendV2 appends the fields of version 2 then those of version 1.
func (j *Job) appendV2(a []any) []any {
	if j.Kind != "" {
		a = append(a, FieldKind, j.Kind)
	}
	if j.MaxAttempts > 0 {
		a = append(a, FieldMaxAttempts, strconv.Itoa(j.MaxAttempts))
	}
	if j.Timeout > 0 {
		a = append(a, FieldTimeout, strconv.FormatInt(j.Timeout, 10))
	}
	if j.Deadline > 0 {
		a = append(a, FieldDeadline, strconv.FormatInt(j.Deadline, 10))
	}
	if j.Retention > 0 {
		a = append(a, FieldRetention, strconv.FormatInt(j.Retention, 10))
	}
	if len(j.Tags) > 0 {
		t, _ := json.Marshal(j.Tags) // []string always marshals
		a = append(a, FieldTags, string(t))
	}
	if j.FlowKey != "" {
		a = append(a, FieldFlowKey, j.FlowKey)
	}
	if j.UnknownKind > 0 {
		a = append(a, FieldUnknownKind, strconv.Itoa(j.UnknownKind))
	}
	return j.appendV1(a)
}

// appendV1 appends the optional fields of version 1.
func (j *Job) appendV1(a []any) []any {
	if len(j.Headers) > 0 {
		a = append(a, FieldHeaders, marshalHeaders(j.Headers))
	}
	a = append(a, FieldEnqueued, strconv.FormatInt(j.EnqMillis, 10))
	if j.Attempt > 0 {
		a = append(a, FieldAttempt, strconv.Itoa(j.Attempt))
	}
	if j.Key != "" {
		a = append(a, FieldKey, j.Key, FieldKeyToken, j.KeyToken)
	}
	if j.FirstFail > 0 {
		a = append(a, FieldFirstFail, strconv.FormatInt(j.FirstFail, 10))
	}
	if j.LastError != "" {
		a = append(a, FieldLastError, j.LastError)
	}
	if j.Crashed {
		a = append(a, FieldCrashed, "1")
	}
	if j.JobID != "" {
		a = append(a, FieldJobID, j.JobID)
	}
	return a
}

// marshalHeaders returns h as json.Marshal writes it (keys in order),
// without its reflection: every enqueue of a job with headers calls it.
func marshalHeaders(h map[string]string) []byte {
	var small [8]string
	keys := small[:0]
	size := 2
	for k, v := range h {
		keys = append(keys, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(AppendJSONString(b, k), ':')
		b = AppendJSONString(b, h[k])
	}
	return append(b, '}')
}

// AppendJSONString appends s as a JSON string, as json.Marshal writes it:
// a string of printable ASCII without the characters it escapes as is,
// any other through encoding/json.
func AppendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// plainHeaders parses s as encoding/json would when it is a JSON object of
// strings written as json.Marshal writes one without escapes (no white
// space, no backslash, no control character): the headers of nearly every
// job, read about ten times faster. ok is false for any other s, which the
// caller gives to encoding/json. The strings share the memory of s.
func plainHeaders(s string) (h map[string]string, ok bool) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, false
	}
	if s == "{}" {
		return nil, true // no headers, as json.Unmarshal reads an empty object
	}
	h = make(map[string]string, strings.Count(s, `":"`))
	for i := 1; ; {
		k, end, ok := plainString(s, i)
		if !ok || end >= len(s) || s[end] != ':' {
			return nil, false
		}
		v, end, ok := plainString(s, end+1)
		if !ok || end >= len(s) {
			return nil, false
		}
		h[k] = v
		switch {
		case s[end] == '}' && end == len(s)-1:
			return h, true
		case s[end] != ',':
			return nil, false
		}
		i = end + 1
	}
}

// plainString reads the JSON string at s[i:] when it has no escape and no
// control character, and returns it and the index after it.
func plainString(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return s[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

// Decode parses job fields. The error wraps [ErrMalformed] and says which
// field is wrong; the returned Job is never nil, so a
// caller can still report what it could read.
func Decode(values map[string]any) (*Job, error) {
	j := &Job{}
	err := DecodeInto(j, values)
	return j, err
}

// DecodeInto is [Decode] into *j, which it overwrites.
func DecodeInto(j *Job, values map[string]any) error { return decode(j, values, false) }

// DecodeView is [DecodeInto] without a copy of the payload: j.Payload
// shares the bytes of the payload value (a string that nothing else
// writes, as go-redis makes one per reply value), so it must never be
// modified. The engine decodes with it: the payload of a job is its
// largest part, and a copy per job costs an allocation and garbage
// collection.
func DecodeView(j *Job, values map[string]any) error { return decode(j, values, true) }

func decode(j *Job, values map[string]any, view bool) error {
	*j = Job{}
	if values == nil {
		return fmt.Errorf("%w: the entry has no fields (deleted?)", ErrMalformed)
	}
	var version, headers, enq, ff, attempt string
	var v2 v2Fields
	var payload []byte
	var hasVersion, hasPayload, hasAttempt bool
	// Most entries hold only the version, the payload and the enqueue
	// time: three look-ups; a pass over the fields only when there are
	// more (a lookup of every field a job may have costs more than that).
	found := 0
	if raw, ok := values[FieldVersion]; ok {
		found++
		version, hasVersion = Str(raw)
	}
	if raw, ok := values[FieldPayload]; ok {
		found++
		payload, hasPayload = payloadBytes(raw, view)
	}
	if raw, ok := values[FieldEnqueued]; ok {
		found++
		enq, _ = Str(raw)
	}
	if len(values) > found {
		for k, raw := range values {
			v, ok := raw.(string)
			if !ok {
				if v, ok = Str(raw); !ok {
					continue
				}
			}
			switch k {
			case FieldHeaders:
				headers = v
			case FieldFirstFail:
				ff = v
			case FieldAttempt:
				attempt, hasAttempt = v, true
			case FieldKey:
				j.Key = v
			case FieldKeyToken:
				j.KeyToken = v
			case FieldLastError:
				j.LastError = v
			case FieldCrashed:
				j.Crashed = v == "1"
			case FieldJobID:
				j.JobID = v
			default:
				v2.set(j, k, v)
			}
		}
	}
	if !hasVersion {
		return fmt.Errorf("%w: missing field %q", ErrMalformed, FieldVersion)
	}
	if version != "1" && version != "2" {
		return fmt.Errorf("%w: unsupported format version %q (this consumer reads versions %d and %d)", ErrMalformed, version, Version, Version2)
	}
	if !hasPayload {
		return fmt.Errorf("%w: missing field %q", ErrMalformed, FieldPayload)
	}
	j.Payload = payload
	if headers != "" {
		if !utf8.ValidString(headers) {
			// encoding/json would replace the invalid bytes with U+FFFD.
			return fmt.Errorf("%w: field %q is not valid UTF-8", ErrMalformed, FieldHeaders)
		}
		// Into a variable of its own: &j.Headers would make j escape, and a
		// Job decoded on the stack (the engine's) would cost an allocation.
		h, ok := plainHeaders(headers)
		if !ok {
			if err := json.Unmarshal([]byte(headers), &h); err != nil {
				return fmt.Errorf("%w: field %q is not a JSON object of strings: %v", ErrMalformed, FieldHeaders, err)
			}
		}
		if len(h) > 0 { // "{}": none, as when the field is absent
			j.Headers = h
		}
	}
	var err error
	if j.EnqMillis, err = parseMillisField(FieldEnqueued, enq); err != nil {
		return err
	}
	if j.FirstFail, err = parseMillisField(FieldFirstFail, ff); err != nil {
		return err
	}
	if hasAttempt {
		if j.Attempt, err = parseAttempt(attempt); err != nil {
			return err
		}
	}
	return v2.finish(j)
}

// v2Fields are what decoding found of the fields of version 2 beyond
// those it sets at once: the raw tags and the first error.
type v2Fields struct {
	tags string
	err  error
}

// set sets field k of value v on j if it is one of version 2.
func (f *v2Fields) set(j *Job, k, v string) {
	var err error
	switch k {
	case FieldKind:
		j.Kind = v
	case FieldFlowKey:
		j.FlowKey = v
	case FieldMaxAttempts:
		j.MaxAttempts, err = parseCount(k, v)
	case FieldUnknownKind:
		j.UnknownKind, err = parseCount(k, v)
	case FieldTimeout:
		j.Timeout, err = parseMillisField(k, v)
	case FieldDeadline:
		j.Deadline, err = parseMillisField(k, v)
	case FieldRetention:
		j.Retention, err = parseMillisField(k, v)
	case FieldTags:
		f.tags = v
	}
	if f.err == nil {
		f.err = err
	}
}

// finish reports the first error of set, then decodes the tags.
func (f *v2Fields) finish(j *Job) error {
	if f.err != nil || f.tags == "" {
		return f.err
	}
	if !utf8.ValidString(f.tags) {
		return fmt.Errorf("%w: field %q is not valid UTF-8", ErrMalformed, FieldTags)
	}
	var tags []string
	if err := json.Unmarshal([]byte(f.tags), &tags); err != nil {
		return fmt.Errorf("%w: field %q is not a JSON array of strings: %v", ErrMalformed, FieldTags, err)
	}
	if len(tags) > 0 {
		j.Tags = tags
	}
	return nil
}

// parseCount parses the value of a count field (attempt, ma, uk): an
// integer from 0 to MaxAttempt.
func parseCount(name, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > MaxAttempt {
		return 0, fmt.Errorf("%w: field %q must be an integer from 0 to %d, got %q", ErrMalformed, name, MaxAttempt, s)
	}
	return n, nil
}

// payloadBytes returns a payload value as bytes: a copy, or with view the
// value's own bytes. It reports false for a value that is not a string or
// bytes. An empty payload is an empty slice, never nil.
func payloadBytes(raw any, view bool) ([]byte, bool) {
	switch v := raw.(type) {
	case string:
		if len(v) == 0 {
			return []byte{}, true
		}
		if view {
			return unsafe.Slice(unsafe.StringData(v), len(v)), true
		}
		return []byte(v), true
	case []byte:
		if view {
			return v, true
		}
		return append([]byte{}, v...), true
	}
	return nil, false
}

// MaxAttempt is the largest attempt field accepted: a larger one is
// malformed, so that adding the starts of the current copy can never wrap
// around and reset a job's retry budget.
const MaxAttempt = 1_000_000_000

// AttemptField returns the attempt field of an entry (0 when absent), or an
// error wrapping [ErrMalformed].
func AttemptField(values map[string]any) (int, error) {
	a, ok := Str(values[FieldAttempt])
	if !ok {
		return 0, nil
	}
	return parseAttempt(a)
}

// MaxAttemptsField returns the ma field of an entry (0 when absent or
// malformed: a malformed one fails the entry's decoding).
func MaxAttemptsField(values map[string]any) int {
	s, ok := Str(values[FieldMaxAttempts])
	if !ok {
		return 0
	}
	n, err := parseCount(FieldMaxAttempts, s)
	if err != nil {
		return 0
	}
	return n
}

// RetentionField returns the rr field of an entry (the job's own result
// retention in milliseconds), 0 when absent or malformed.
func RetentionField(values map[string]any) int64 {
	s, _ := Str(values[FieldRetention])
	n, err := parseMillisField(FieldRetention, s)
	if err != nil {
		return 0
	}
	return n
}

// parseAttempt parses the value of the attempt field.
func parseAttempt(a string) (int, error) { return parseCount(FieldAttempt, a) }

// parseMillisField parses the value of field name in Unix milliseconds ("":
// absent, 0).
func parseMillisField(name, s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: field %q must be Unix milliseconds, got %q", ErrMalformed, name, s)
	}
	return n, nil
}

// Crashed reports whether an entry carries the crashed mark.
func Crashed(values map[string]any) bool {
	c, _ := Str(values[FieldCrashed])
	return c == "1"
}

// Str returns v as a string if it is one (or a byte slice).
func Str(v any) (string, bool) {
	switch s := v.(type) {
	case string:
		return s, true
	case []byte:
		return string(s), true
	}
	return "", false
}

// Truncate shortens s to at most n bytes plus a marker. It cuts on a rune
// boundary (before a UTF-8 sequence that does not fit whole), so that valid
// UTF-8 stays valid; in bytes that are not UTF-8 it steps back at most
// utf8.UTFMax-1 bytes.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n, 0)
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	return s[:cut] + "...(truncated)"
}

// DeadLetter describes why and how a job was dead-lettered.
type DeadLetter struct {
	Queue     string
	ID        string // the job's ID when it was dead-lettered
	Reason    string
	Error     string
	Attempts  int
	FirstFail time.Time // zero: now
	Failed    time.Time
}

// jobFields are the fields of the wire format: a dead letter keeps them
// plain even when it packs the others, so that a requeue finds the job.
var jobFields = map[string]bool{
	FieldVersion: true, FieldPayload: true, FieldHeaders: true, FieldEnqueued: true, FieldAttempt: true,
	FieldKey: true, FieldKeyToken: true, FieldFirstFail: true, FieldLastError: true, FieldCrashed: true,
	FieldJobID: true, FieldErrors: true,
	FieldKind: true, FieldMaxAttempts: true, FieldTimeout: true, FieldDeadline: true, FieldRetention: true,
	FieldTags: true, FieldFlowKey: true, FieldUnknownKind: true,
}

// DeadLetterArgs returns the fields of a dead letter as a flat field/value
// list for XADD: the dead-letter fields, then the job's own fields (raw,
// with any dead-letter fields they carry dropped). If headers is not nil it
// replaces the job's headers field (a backend that adds headers, such as a
// job's priority, keeps them in the dead letter).
//
// An entry with more than [MaxFields] fields (written by another client)
// would not fit in one script call (Lua's unpack takes about 8,000 values):
// its fields are kept packed in the one field [FieldDLFields], and those of
// the wire format also plain. [ParseDeadLetter] unpacks them.
func DeadLetterArgs(d DeadLetter, raw map[string]any, headers map[string]string) []any {
	first := d.FirstFail
	if first.IsZero() {
		first = d.Failed
	}
	args := make([]any, 0, 16+2*len(raw))
	args = append(args,
		FieldDLQueue, d.Queue,
		FieldDLID, d.ID,
		FieldDLReason, d.Reason,
		FieldDLError, Truncate(d.Error, MaxErrorLen),
		FieldDLAttempts, strconv.Itoa(d.Attempts),
		FieldDLFirstFail, strconv.FormatInt(first.UnixMilli(), 10),
		FieldDLFailed, strconv.FormatInt(d.Failed.UnixMilli(), 10),
	)
	packed := len(raw) > MaxFields
	var all []any
	if packed {
		all = make([]any, 0, 2*len(raw))
	}
	for k, v := range raw {
		if strings.HasPrefix(k, DLPrefix) || (headers != nil && k == FieldHeaders) {
			continue // a requeued dead letter never carries these; a raw entry might
		}
		if packed {
			all = append(all, k, v)
			if !jobFields[k] {
				continue
			}
		}
		args = append(args, k, v)
	}
	if headers != nil {
		h, _ := json.Marshal(headers)
		args = append(args, FieldHeaders, string(h))
	}
	if packed {
		args = append(args, FieldDLFields, Pack(all))
	}
	return args
}

// ParseDeadLetter splits the fields of a dead letter into what
// [DeadLetterArgs] wrote and the job's own fields (unpacked from
// [FieldDLFields] when it packed them; kept under that name if they do not
// unpack).
func ParseDeadLetter(values map[string]any) (DeadLetter, map[string]string) {
	var d DeadLetter
	own := make(map[string]string, len(values))
	if s, ok := Str(values[FieldDLFields]); ok {
		if m, err := Unpack(s); err == nil {
			for k, v := range m {
				if !strings.HasPrefix(k, DLPrefix) {
					own[k], _ = Str(v)
				}
			}
			values = maps.Clone(values)
			delete(values, FieldDLFields)
		}
	}
	for k, v := range values {
		s, _ := Str(v)
		switch k {
		case FieldDLQueue:
			d.Queue = s
		case FieldDLID:
			d.ID = s
		case FieldDLReason:
			d.Reason = s
		case FieldDLError:
			d.Error = s
		case FieldDLAttempts:
			d.Attempts, _ = strconv.Atoi(s)
		case FieldDLFirstFail:
			d.FirstFail = ParseMillis(s)
		case FieldDLFailed:
			d.Failed = ParseMillis(s)
		default:
			own[k] = s
		}
	}
	return d, own
}

// ParseMillis parses Unix milliseconds; anything else is the zero time.
func ParseMillis(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// Millis returns t's Unix milliseconds, 0 for the zero time.
func Millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
