package streamq

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/streamq/streamq/internal/rdb"
)

// Job IDs and deduplication modes: the options that decide whether an
// enqueue stores a new job (see docs/jobs.md, "Job IDs and deduplication").

// MaxJobIDLen is the longest job ID [WithJobID] accepts, in bytes.
const MaxJobIDLen = rdb.MaxJobIDLen

// WithJobID gives the job the ID id instead of a generated one: the job
// keeps it for its whole life ([Message.ID], the inspect package, the CLI,
// the dashboard). An enqueue whose ID names a job that lives (waiting,
// delayed, running, retrying or dead) or that finished within the queue's
// QueueConfig.DoneRetention writes nothing and returns id with
// [ErrDuplicate]; checking and writing are one atomic step, so of many
// concurrent enqueues of one ID exactly one stores the job, and a send
// that go-redis repeats after a lost reply returns the first send's result.
//
// An ID is 1 to [MaxJobIDLen] bytes of letters, digits and "-_.:/@+=#",
// starting with a letter or digit, not of the form of a generated ID (a
// stream entry ID such as "42" or "1700000000000-0") and not one character
// and a colon. Not allowed with EnqueueBatch or [Debounce].
func WithJobID(id string) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if p := rdb.JobIDProblem(id); p != "" {
			return configErr("WithJobID", "%s", p)
		}
		o.JobID = id
		return nil
	}
}

// UniqueState is a state of a job that holds a unique key taken with
// [UniqueWhile] or [UniqueByArgs].
type UniqueState string

// The states a unique key can be limited to.
const (
	// UniqueWaiting: the job waits in the stream (or a priority set).
	UniqueWaiting UniqueState = "w"
	// UniqueDelayed: the job waits in the delayed set, scheduled or for a
	// retry.
	UniqueDelayed UniqueState = "d"
	// UniqueRunning: a handler runs the job (or a priority worker holds
	// it).
	UniqueRunning UniqueState = "r"
)

// UniqueWhile is [Unique] limited to states: the key is held only while
// its job is in one of them. An enqueue that finds the holder in none of
// them (it started running, say, for UniqueWhile(key, ttl,
// UniqueWaiting, UniqueDelayed)) takes the key and stores its job. No
// states means all of them, as Unique.
func UniqueWhile(key string, ttl time.Duration, states ...UniqueState) EnqueueOption {
	unique := Unique(key, ttl)
	return func(o *EnqueueOptions) error {
		if err := unique(o); err != nil {
			return err
		}
		return setStates(o, "UniqueWhile", states)
	}
}

// UniqueByArgs is [UniqueWhile] with the key made of the job's kind and
// payload (a SHA-256 digest): a job whose kind and arguments equal those of
// a job that holds the key is a duplicate.
func UniqueByArgs(ttl time.Duration, states ...UniqueState) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if ttl < time.Millisecond {
			return configErr("UniqueByArgs ttl", "%s: use at least 1ms, longer than the job is expected to wait and run", ttl)
		}
		o.UniqueTTL, o.UniqueByArgs = ttl, true
		return setStates(o, "UniqueByArgs", states)
	}
}

// setStates sets o's unique states, checking each.
func setStates(o *EnqueueOptions, option string, states []UniqueState) error {
	for _, s := range states {
		switch s {
		case UniqueWaiting, UniqueDelayed, UniqueRunning:
		default:
			return configErr(option, "unknown state %q: use streamq.UniqueWaiting, UniqueDelayed or UniqueRunning", string(s))
		}
	}
	o.UniqueStates = append([]UniqueState(nil), states...)
	return nil
}

// argsKey returns the unique key of a job of kind with payload.
func argsKey(kind string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write(payload)
	return "args:" + hex.EncodeToString(h.Sum(nil))
}

// Throttle lets one job per window through: the first enqueue with key
// stores its job and holds the key for window; later ones within it write
// nothing and return the first job's ID with [ErrDuplicate]. The key is
// never released early (the job finishing does not end the window).
func Throttle(key string, window time.Duration) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if err := checkDedupKey("Throttle", key); err != nil {
			return err
		}
		if window < time.Millisecond {
			return configErr("Throttle window", "%s: use at least 1ms", window)
		}
		o.ThrottleKey, o.ThrottleWindow = key, window
		return nil
	}
}

// Debounce runs the job once enqueues with key have been quiet for quiet:
// the first enqueue stores a job due after quiet; a later one, while that
// job still waits, replaces its payload and headers and moves its start to
// quiet after now (by the server's clock), and returns its ID with a nil
// error. Once the job is due (it left the delayed set), the next enqueue
// starts a new job. Not allowed with [ProcessAt], [ProcessIn],
// [WithJobID] or EnqueueBatch.
func Debounce(key string, quiet time.Duration) EnqueueOption {
	return func(o *EnqueueOptions) error {
		if err := checkDedupKey("Debounce", key); err != nil {
			return err
		}
		if quiet < time.Millisecond {
			return configErr("Debounce quiet", "%s: use at least 1ms", quiet)
		}
		o.DebounceKey, o.DebounceQuiet = key, quiet
		return nil
	}
}

// checkDedupKey checks the key of a dedup option.
func checkDedupKey(option, key string) error {
	switch {
	case key == "":
		return configErr(option+" key", "is empty: use a key that identifies the work, e.g. \"report:7\"")
	case len(key) > MaxUniqueKeyLen:
		return configErr(option+" key", "is %d bytes long: use at most %d", len(key), MaxUniqueKeyLen)
	}
	return nil
}

// lock returns the dedup lock of o for a job of payload (Mode "": none),
// or an error for options that cannot go together.
func (o *EnqueueOptions) lock(payload []byte) (rdb.Lock, error) {
	var modes []string
	var l rdb.Lock
	if o.UniqueKey != "" && o.UniqueByArgs {
		return l, configErr("Unique and UniqueByArgs", "cannot be used together: choose one dedup mode per job")
	}
	if o.UniqueKey != "" || o.UniqueByArgs {
		modes = append(modes, "Unique")
		key := o.UniqueKey
		if o.UniqueByArgs {
			key = argsKey(o.Kind, payload)
		}
		l = rdb.Lock{Mode: rdb.LockUnique, Key: key, TTL: o.UniqueTTL}
		for _, s := range o.UniqueStates {
			l.States += string(s)
		}
	}
	if o.ThrottleKey != "" {
		modes = append(modes, "Throttle")
		l = rdb.Lock{Mode: rdb.LockThrottle, Key: o.ThrottleKey, TTL: o.ThrottleWindow}
	}
	if o.DebounceKey != "" {
		modes = append(modes, "Debounce")
		l = rdb.Lock{Mode: rdb.LockDebounce, Key: o.DebounceKey, TTL: o.DebounceQuiet}
		switch {
		case o.JobID != "":
			return l, configErr("Debounce", "cannot be used with WithJobID: a debounced job keeps the ID of the first enqueue")
		case !o.At.IsZero() || o.In > 0:
			return l, configErr("Debounce", "cannot be used with ProcessAt or ProcessIn: its quiet period is the delay")
		}
	}
	if len(modes) > 1 {
		return l, configErr(modes[0]+" and "+modes[1], "cannot be used together: choose one dedup mode per job")
	}
	return l, nil
}

// oneByOne names the option that makes a call enqueue one job at a time.
func (o *EnqueueOptions) oneByOne() string {
	switch {
	case o.JobID != "":
		return "WithJobID"
	case o.ThrottleKey != "":
		return "Throttle"
	case o.DebounceKey != "":
		return "Debounce"
	case o.UniqueByArgs:
		return "UniqueByArgs"
	}
	return "Unique"
}
