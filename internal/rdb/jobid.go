package rdb

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Job IDs. A job keeps one ID for its whole life (its stable ID): the ID
// of its first copy, carried as the jid field by every later copy (a retry,
// a requeue, a delayed job moved into the stream), or an ID its producer
// chose. The trail hash maps the stable ID of a job whose current copy lives
// elsewhere to that place; a job with a chosen ID is in the trail from its
// enqueue on, so that an enqueue of the same ID finds it in any live state.
// When such a job finishes, its done marker (a key of its own under the
// queue's hash tag, with a TTL) keeps the ID taken for the queue's done
// retention, so a re-send after it finished is still a duplicate.
//
// Generated IDs have the form of a stream entry ID, "<ms>-<seq>": a job
// enqueued into the stream gets its entry ID (nothing is written for it
// beyond the entry), a delayed job an ID whose sequence number is random
// and at least delayedSeqMin, which no entry of a stream reaches in
// practice (that would take 10^18 entries in one millisecond). A chosen ID
// must not have that form, so chosen and generated IDs never meet.

// MaxJobIDLen is the longest job ID a producer may choose, in bytes.
const MaxJobIDLen = 200

// delayedSeqMin is the smallest sequence number of a delayed job's ID.
const delayedSeqMin = 1_000_000_000_000_000_000

// NewDelayedID returns a new generated job ID for a job of the delayed
// set: "<ms of now>-<random sequence number of 19 digits>". It is the job's
// stable ID while it waits, and the promoted copy carries it. Retries use it
// for their delayed copies too (their entry IDs there), and unique-key locks
// for their tokens.
func NewDelayedID() string { return newDelayedID(time.Now()) }

func newDelayedID(now time.Time) string {
	seq := delayedSeqMin + rand.Uint64N(1<<63-delayedSeqMin)
	return strconv.FormatInt(now.UnixMilli(), 10) + "-" + strconv.FormatUint(seq, 10)
}

// NewDelayedID returns a new generated ID for a delayed job enqueued now by
// the queue's clock (see the package function).
func (q *Queue) NewDelayedID() string { return newDelayedID(q.clock.Now()) }

// Generated reports whether id has the form of a generated job ID: a
// stream entry ID ("<ms>-<seq>" or "<ms>"), or the "d-" and 24 hex digits
// of the delayed jobs of streamq 0.1.0.
func Generated(id string) bool {
	if rest, ok := strings.CutPrefix(id, "d-"); ok && len(rest) == 24 && hexDigits(rest) {
		return true
	}
	return StreamID(id)
}

// StreamID reports whether s is a valid stream entry ID ("<ms>-<seq>" or
// "<ms>").
func StreamID(s string) bool {
	ms, seq, found := strings.Cut(s, "-")
	return Decimal(ms) && (!found || Decimal(seq))
}

// Decimal reports whether s is 1 to 20 decimal digits.
func Decimal(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func hexDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune("0123456789abcdef", rune(s[i])) {
			return false
		}
	}
	return true
}

// JobIDProblem returns why id cannot be a job ID chosen by a producer, or
// "": 1 to MaxJobIDLen bytes of letters, digits and "-_.:/@+=#", starting
// with a letter or digit, not of the form of a generated ID (a stream entry
// ID), not starting with OutboxIDPrefix, and not starting with one
// character and a colon (the form of an explicit location for the inspect
// package, such as "s:<entry ID>").
func JobIDProblem(id string) string {
	switch {
	case id == "":
		return "is empty: use an ID that names the job's work, e.g. \"invoice-42\" or an outbox row's key"
	case len(id) > MaxJobIDLen:
		return "is " + strconv.Itoa(len(id)) + " bytes long: use at most " + strconv.Itoa(MaxJobIDLen) + " (hash a longer identity)"
	case !alnum(id[0]):
		return strconv.Quote(id) + " starts with " + strconv.QuoteRune(rune(id[0])) + ": start it with a letter or digit"
	case Generated(id):
		return strconv.Quote(id) + " has the form of a generated ID (a stream entry ID): add a letter, e.g. \"job-" + id + "\""
	case strings.HasPrefix(id, OutboxIDPrefix):
		return strconv.Quote(id) + " starts with " + strconv.Quote(OutboxIDPrefix) + ", which the outbox relay keeps for the jobs of its rows: use another prefix"
	case len(id) >= 2 && id[1] == ':':
		return strconv.Quote(id) + " starts with one character and a colon, the form of an explicit location (\"s:<entry ID>\"): use a longer first part"
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !alnum(c) && !strings.ContainsRune("-_.:/@+=#", rune(c)) {
			return strconv.Quote(id) + " holds " + strconv.QuoteRune(rune(c)) + " at byte " + strconv.Itoa(i) + ": use letters, digits and - _ . : / @ + = #"
		}
	}
	return ""
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// Done returns the key of the done marker of chosen job ID id.
func (k Keys) Done(id string) string { return k.base + "done:" + id }
