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
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
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
	// HeaderIssued holds Change.Issued: the Redis server's clock when the
	// script assigned the version, in microseconds since the Unix epoch, as
	// a decimal integer. Entries queued before writers set it have none.
	HeaderIssued = "wb-issued"
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

// Redis key parts of a [Writer], after the queue's "<prefix>:{<queue>}:", so
// that they share the queue's hash tag.
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

	// MinReplicas makes every Set, SetFields and Delete wait until that
	// many replicas got the change (WAIT after the write, on the same
	// connection), as streamq.ProducerConfig.MinReplicas does for jobs:
	// when fewer acknowledge within ReplicaTimeout, the change is sent
	// again for up to ReplicaRetry, and then the call returns the
	// change's version with an error wrapping [streamq.ErrNotReplicated].
	// Calling it again is safe: the retry gets a newer version. Defaults
	// to 0: return as soon as the master stored the change.
	MinReplicas int

	// ReplicaTimeout bounds the wait for MinReplicas; it must be shorter
	// than the client's ReadTimeout. Defaults to
	// streamq.DefaultReplicaTimeout.
	ReplicaTimeout time.Duration

	// ReplicaRetry is how long, with MinReplicas, a change that was not
	// replicated (or failed as writes do during a failover) keeps being
	// sent again, as streamq.ProducerConfig.ReplicaRetry says; -1
	// disables it. Defaults to streamq.DefaultReplicaRetry.
	ReplicaRetry time.Duration
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
// Lua numbers); a counter at math.MaxInt64 makes writes fail. Each change
// also records the Redis clock when it got its version (Change.Issued), so a
// counter that goes backwards (deleted, evicted, or a failover to a replica
// that missed increments) cannot make the sink drop later changes silently:
// it refuses them with [ErrVersionRegressed]. Raise the counter with
// [Writer.EnsureVersionAtLeast] and repair the refused keys with
// [Writer.Resync], or let a [Handler] do both (HandlerConfig.Writer).
//
// A Writer is safe for concurrent use.
type Writer struct {
	q       *streamq.Queue
	p       *streamq.Producer
	ttl     time.Duration
	version string
	hooks   bool // whether enqueue hooks run (they might touch the wb-* headers)
	rep     rdb.Replicas
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
	p, err := streamq.NewProducer(q, &streamq.ProducerConfig{Hooks: c.Hooks, MinReplicas: c.MinReplicas, ReplicaTimeout: c.ReplicaTimeout, ReplicaRetry: c.ReplicaRetry})
	if err != nil {
		// Only a nil hook or a bad replica setting can fail here; report
		// it under this config's name.
		var ce *streamq.ConfigError
		if errors.As(err, &ce) {
			return nil, &streamq.ConfigError{Field: strings.Replace(ce.Field, "ProducerConfig", "WriterConfig", 1), Reason: ce.Reason}
		}
		return nil, err
	}
	if c.ReplicaTimeout == 0 {
		c.ReplicaTimeout = streamq.DefaultReplicaTimeout
	}
	if c.ReplicaRetry == 0 {
		c.ReplicaRetry = streamq.DefaultReplicaRetry
	}
	// The writer's writes record the queue in the write-behind registry
	// too (read by the inspect package).
	core.OfProducer(p).WriteBehind = true
	return &Writer{q: q, p: p, ttl: c.TTL, version: core.Of(q).Keys.Part(VersionKeyPart), hooks: len(c.Hooks) > 0,
		rep: rdb.Replicas{N: c.MinReplicas, Timeout: c.ReplicaTimeout, Retry: max(c.ReplicaRetry, 0)}}, nil
}

// Queue returns the writer's queue.
func (w *Writer) Queue() *streamq.Queue { return w.q }

// CacheKey returns the Redis key that caches key's value,
// <prefix>:{<queue>}:cache:<key>. It holds the value as a plain string
// (written by [Writer.Set]) or as a hash (written by [Writer.SetFields]).
func (w *Writer) CacheKey(key string) string { return core.Of(w.q).Keys.Part(CacheKeyPrefix + key) }

// VersionKey returns the Redis key of the writer's version counter,
// <prefix>:{<queue>}:wb:version (see [Writer.EnsureVersionAtLeast]).
func (w *Writer) VersionKey() string { return w.version }

// Set stores value as key's value in the cache and queues the change for the
// sink, in one atomic step, and returns the change's version.
//
// key must be non-empty valid UTF-8 without NUL bytes and at most
// [MaxKeyBytes] long, and value at most [MaxValueBytes] long, as a [Sink]
// requires; otherwise Set returns a [*ChangeError] without touching Redis.
// The queue's limits apply too: a value above QueueConfig.MaxPayloadBytes, or
// headers from the enqueue hooks above MaxHeaderBytes or not valid UTF-8,
// return an error wrapping [streamq.ErrTooLarge] or
// [streamq.ErrInvalidHeader] without touching Redis.
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
	value, err = core.Of(w.q).RDB.Get(ctx, w.CacheKey(key)).Bytes()
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
	fields, err = core.Of(w.q).RDB.HGetAll(ctx, w.CacheKey(key)).Result()
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

func isWrongType(err error) bool { return redis.HasErrorPrefix(err, "WRONGTYPE") }

// write runs the write script (internal/rdb) for one change; hash holds the HSET field/value
// arguments of an OpSetFields change. The script applies the queue's cap as
// Enqueue does (trimming acknowledged history), and refuses with
// streamq.ErrQueueFull when MaxLen jobs are unacknowledged.
func (w *Writer) write(ctx context.Context, op, key string, value []byte, hash []any) (int64, error) {
	p, err := w.prepare(ctx, op, key, value, hash)
	if err != nil {
		return 0, err
	}
	// One memo per call (a fresh one: a refusal is not remembered).
	version, err := parseVersion(core.Of(w.q).DB.Write(ctx, p))
	if err != nil {
		return version, w.writeError(op, key, err)
	}
	// Records the queue in the write-behind registry and the queue
	// registry of its key prefix, once per Writer.
	core.OfProducer(w.p).Register(ctx)
	return version, nil
}

// prepare checks a change and returns the call of the write script
// (internal/rdb) for it.
func (w *Writer) prepare(ctx context.Context, op, key string, value []byte, hash []any) (*rdb.WriteParams, error) {
	// Hash stays false: the JSON of a hash was just encoded by encodeHash,
	// so only the key and the size need checking here.
	if err := (Change{Key: key, Value: value, Deleted: op == OpDelete, Version: 1}).Validate(); err != nil {
		return nil, err
	}
	cq := core.Of(w.q)
	entry := wire.Job{Payload: value, Headers: core.OfProducer(w.p).Headers(ctx, map[string]string{HeaderKey: key, HeaderOp: op}, nil), EnqMillis: cq.DB.Now().UnixMilli()}
	if err := cq.CheckJob(entry.Payload, entry.Headers); err != nil {
		return nil, fmt.Errorf("streamq: write-behind %s %q: %w", op, key, err)
	}
	fields := entry.Args()
	if w.hooks {
		fields = ownHeaders(fields, key, op)
	}
	return &rdb.WriteParams{CacheKey: w.CacheKey(key), VersionKey: w.version, Op: op, TTL: w.ttl,
		Fields: fields, Hash: hash, Replicas: w.rep}, nil
}

// parseVersion reads the reply of the write script: the version as a
// decimal string. With [streamq.ErrNotReplicated] it returns the version
// too.
func parseVersion(s string, err error) (int64, error) {
	if err != nil && (s == "" || !errors.Is(err, streamq.ErrNotReplicated)) {
		return 0, err
	}
	if err != nil {
		v, _ := strconv.ParseInt(s, 10, 64)
		return v, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("the script returned version %q, want a positive integer", s)
	}
	return v, nil
}

// writeError wraps an error of the write script (internal/rdb): a full queue wraps
// streamq.ErrQueueFull, a counter that cannot be incremented says why.
func (w *Writer) writeError(op, key string, err error) error {
	switch {
	case errors.Is(err, streamq.ErrQueueFull):
	default:
		if reason, ok := rdb.IsVersionCounter(err); ok {
			err = fmt.Errorf("version counter %s: %s (versions range from 1 to %d; nothing was queued)",
				w.version, reason, int64(math.MaxInt64))
		}
	}
	return fmt.Errorf("streamq: write-behind %s %q on %s: %w", op, key, core.Of(w.q).Keys.Stream, err)
}

// EnsureVersionAtLeast raises the writer's version counter to v if it is
// lower (or missing), in one atomic step, so that every later change gets a
// version above v. It returns the counter's value before the call (0 when it
// did not exist); the counter was raised when previous < v. v must not be
// negative; v = 0 only reads the counter (creating it at 0 when missing).
//
// Use it after the counter was lost or went backwards, with v the sink's
// highest version (see [SQLSink.MaxVersion] and [ErrVersionRegressed]), or
// to seed the counter high, for example from a microsecond clock
// (time.Now().UnixMicro() is about 1.8e15, far below the math.MaxInt64
// limit of versions). Raising the counter never harms: versions only need to
// increase. A counter holding something other than an integer is an error,
// and is left as it is.
func (w *Writer) EnsureVersionAtLeast(ctx context.Context, v int64) (previous int64, err error) {
	if v < 0 {
		return 0, fmt.Errorf("streamq: write-behind raise version counter %s to %d: versions are positive; pass the sink's highest version, or 0 to read the counter", w.version, v)
	}
	previous, err = core.Of(w.q).DB.EnsureVersion(ctx, rdb.EnsureVersionParams{Key: w.version, Floor: v})
	if err != nil {
		return 0, fmt.Errorf("streamq: write-behind raise version counter %s to %d: %w", w.version, v, err)
	}
	return previous, nil
}

// maxResyncAttempts bounds the optimistic transactions of one Resync when
// other writers keep changing the key.
const maxResyncAttempts = 5

// Resync queues key's current cache entry for the sink again, with a new
// version, as if it had just been written with [Writer.Set] or
// [Writer.SetFields] (a string or a hash, whichever the cache holds; the TTL
// is set again as those would). It reads the entry and queues it in one
// optimistic transaction (WATCH on the cache key, then the write script in
// MULTI), so it never queues a value that a newer write replaced. It returns
// the new version, or found false when the key is not cached, and then
// changes nothing: an entry that is missing may have been deleted, expired or
// evicted, and only the caller can tell which (call [Writer.Delete] if it was
// deleted). When other writes keep changing the key during Resync, each of
// them queued the key with a newer version itself: after a few attempts
// Resync stops and returns version 0 (and whether the key is cached).
//
// Use it to repair keys whose changes a sink refused with
// [ErrVersionRegressed], after raising the counter with
// [Writer.EnsureVersionAtLeast]; the cache holds their newest value. It
// changes the cache only in what Set or SetFields would (the TTL), and errors
// are as for them; an entry of another type than a string or a hash is an
// error.
func (w *Writer) Resync(ctx context.Context, key string) (version int64, found bool, err error) {
	if err := (Change{Key: key, Version: 1}).Validate(); err != nil {
		return 0, false, err
	}
	ck := w.CacheKey(key)
	for attempt := 1; ; attempt++ {
		err := core.Of(w.q).RDB.Watch(ctx, func(tx *redis.Tx) error {
			var err error
			version, found, err = w.resyncTx(ctx, tx, key, ck)
			return err
		}, ck)
		switch {
		case err == nil:
			return version, found, nil
		case errors.Is(err, redis.TxFailedErr) && attempt < maxResyncAttempts:
			continue // the key changed (or expired): read it again
		case errors.Is(err, redis.TxFailedErr):
			// The writes that keep changing the key queue it themselves.
			n, err := core.Of(w.q).RDB.Exists(ctx, ck).Result()
			if err != nil {
				return 0, false, w.writeError("resync", key, err)
			}
			return 0, n > 0, nil
		}
		return 0, false, w.writeError("resync", key, err)
	}
}

// resyncTx is one attempt of Resync, inside WATCH of the cache key ck.
func (w *Writer) resyncTx(ctx context.Context, tx *redis.Tx, key, ck string) (int64, bool, error) {
	typ, err := tx.Type(ctx, ck).Result()
	if err != nil {
		return 0, false, err
	}
	var (
		op    string
		value []byte
		pairs []any
	)
	switch typ {
	case "none":
		return 0, false, nil
	case "string":
		op = OpSet
		if value, err = tx.Get(ctx, ck).Bytes(); err != nil {
			return 0, false, err // redis.Nil if it expired meanwhile: EXEC would fail anyway
		}
	case "hash":
		op = OpSetFields
		fields, err := tx.HGetAll(ctx, ck).Result()
		if err != nil {
			return 0, false, err
		}
		if value, pairs, err = encodeHash(key, fields); err != nil {
			return 0, false, err
		}
	default:
		return 0, false, fmt.Errorf("the cache key %s holds a %s, not a string or hash written by a Writer", ck, typ)
	}
	p, err := w.prepare(ctx, op, key, value, pairs)
	if err != nil {
		return 0, false, err
	}
	var cmd *redis.Cmd
	if _, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		cmd = core.Of(w.q).DB.WriteInTx(ctx, pipe, p)
		return nil
	}); err != nil {
		return 0, false, rdb.Translate(err)
	}
	v, err := parseVersion(cmd.Text())
	return v, true, rdb.Translate(err)
}

// ownHeaders resets the wb-* headers of entry fields after enqueue hooks ran:
// a hook cannot change the key or operation of a change, nor pre-empt the
// version and issue time that the write script (internal/rdb) adds.
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
		delete(h, HeaderIssued)
		b, _ := json.Marshal(h) // map[string]string always marshals
		fields[i+1] = b
	}
	return fields
}
