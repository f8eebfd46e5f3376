package streamq

import (
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/streamq/streamq/internal/wire"
)

// EnqueueOptions are the settings of one enqueue call, which its
// [EnqueueOption] values fill in order (a later option wins). Users may
// write options of their own: an option that returns an error fails the
// call before anything is written. The zero value enqueues a plain job at
// once.
type EnqueueOptions struct {
	// Headers are added to every job of the call (a batch job's own
	// Headers win on equal keys). Set by [WithHeaders] and [WithHeader].
	Headers map[string]string
	// At is when the job is due, on the Redis server's clock (zero: now; a
	// time in the past by the process's clock: now). Set by [ProcessAt].
	At time.Time
	// In, when positive, delays the job by this long after the Redis
	// server's time when it is stored; it wins over At. Set by [ProcessIn].
	In time.Duration
	// UniqueKey makes the job unique by key ("": not unique). Set by
	// [Unique].
	UniqueKey string
	// UniqueTTL bounds the life of the unique key's lock. Set by [Unique].
	UniqueTTL time.Duration
	// Kind names the job's type of work, which a [Mux] routes by ("": an
	// untyped job). Set by [WithKind], and by [EnqueueArgs] from the args.
	Kind string
	// MaxAttempts overrides the queue's attempt budget for this job
	// (ConsumerConfig.MaxDeliveries); 0 keeps the queue's. Set by
	// [MaxAttempts].
	MaxAttempts int
	// Timeout overrides the handler timeout for this job
	// (ConsumerConfig.JobTimeout); 0 keeps the queue's. Set by [Timeout].
	Timeout time.Duration
	// Deadline is when the job must have run by (zero: none). Set by
	// [Deadline].
	Deadline time.Time
	// ResultRetention overrides how long the job's progress and result are
	// kept (ConsumerConfig.ResultRetention); 0 keeps the queue's. Set by
	// [ResultRetention].
	ResultRetention time.Duration
	// Tags label the job for inspection and filters (nil: none). Set by
	// [Tags].
	Tags []string
	// JobID is a caller-chosen ID for the job ("": one is generated). Set
	// by [WithJobID], which checks it.
	JobID string
	// UniqueByArgs makes the job unique by a key made of its kind and
	// payload, for UniqueTTL. Set by [UniqueByArgs].
	UniqueByArgs bool
	// UniqueStates limit the unique key to a holder in these states (nil:
	// all). Set by [UniqueWhile] and [UniqueByArgs].
	UniqueStates []UniqueState
	// ThrottleKey and ThrottleWindow let one job per window through ("":
	// none). Set by [Throttle].
	ThrottleKey    string
	ThrottleWindow time.Duration
	// DebounceKey and DebounceQuiet debounce the job ("": none). Set by
	// [Debounce].
	DebounceKey   string
	DebounceQuiet time.Duration
	// FlowKey is the job's flow-control key ("": none). Set by [FlowKey].
	FlowKey string
	// PartitionKey routes the job of a [PartitionedProducer] to the
	// partition of the key's hash ("": the unique key's, else the flow
	// key's, else round robin). Set by [PartitionKey].
	PartitionKey string
	// Priority is the job's priority in the priority set its queue is
	// forwarded to (nil: the set's default). Set by priority.WithPriority;
	// a [Producer] whose queue has no priority set refuses it.
	Priority *int
}

// EnqueueOption changes how a job is enqueued. It returns an error for
// misuse (an invalid value, a combination that cannot work), which Enqueue
// returns wrapped, writing nothing.
type EnqueueOption func(*EnqueueOptions) error

// Limits of per-job options.
const (
	// MaxUniqueKeyLen is the longest accepted unique key, in bytes.
	MaxUniqueKeyLen = 1024
	// MaxKindLen is the longest accepted kind, in bytes.
	MaxKindLen = 255
	// MaxTags is the most tags one job may carry.
	MaxTags = 32
	// MaxTagLen is the longest accepted tag, in bytes.
	MaxTagLen = 255
)

// Unique makes the job unique by key: while a job enqueued with the same key
// is waiting, scheduled, retrying or running, Enqueue returns the existing
// job's ID and [ErrDuplicate]. The lock is released when the job succeeds or
// is dead-lettered, and expires after ttl in any case (so a lost lock cannot
// block the key forever; choose ttl longer than the job's expected life).
// Taking the lock and enqueueing are one atomic step. Not allowed with
// EnqueueBatch.
func Unique(key string, ttl time.Duration) EnqueueOption {
	return func(o *EnqueueOptions) error {
		switch {
		case key == "":
			return configErr("Unique key", "is empty: use a key that identifies the work, e.g. \"invoice:42\"")
		case len(key) > MaxUniqueKeyLen:
			return configErr("Unique key", "is %d bytes long: use at most %d", len(key), MaxUniqueKeyLen)
		case ttl < time.Millisecond:
			return configErr("Unique ttl", "%s: use at least 1ms, longer than the job is expected to wait and run", ttl)
		}
		o.UniqueKey, o.UniqueTTL = key, ttl
		return nil
	}
}

// PartitionKey routes the job to the partition of key's hash when a
// [PartitionedProducer] enqueues it, so that jobs with the same key stay in
// one partition and keep their order. A job without one goes to the
// partition of its [Unique] key, else of its [FlowKey], else round robin.
// A unique or flow key stays exact as long as every job with it carries
// the same partition key. On a [Producer] (one partition) it changes
// nothing. key must be 1 to MaxUniqueKeyLen bytes.
func PartitionKey(key string) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if key == "" || len(key) > MaxUniqueKeyLen {
			return configErr("PartitionKey", "is %d bytes long: use 1 to %d bytes that name what must stay in order, e.g. \"customer:42\"", len(key), MaxUniqueKeyLen)
		}
		o.PartitionKey = key
		return nil
	}
}

// WithHeaders adds headers to the job. Later options win on equal keys.
func WithHeaders(h map[string]string) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if o.Headers == nil {
			o.Headers = make(map[string]string, len(h))
		}
		maps.Copy(o.Headers, h)
		return nil
	}
}

// WithHeader adds one header to the job.
func WithHeader(key, value string) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if o.Headers == nil {
			o.Headers = make(map[string]string, 1)
		}
		o.Headers[key] = value
		return nil
	}
}

// ProcessAt delays the job until t. It is kept in the queue's delayed set and
// moved into the stream by a consumer's scheduler when the Redis server's
// clock reaches t. A time in the past (by the clock of the calling process)
// enqueues the job at once. To delay a job by a duration, use [ProcessIn]:
// it is measured on the server's clock, so a process whose clock is off
// changes nothing.
func ProcessAt(t time.Time) EnqueueOption {
	return func(o *EnqueueOptions) error {
		o.At, o.In = t, 0
		return nil
	}
}

// ProcessIn delays the job by d after the Redis server's time when it is
// stored (not the process's clock); see [ProcessAt]. 0 enqueues at once.
func ProcessIn(d time.Duration) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if d < 0 {
			return configErr("ProcessIn", "negative delay %s: use 0 to enqueue at once", d)
		}
		o.At, o.In = time.Time{}, d
		return nil
	}
}

// WithKind sets the job's kind, which a [Mux] routes by and the inspection
// tools show and filter by. A kind is 1 to [MaxKindLen] bytes of UTF-8
// without spaces or control characters, such as "email.send". Typed jobs
// get it from their args ([EnqueueArgs]).
func WithKind(kind string) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if err := checkName("WithKind", "kind", kind, MaxKindLen, `"email.send"`); err != nil {
			return err
		}
		o.Kind = kind
		return nil
	}
}

// MaxAttempts sets the number of attempts after which this job, failing, is
// dead-lettered, in place of the queue's ConsumerConfig.MaxDeliveries (and
// a priority worker's). n must be from 1 to 1,000,000,000.
func MaxAttempts(n int) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if n < 1 || n > wire.MaxAttempt {
			return configErr("MaxAttempts", "%d: use from 1 (no retry) to %d", n, wire.MaxAttempt)
		}
		o.MaxAttempts = n
		return nil
	}
}

// Timeout bounds each handler call of this job, in place of the worker's
// JobTimeout: the handler's context reports the deadline and is cancelled
// with cause [ErrJobTimeout] when it passes. d must be at least 1ms; it is
// rounded up to whole milliseconds.
func Timeout(d time.Duration) EnqueueOption {
	return durationOption("Timeout", d, func(o *EnqueueOptions) { o.Timeout = d })
}

// Deadline sets when the job must have run by: a job still waiting or
// retrying at t is dead-lettered with reason [ReasonDeadline] instead of
// run, and a running job's context reports t as its deadline. t must not
// be the zero time; Enqueue refuses a deadline already past by the queue's
// clock, or before the job is due.
func Deadline(t time.Time) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if t.IsZero() {
			return configErr("Deadline", "is the zero time: pass the time the job must have run by, or leave the option out")
		}
		o.Deadline = t
		return nil
	}
}

// ResultRetention sets how long this job's progress and result are kept
// after it finished, in place of the worker's ResultRetention. d must be at
// least 1ms; it is rounded up to whole milliseconds.
func ResultRetention(d time.Duration) EnqueueOption {
	return durationOption("ResultRetention", d, func(o *EnqueueOptions) { o.ResultRetention = d })
}

// durationOption returns the option name that checks that d is at least 1ms,
// then calls set.
func durationOption(name string, d time.Duration, set func(*EnqueueOptions)) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if d < time.Millisecond {
			return configErr(name, "%s: use at least 1ms", d)
		}
		set(o)
		return nil
	}
}

// Tags adds labels to the job, which inspect, the CLI (--tag) and the
// dashboard show and filter by. Each tag is 1 to [MaxTagLen] bytes of UTF-8
// without spaces, commas or control characters, such as "tenant:42"; a job
// carries at most [MaxTags], each once.
func Tags(tags ...string) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if len(o.Tags)+len(tags) > MaxTags {
			return configErr("Tags", "%d tags: use at most %d", len(o.Tags)+len(tags), MaxTags)
		}
		all := append(o.Tags[:len(o.Tags):len(o.Tags)], tags...)
		for i, t := range tags {
			if err := checkName("Tags", "tag", t, MaxTagLen, `"tenant:42"`); err != nil {
				return err
			}
			if strings.Contains(t, ",") {
				return configErr("Tags", "tag %q contains a comma, which separates tags in filters: use another separator", t)
			}
			for _, u := range all[:len(o.Tags)+i] {
				if u == t {
					return configErr("Tags", "tag %q is given twice: give each tag once", t)
				}
			}
		}
		o.Tags = all
		return nil
	}
}

// checkName checks a kind or a tag: 1 to maxLen bytes of UTF-8 without
// spaces or control characters.
func checkName(option, what, s string, maxLen int, example string) error {
	switch {
	case s == "":
		return configErr(option, "the %s is empty: use a name such as %s", what, example)
	case len(s) > maxLen:
		return configErr(option, "the %s is %d bytes long: use at most %d", what, len(s), maxLen)
	case !utf8.ValidString(s):
		return configErr(option, "the %s %q is not valid UTF-8", what, s)
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return configErr(option, "the %s %q contains a space or control character: use a name such as %s", what, s, example)
		}
	}
	return nil
}

// buildOptions applies opts in order and returns the first error, wrapped
// with the option's position.
func buildOptions(o *EnqueueOptions, opts []EnqueueOption) error {
	for i, opt := range opts {
		if opt == nil {
			return configErr(fmt.Sprintf("options[%d]", i), "is nil: remove it")
		}
		if err := opt(o); err != nil {
			return err
		}
	}
	return nil
}

// millis returns d in whole milliseconds, rounded up (0 for 0).
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// setJobOptions sets the per-job fields of o on j.
func (o *EnqueueOptions) setJobOptions(j *wire.Job) {
	j.Kind = o.Kind
	j.MaxAttempts = o.MaxAttempts
	j.Timeout = millis(o.Timeout)
	j.Deadline = wire.Millis(o.Deadline)
	j.Retention = millis(o.ResultRetention)
	j.Tags = o.Tags
	j.FlowKey = o.FlowKey
}
