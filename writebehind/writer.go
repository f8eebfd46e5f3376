package writebehind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
)

// Headers of the stream entries a [Writer] appends (wire format version 1:
// the payload is the value, these go into the JSON "headers" field).
const (
	// HeaderKey holds the cache key of the change.
	HeaderKey = "wb-key"
	// HeaderOp holds the operation: [OpSet], [OpSetFields] or [OpDelete].
	HeaderOp = "wb-op"
	// HeaderVersion holds the change's version, a decimal integer from 1 to
	// math.MaxInt64 (2^63-1), written exactly (never in exponent notation).
	HeaderVersion = "wb-version"
)

// Values of [HeaderOp].
const (
	// OpSet stores the entry's payload as the key's value. The cache holds
	// it as a string.
	OpSet = "set"
	// OpSetFields stores the entry's payload, the fields of a hash encoded
	// by [EncodeFields], as the key's value (a [Change] with Hash set). The
	// cache holds it as a hash.
	OpSetFields = "hset"
	// OpDelete deletes the key; the entry's payload is empty.
	OpDelete = "del"
)

// Redis key parts of a [Writer], passed to [streamq.Queue.Key] so that they
// share the queue's hash tag.
const (
	// CacheKeyPrefix starts the part of the cache key of every key:
	// <prefix>:{<queue>}:cache:<key>.
	CacheKeyPrefix = "cache:"
	// VersionKeyPart names the per-queue version counter:
	// <prefix>:{<queue>}:wb:version.
	VersionKeyPart = "wb:version"
)

// WriterConfig configures a [Writer]. The zero value is valid: cache entries
// that never expire and no enqueue hooks.
type WriterConfig struct {
	// TTL makes cache entries, strings and hashes alike, expire this long
	// after their last Set or SetFields. An
	// expired entry is only gone from the cache: its row stays in the sink,
	// and the version counter is not affected, so later changes still get
	// newer versions. Must be 0 or at least 1 ms. Defaults to 0: cache
	// entries never expire.
	TTL time.Duration

	// Hooks run for every change appended to the stream, in order, like
	// streamq.ProducerConfig.Hooks (for example to propagate a trace
	// context). Hooks cannot change the wb-* headers: the writer sets them
	// again after the hooks ran. Defaults to none.
	Hooks []streamq.EnqueueHook
}

// Writer updates a Redis cache and records every update in a [streamq.Queue],
// for a consumer running a [Handler] to persist into a [Sink] later
// (write-behind). Each Set or Delete is one Lua script that assigns the
// change's version, appends the change to the queue's stream and updates the
// cache key, so a crash can never leave the cache changed without the change
// being queued, or the other way round.
//
// A key is cached as a Redis string ([Writer.Set], read with [Writer.Get]) or
// as a Redis hash ([Writer.SetFields], read with [Writer.GetFields]). Both
// replace the whole cache entry, whatever its type was, and take a version
// from the same counter, so a key may switch between the two: the sink ends
// with the newest.
//
// Versions come from one counter per queue (INCR on the key named by
// [VersionKeyPart]), so they are strictly increasing per key, are never
// reused, and survive cache expiry. They range from 1 to math.MaxInt64 and
// are handled exactly over the whole range (the script never turns them into
// Lua numbers); a counter at math.MaxInt64 makes writes fail. Do not delete
// the counter while the sink holds rows written through the queue: new
// changes would get lower versions than the stored rows and be ignored by
// the sink.
//
// A Writer is safe for concurrent use.
type Writer struct {
	q       *streamq.Queue
	p       *streamq.Producer
	ttl     time.Duration
	version string
	hooks   bool // whether enqueue hooks run (they might touch the wb-* headers)
}

// NewWriter returns a writer whose cache and change stream belong to q. cfg
// may be nil. It copies and validates cfg, and does not talk to Redis; the
// stream is created by the first change, the consumer group by
// [streamq.Queue.Setup] or the first [streamq.Consumer]. Create the group
// before writing, or from the start of the stream (the default), so that no
// change is skipped.
func NewWriter(q *streamq.Queue, cfg *WriterConfig) (*Writer, error) {
	if q == nil {
		return nil, &streamq.ConfigError{Field: "queue", Reason: "q is nil: create one with streamq.NewQueue"}
	}
	var c WriterConfig
	if cfg != nil {
		c = *cfg
		c.Hooks = slices.Clone(cfg.Hooks)
	}
	if c.TTL < 0 || (c.TTL > 0 && c.TTL < time.Millisecond) {
		return nil, &streamq.ConfigError{Field: "WriterConfig.TTL", Reason: fmt.Sprintf("%s: use 0 for cache entries that never expire, or at least 1ms", c.TTL)}
	}
	p, err := streamq.NewProducer(q, &streamq.ProducerConfig{Hooks: c.Hooks})
	if err != nil {
		// Only a nil hook can fail here; report it under this config's name.
		var ce *streamq.ConfigError
		if errors.As(err, &ce) {
			return nil, &streamq.ConfigError{Field: strings.Replace(ce.Field, "ProducerConfig", "WriterConfig", 1), Reason: ce.Reason}
		}
		return nil, err
	}
	return &Writer{q: q, p: p, ttl: c.TTL, version: q.Key(VersionKeyPart), hooks: len(c.Hooks) > 0}, nil
}

// Queue returns the writer's queue.
func (w *Writer) Queue() *streamq.Queue { return w.q }

// CacheKey returns the Redis key that caches key's value,
// <prefix>:{<queue>}:cache:<key>. It holds the value as a plain string
// (written by [Writer.Set]) or as a hash (written by [Writer.SetFields]).
func (w *Writer) CacheKey(key string) string { return w.q.Key(CacheKeyPrefix + key) }

// Set stores value as key's value in the cache and queues the change for the
// sink, in one atomic step, and returns the change's version.
//
// key must be non-empty valid UTF-8 without NUL bytes and at most
// [MaxKeyBytes] long, and value at most [MaxValueBytes] long, as a [Sink]
// requires; otherwise Set returns a [*ChangeError] without touching Redis.
// When the stream holds QueueConfig.MaxLen entries that the group has not
// acknowledged (after trimming acknowledged history), Set returns an error
// wrapping [streamq.ErrQueueFull] and changes nothing. On other errors (Redis
// unreachable, ctx cancelled) the change may or may not have been applied;
// calling Set again is safe: the retry gets a newer version.
func (w *Writer) Set(ctx context.Context, key string, value []byte) (version int64, err error) {
	if value == nil {
		value = []byte{}
	}
	return w.write(ctx, OpSet, key, value, nil)
}

// SetFields replaces key's cache entry with a Redis hash holding exactly
// fields (DEL, HSET, and PEXPIRE when WriterConfig.TTL is set) and queues the
// change for the sink, in one atomic step, and returns the change's version.
// Fields the entry had before and fields does not name are gone; to change
// one field, read the hash with [Writer.GetFields], modify it and write it
// back (the version orders concurrent writers: the sink keeps the newest
// whole hash, as the cache does).
//
// The change carries the fields as one value, their canonical JSON encoding
// (see [EncodeFields]; a [Change] with Hash set), which is what the sink
// stores: [SQLSink] puts it in its value column. Versions, coalescing,
// replays and deletes work exactly as for [Writer.Set].
//
// fields must not be empty (Redis cannot hold an empty hash; use
// [Writer.Delete] to remove a key), field names and values must be valid
// UTF-8, and their JSON encoding at most [MaxValueBytes] long; key is checked
// as in Set. Otherwise SetFields returns a [*ChangeError] without touching
// Redis. Other errors are as for Set.
func (w *Writer) SetFields(ctx context.Context, key string, fields map[string]string) (version int64, err error) {
	value, pairs, err := encodeHash(key, fields)
	if err != nil {
		return 0, err
	}
	return w.write(ctx, OpSetFields, key, value, pairs)
}

// encodeHash returns the canonical JSON of fields and the field/value
// arguments of HSET, sorted by field name, or a *ChangeError.
func encodeHash(key string, fields map[string]string) ([]byte, []any, error) {
	if len(fields) == 0 {
		return nil, nil, &ChangeError{Index: -1, Key: key, Reason: "the hash has no fields: Redis cannot cache an empty hash; use Delete to remove the key, or Set for an empty string value"}
	}
	value, err := EncodeFields(fields)
	if err != nil {
		return nil, nil, &ChangeError{Index: -1, Key: key, Reason: strings.TrimPrefix(err.Error(), ErrInvalidChange.Error()+": ")}
	}
	if len(value) > MaxValueBytes {
		return nil, nil, &ChangeError{Index: -1, Key: key, Reason: fmt.Sprintf("the %d fields encode to %d bytes of JSON: the limit is MaxValueBytes (%d); store fewer or smaller fields", len(fields), len(value), MaxValueBytes)}
	}
	names := slices.Sorted(maps.Keys(fields))
	pairs := make([]any, 0, 2*len(names))
	for _, name := range names {
		pairs = append(pairs, name, fields[name])
	}
	return value, pairs, nil
}

// Delete removes key from the cache and queues the deletion for the sink, in
// one atomic step, and returns the deletion's version. The sink keeps a
// tombstone with that version, so an older change replayed later cannot bring
// the key back. Deleting a key that is not cached still queues the deletion
// (its row may be in the sink). Errors are as for [Writer.Set].
func (w *Writer) Delete(ctx context.Context, key string) (version int64, err error) {
	return w.write(ctx, OpDelete, key, nil, nil)
}

// Get returns key's cached value, written by [Writer.Set]. found is false
// when the key is not in the cache: never set, deleted, or expired (see
// WriterConfig.TTL). The cache is not filled from the sink; on a miss read
// the sink yourself if needed. key is checked as in [Writer.Set]. A key
// cached as a hash is an error that says to use [Writer.GetFields].
func (w *Writer) Get(ctx context.Context, key string) (value []byte, found bool, err error) {
	if err := (Change{Key: key, Version: 1}).Validate(); err != nil {
		return nil, false, err
	}
	value, err = w.q.Client().Get(ctx, w.CacheKey(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if isWrongType(err) {
		return nil, false, fmt.Errorf("streamq: write-behind get %q from %s: the key is cached as a hash (written by SetFields), read it with GetFields: %w", key, w.CacheKey(key), err)
	}
	if err != nil {
		return nil, false, fmt.Errorf("streamq: write-behind get %q from %s: %w", key, w.CacheKey(key), err)
	}
	return value, true, nil
}

// GetFields returns the fields of key's cached hash, written by
// [Writer.SetFields]. found is false when the key is not in the cache, as for
// [Writer.Get]. A key cached as a string is an error that says to use
// [Writer.Get].
func (w *Writer) GetFields(ctx context.Context, key string) (fields map[string]string, found bool, err error) {
	if err := (Change{Key: key, Version: 1}).Validate(); err != nil {
		return nil, false, err
	}
	fields, err = w.q.Client().HGetAll(ctx, w.CacheKey(key)).Result()
	if isWrongType(err) {
		return nil, false, fmt.Errorf("streamq: write-behind get fields of %q from %s: the key is cached as a string (written by Set), read it with Get: %w", key, w.CacheKey(key), err)
	}
	if err != nil {
		return nil, false, fmt.Errorf("streamq: write-behind get fields of %q from %s: %w", key, w.CacheKey(key), err)
	}
	if len(fields) == 0 { // HGETALL of a missing key
		return nil, false, nil
	}
	return fields, true, nil
}

func isWrongType(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") }

// write runs scriptWrite for one change; hash holds the HSET field/value
// arguments of an OpSetFields change. When the stream is at its cap it trims
// acknowledged history once and tries again, then gives up with
// streamq.ErrQueueFull.
func (w *Writer) write(ctx context.Context, op, key string, value []byte, hash []any) (int64, error) {
	// Hash stays false: the JSON of a hash was just encoded by encodeHash,
	// so only the key and the size need checking here.
	if err := (Change{Key: key, Value: value, Deleted: op == OpDelete, Version: 1}).Validate(); err != nil {
		return 0, err
	}
	fields := w.p.EntryFields(ctx, value, map[string]string{HeaderKey: key, HeaderOp: op}, time.Now())
	if w.hooks {
		fields = ownHeaders(fields, key, op)
	}
	args := make([]any, 0, 4+len(fields)+len(hash))
	args = append(args, max(w.q.MaxLen(), 0), op, w.ttl.Milliseconds(), len(fields))
	args = append(args, fields...)
	args = append(args, hash...)
	keys := []string{w.q.StreamKey(), w.CacheKey(key), w.version}
	var (
		version int64
		err     error
	)
	for attempt := 0; ; attempt++ {
		version, err = parseVersion(scriptWrite.Run(ctx, w.q.Client(), keys, args...))
		if err == nil || !isQueueFull(err) || attempt > 0 {
			break
		}
		if n, terr := w.q.Trim(ctx); terr != nil || n == 0 {
			break
		}
	}
	if err != nil {
		return 0, w.writeError(op, key, err)
	}
	return version, nil
}

// parseVersion reads the reply of scriptWrite: the version as a decimal
// string.
func parseVersion(cmd *redis.Cmd) (int64, error) {
	s, err := cmd.Text()
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("the script returned version %q, want a positive integer", s)
	}
	return v, nil
}

// writeError wraps an error of scriptWrite: a full queue wraps
// streamq.ErrQueueFull, a counter that cannot be incremented says why.
func (w *Writer) writeError(op, key string, err error) error {
	switch {
	case isQueueFull(err):
		err = fmt.Errorf("%w (%s)", streamq.ErrQueueFull, strings.TrimPrefix(err.Error(), "QUEUEFULL "))
	case strings.HasPrefix(err.Error(), "VERSIONCOUNTER "):
		err = fmt.Errorf("version counter %s: %s (versions range from 1 to %d; nothing was queued)",
			w.version, strings.TrimPrefix(err.Error(), "VERSIONCOUNTER "), int64(math.MaxInt64))
	}
	return fmt.Errorf("streamq: write-behind %s %q on %s: %w", op, key, w.q.StreamKey(), err)
}

// ownHeaders resets the wb-* headers of entry fields after enqueue hooks ran:
// a hook cannot change the key or operation of a change, nor pre-empt the
// version that scriptWrite adds.
func ownHeaders(fields []any, key, op string) []any {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] != "headers" {
			continue
		}
		var raw []byte
		switch v := fields[i+1].(type) {
		case []byte:
			raw = v
		case string:
			raw = []byte(v)
		}
		h := map[string]string{}
		_ = json.Unmarshal(raw, &h) // written by json.Marshal of a map[string]string
		h[HeaderKey], h[HeaderOp] = key, op
		delete(h, HeaderVersion)
		b, _ := json.Marshal(h) // map[string]string always marshals
		fields[i+1] = b
	}
	return fields
}

func isQueueFull(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "QUEUEFULL") }

// scriptWrite applies one change to the cache and appends it to the stream.
//
// KEYS[1] the queue's stream
// KEYS[2] the cache key, <prefix>:{<queue>}:cache:<key>
// KEYS[3] the version counter, <prefix>:{<queue>}:wb:version
// ARGV[1] stream cap (0 or less: none); reaching it refuses, never trims
// ARGV[2] "set", "hset" or "del"
// ARGV[3] cache TTL in ms for "set" and "hset" (0: no expiry)
// ARGV[4] n, the number of stream entry arguments that follow
// ARGV[5..4+n] field/value arguments of the stream entry (wire format v1,
// from Producer.EntryFields); the "headers" field must be a non-empty JSON
// object, and "payload" is the value stored by "set"
// ARGV[5+n..] for "hset": the hash's field/value pairs (at least one)
//
// Returns the change's version as a decimal string. Errors with "QUEUEFULL
// ..." when the stream holds cap entries, before writing anything, and with
// "VERSIONCOUNTER ..." when the counter cannot be incremented (not an
// integer, or at 2^63-1) or is not positive after it. The writes are ordered
// so that a command failing half way (which Redis does not roll back) can
// leave at most an unused version number: INCR, then XADD, then the cache
// writes, which
// cannot fail: SET; DEL; or DEL, HSET and PEXPIRE of a key that DEL just
// removed, so it cannot have the wrong type (and once a script has written,
// Redis no longer refuses its writes for maxmemory). HSET gets at most 500
// pairs per call, since Lua's unpack is limited to a few thousand values.
//
// The version goes into the headers as "wb-version": it is appended last to
// the JSON object, so it wins over a hook that set the same header. The
// version is never a Lua number: INCR's reply is one (a double, exact only up
// to 2^53, and formatted as 1e+14 from 10^14 up), so the script reads the
// counter back with GET, whose reply is the exact decimal string, and returns
// that.
var scriptWrite = redis.NewScript(`
local cap = tonumber(ARGV[1])
if cap > 0 then
  local len = redis.call('XLEN', KEYS[1])
  if len >= cap then
    return redis.error_reply('QUEUEFULL stream length ' .. len .. ', cap ' .. cap)
  end
end
local incr = redis.pcall('INCR', KEYS[3])
if type(incr) == 'table' then
  return redis.error_reply('VERSIONCOUNTER ' .. incr.err)
end
local version = redis.call('GET', KEYS[3])
if incr < 1 then
  return redis.error_reply('VERSIONCOUNTER the counter is ' .. version .. ', not positive')
end
local last = 4 + tonumber(ARGV[4])
local fields = {}
local value = ''
for i = 5, last - 1, 2 do
  local name, val = ARGV[i], ARGV[i + 1]
  if name == 'headers' then
    val = string.sub(val, 1, -2) .. ',"wb-version":"' .. version .. '"}'
  elseif name == 'payload' then
    value = val
  end
  fields[#fields + 1] = name
  fields[#fields + 1] = val
end
redis.call('XADD', KEYS[1], '*', unpack(fields))
local op, ttl = ARGV[2], tonumber(ARGV[3])
if op == 'del' then
  redis.call('DEL', KEYS[2])
elseif op == 'hset' then
  redis.call('DEL', KEYS[2])
  local hargs = {}
  for i = last + 1, #ARGV - 1, 2 do
    hargs[#hargs + 1] = ARGV[i]
    hargs[#hargs + 1] = ARGV[i + 1]
    if #hargs >= 1000 then
      redis.call('HSET', KEYS[2], unpack(hargs))
      hargs = {}
    end
  end
  if #hargs > 0 then
    redis.call('HSET', KEYS[2], unpack(hargs))
  end
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
elseif ttl > 0 then
  redis.call('SET', KEYS[2], value, 'PX', ARGV[3])
else
  redis.call('SET', KEYS[2], value)
end
return version
`)
