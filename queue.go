package streamq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
)

// Queue defaults.
const (
	// DefaultGroup is the consumer group used when QueueConfig.Group is empty.
	DefaultGroup = "workers"
	// DefaultKeyPrefix is the key prefix used when QueueConfig.KeyPrefix is empty.
	DefaultKeyPrefix = "streamq"
	// DefaultMaxLen is the stream cap used when QueueConfig.MaxLen is 0.
	DefaultMaxLen = 1_000_000
	// DefaultMaxPayloadBytes is the payload limit used when
	// QueueConfig.MaxPayloadBytes is 0: 16 MiB.
	DefaultMaxPayloadBytes = 16 << 20
	// DefaultMaxHeaderBytes is the header limit used when
	// QueueConfig.MaxHeaderBytes is 0: 64 KiB.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultDoneRetention is how long a finished job with a chosen ID
	// keeps its ID taken when QueueConfig.DoneRetention is 0.
	DefaultDoneRetention = 24 * time.Hour
	// DefaultCompletedMax is the most completed jobs a queue that keeps
	// them (QueueConfig.CompletedRetention) keeps when
	// QueueConfig.CompletedMax is 0.
	DefaultCompletedMax = 10_000
	// CompletedPayloadMax is the largest payload the record of a completed
	// job keeps, in bytes; a larger one is recorded by its size only.
	CompletedPayloadMax = 1024
	// MaxNameLen is the longest accepted name of a queue, group, key
	// prefix, consumer or worker, in bytes.
	MaxNameLen = 200
)

// QueueConfig configures a [Queue]. The zero value is valid.
type QueueConfig struct {
	// Group is the consumer group every [Consumer] of this queue reads with.
	// Defaults to DefaultGroup.
	Group string

	// KeyPrefix starts every Redis key of the queue. Defaults to DefaultKeyPrefix.
	KeyPrefix string

	// MaxLen caps the jobs a group has not acknowledged (pending or not yet
	// delivered) at this many: Enqueue, EnqueueBatch, the write-behind
	// Writer and the periodic scheduler return [ErrQueueFull] instead of
	// adding one more (due delayed jobs and retries, and requeued dead
	// letters, are let in). The cap never deletes an entry that a group has
	// not acknowledged: to keep the stream near MaxLen entries, acknowledged
	// history is trimmed (XTRIM MINID below the oldest unacknowledged entry,
	// and XDEL of acknowledged entries behind an older pending one, such as a
	// long job), a bounded part per call, so the stream may hold more for a
	// while. Defaults to DefaultMaxLen; -1 disables the cap (and history
	// trimming).
	MaxLen int64

	// MaxPayloadBytes is the largest payload a job of this queue may carry:
	// Enqueue, EnqueueBatch, priority pushes, write-behind changes and
	// periodic jobs with a larger one fail with an error wrapping
	// [ErrTooLarge] and write nothing. It bounds what a consumer holds in
	// memory for one job. Defaults to DefaultMaxPayloadBytes (16 MiB); -1
	// disables the limit (Redis still refuses values above its
	// proto-max-bulk-len, 512 MB by default).
	MaxPayloadBytes int64

	// MaxHeaderBytes is the largest size of a job's headers, the bytes of
	// every key and value after the enqueue hooks ran; larger headers fail as
	// for MaxPayloadBytes. Defaults to DefaultMaxHeaderBytes (64 KiB); -1
	// disables the limit.
	MaxHeaderBytes int64

	// DeadLetterMaxLen is the retention of the dead-letter stream. Defaults to 0,
	// which keeps every dead letter until it is requeued or purged (see
	// [DeadLetters]). A positive value caps the dead-letter stream at about
	// that many entries, dropping the oldest: an explicit choice to lose them.
	DeadLetterMaxLen int64

	// DoneRetention is how long a job enqueued with [WithJobID] keeps its
	// ID taken after it finished: an enqueue of the same ID within it
	// returns [ErrDuplicate], so a producer that sends a job again (an
	// outbox relay after a crash) cannot run it twice. Each such job leaves
	// a small key (its done marker) for this long; jobs with generated IDs
	// leave none. Defaults to DefaultDoneRetention (24 h); -1 keeps no done
	// markers (the ID is free again as soon as the job finished).
	DoneRetention time.Duration

	// CompletedRetention, when positive, makes the consumers of this queue
	// record every job that succeeded, for this long, so that operators can
	// list completed jobs (inspect, streamq jobs --state completed, the
	// dashboard's Completed tab) and find one by ID. A record holds the
	// job's stable ID, kind, enqueue time, the start and end of its
	// successful run (Redis's clock), its attempt number, its payload's size
	// and the payload itself when it is at most [CompletedPayloadMax] bytes;
	// not its headers. The acknowledgement writes it in the same script
	// and deletes expired records and those beyond CompletedMax, a bounded
	// number per call, so records may outlive the retention for a moment
	// after a burst. It is the consumer's setting: give every consumer of
	// the queue the same one (the last to start notes it for the
	// inspector). Defaults to 0: no records, and an acknowledgement that
	// costs nothing more. Not kept for priority queues.
	CompletedRetention time.Duration

	// CompletedMax caps the records of completed jobs (see
	// CompletedRetention): the oldest beyond it are deleted. Each record
	// takes about 300 bytes of Redis memory plus its payload (see
	// docs/operations.md). Defaults to DefaultCompletedMax (10,000) when
	// CompletedRetention is set; -1 removes the cap. Setting it without
	// CompletedRetention is an error.
	CompletedMax int64
}

// Queue is a named job queue on one Redis stream, with its consumer group,
// dead-letter stream and delayed set. All of its keys share one Redis Cluster
// hash tag, "{name}", so multi-key scripts work on a cluster.
//
// A Queue is cheap, immutable and safe for concurrent use.
type Queue struct {
	handle // the state shared with streamq's other packages (internal/core)
	client redis.UniversalClient
	db     *rdb.Queue // the queue's Redis calls
	name   string
	group  string
	cfg    QueueConfig
	keys   rdb.Keys
}

// handle gives sibling packages of streamq the queue's state without an
// exported method: see internal/core.
type handle = core.Handle

// NewQueue returns the queue called name on rdb. It validates the name and the
// configuration (cfg may be nil) but does not talk to Redis: call [Queue.Setup]
// or let a [Consumer] create the group. client may be a standalone, Sentinel
// (failover) or Cluster client; the caller owns it and closes it.
func NewQueue(client redis.UniversalClient, name string, cfg *QueueConfig) (*Queue, error) {
	if client == nil {
		return nil, configErr("client", "rdb is nil: pass a redis.UniversalClient such as redis.NewClient(&redis.Options{Addr: \"127.0.0.1:6379\"})")
	}
	var c QueueConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = DefaultKeyPrefix
	}
	if c.MaxLen == 0 {
		c.MaxLen = DefaultMaxLen
	}
	if err := validName("queue name", name); err != nil {
		return nil, err
	}
	if err := validName("QueueConfig.Group", c.Group); err != nil {
		return nil, err
	}
	if err := validName("QueueConfig.KeyPrefix", c.KeyPrefix); err != nil {
		return nil, err
	}
	if c.MaxLen < -1 {
		return nil, configErr("QueueConfig.MaxLen", "%d is negative: use a positive cap, 0 for the default (%d) or -1 for no cap", c.MaxLen, DefaultMaxLen)
	}
	for _, f := range []struct {
		name string
		v    *int64
		def  int64
	}{
		{"MaxPayloadBytes", &c.MaxPayloadBytes, DefaultMaxPayloadBytes},
		{"MaxHeaderBytes", &c.MaxHeaderBytes, DefaultMaxHeaderBytes},
	} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < -1:
			return nil, configErr("QueueConfig."+f.name, "%d is negative: use a positive number of bytes, 0 for the default (%d) or -1 for no limit", *f.v, f.def)
		}
	}
	if c.DeadLetterMaxLen < 0 {
		return nil, configErr("QueueConfig.DeadLetterMaxLen", "%d is negative: use 0 to keep every dead letter, or a positive cap", c.DeadLetterMaxLen)
	}
	switch {
	case c.DoneRetention == 0:
		c.DoneRetention = DefaultDoneRetention
	case c.DoneRetention < time.Millisecond && c.DoneRetention != -1:
		return nil, configErr("QueueConfig.DoneRetention", "%s: use at least 1ms, 0 for the default (%s) or -1 for none", c.DoneRetention, DefaultDoneRetention)
	}
	if err := c.completed(); err != nil {
		return nil, err
	}
	db := rdb.New(client, rdb.Config{Prefix: c.KeyPrefix, Name: name, Group: c.Group, MaxLen: c.MaxLen, DeadLetterMaxLen: c.DeadLetterMaxLen, DoneRetention: c.DoneRetention,
		Completed: rdb.CompletedConfig{Retention: c.CompletedRetention, Max: c.CompletedMax}})
	q := &Queue{client: client, db: db, name: name, group: c.Group, cfg: c, keys: db.Keys()}
	q.handle = core.NewHandle(&core.Queue{
		DB:               db,
		RDB:              client,
		Name:             name,
		Group:            c.Group,
		Prefix:           c.KeyPrefix,
		Keys:             q.keys,
		MaxLen:           c.MaxLen,
		MaxPayloadBytes:  c.MaxPayloadBytes,
		MaxHeaderBytes:   c.MaxHeaderBytes,
		DeadLetterMaxLen: c.DeadLetterMaxLen,
		NewEngine:        newEngine,
		MessageOpts:      messageOpts,
		Defaults:         runDefaults(),
	})
	return q, nil
}

// completed checks and defaults the retention of completed jobs.
func (c *QueueConfig) completed() error {
	switch {
	case c.CompletedRetention < 0 || c.CompletedRetention > 0 && c.CompletedRetention < time.Millisecond:
		return configErr("QueueConfig.CompletedRetention", "%s: use at least 1ms, or 0 to keep no completed jobs", c.CompletedRetention)
	case c.CompletedRetention == 0 && c.CompletedMax != 0:
		return configErr("QueueConfig.CompletedMax", "%d without CompletedRetention: set CompletedRetention to keep completed jobs, or leave CompletedMax 0", c.CompletedMax)
	case c.CompletedMax < -1:
		return configErr("QueueConfig.CompletedMax", "%d is negative: use a positive cap, 0 for the default (%d) or -1 for no cap", c.CompletedMax, DefaultCompletedMax)
	case c.CompletedRetention > 0 && c.CompletedMax == 0:
		c.CompletedMax = DefaultCompletedMax
	}
	return nil
}

// validName accepts 1..MaxNameLen bytes of printable ASCII without spaces or
// braces (braces would break the Cluster hash tag).
func validName(what, s string) error {
	if p := core.NameProblem(s, ""); p != "" {
		return configErr(what, "%s", p)
	}
	return nil
}

// Name returns the queue name.
func (q *Queue) Name() string { return q.name }

// Group returns the consumer group name.
func (q *Queue) Group() string { return q.group }

// Setup creates the stream and the consumer group if they do not exist. It is
// idempotent. A new group starts at the beginning of the stream, so jobs
// enqueued before the group existed are not skipped. When the group exists
// Setup only reads (XINFO GROUPS), so it works while Redis is at maxmemory,
// where XGROUP CREATE is refused even for a group that exists.
func (q *Queue) Setup(ctx context.Context) error {
	if err := q.setupGroup(ctx); err != nil {
		return err
	}
	return q.register(ctx)
}

// setupGroup is Setup without the registry.
func (q *Queue) setupGroup(ctx context.Context) error {
	groups, err := q.client.XInfoGroups(ctx, q.keys.Stream).Result()
	if err == nil {
		for _, g := range groups {
			if g.Name == q.group {
				return nil
			}
		}
	}
	err = q.client.XGroupCreateMkStream(ctx, q.keys.Stream, q.group, "0").Err()
	if err != nil && !rdb.IsBusyGroup(err) {
		return fmt.Errorf("streamq: create group %s on %s: %w", q.group, q.keys.Stream, err)
	}
	return nil
}

// register records the queue in the registry of its key prefix, which
// tools read to find queues without scanning keys. At maxmemory the write
// is refused; that is no reason to fail (a later Setup registers it).
func (q *Queue) register(ctx context.Context) error {
	err := q.db.Register(ctx, rdb.KindStream)
	if err != nil && !rdb.IsOOM(err) {
		return fmt.Errorf("streamq: register queue %s: %w", q.name, err)
	}
	return nil
}

// Trim deletes acknowledged history from the stream: every entry the group
// has acknowledged, also those behind an older job still pending (a long
// job), which it deletes one by one. It never deletes a job that is waiting
// or running. It returns the number of entries deleted. It makes as many
// script calls as it takes, each of bounded work, so Redis is not blocked by
// a long history.
func (q *Queue) Trim(ctx context.Context) (int64, error) {
	n, err := q.db.Trim(ctx)
	if err != nil {
		return 0, fmt.Errorf("streamq: trim %s: %w", q.keys.Stream, err)
	}
	return n, nil
}

// QueueStats is a snapshot of a queue's state.
type QueueStats struct {
	Length      int64 // entries in the stream, including acknowledged history
	Pending     int64 // delivered to a consumer and not yet acknowledged
	Lag         int64 // entries not yet delivered to the group (-1 if Redis cannot tell)
	Delayed     int64 // jobs waiting in the delayed set (scheduled or retrying)
	DeadLetters int64 // entries in the dead-letter stream
	Consumers   int64 // consumers known to the group
	// OldestWaiting is the age of the oldest job not yet delivered to the
	// group (from its entry ID, the time it entered the stream), 0 when
	// none waits.
	OldestWaiting time.Duration
}

// Stats reads the queue's counters in one round trip, and a second one
// (one XRANGE of one entry) when jobs wait, for OldestWaiting.
func (q *Queue) Stats(ctx context.Context) (QueueStats, error) {
	var s QueueStats
	pipe := q.client.Pipeline()
	xlen := pipe.XLen(ctx, q.keys.Stream)
	groups := pipe.XInfoGroups(ctx, q.keys.Stream)
	delayed := pipe.ZCard(ctx, q.keys.Delayed)
	dead := pipe.XLen(ctx, q.keys.Dead)
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) && !rdb.IsNoSuchKey(err) {
		return s, fmt.Errorf("streamq: stats %s: %w", q.name, err)
	}
	s.Length = xlen.Val()
	s.Delayed = delayed.Val()
	s.DeadLetters = dead.Val()
	s.Lag = -1
	last := ""
	for _, g := range groups.Val() {
		if g.Name == q.group {
			s.Pending = g.Pending
			s.Lag = g.Lag
			s.Consumers = g.Consumers
			last = g.LastDeliveredID
		}
	}
	if s.Lag != 0 && s.Length > 0 {
		from := "-"
		if last != "" && last != "0-0" {
			from = "(" + last
		}
		es, err := q.client.XRangeN(ctx, q.keys.Stream, from, "+", 1).Result()
		if err != nil {
			return s, fmt.Errorf("streamq: stats %s: %w", q.name, err)
		}
		if len(es) == 1 {
			if ms, err := strconv.ParseInt(strings.SplitN(es[0].ID, "-", 2)[0], 10, 64); err == nil {
				s.OldestWaiting = max(q.db.Now().Sub(time.UnixMilli(ms)), 0)
			}
		}
	}
	return s, nil
}

// CancelDelayed removes a delayed job (one enqueued with [ProcessAt] or
// [ProcessIn], or waiting for a retry) before it is due, given its ID (the
// one Enqueue returned), and releases its [Unique] key. It reports false
// when the job was not waiting in the delayed set: it is in the stream
// already, ran, or never existed. To cancel a job in any state, waiting or
// running too, use the inspect package (inspect.Queue.Cancel) or the
// streamq cancel command.
func (q *Queue) CancelDelayed(ctx context.Context, id string) (bool, error) {
	member, err := q.db.DelayedMember(ctx, id)
	if err != nil {
		return false, fmt.Errorf("streamq: cancel %s: %w", id, err)
	}
	key, token, found, err := q.db.DelayedKey(ctx, member)
	if err != nil {
		return false, fmt.Errorf("streamq: cancel %s: %w", id, err)
	}
	if !found {
		return false, nil
	}
	ok, err := q.db.Cancel(ctx, rdb.CancelParams{ID: member, JobID: id, Key: key, Token: token})
	if err != nil {
		return false, fmt.Errorf("streamq: cancel %s: %w", id, err)
	}
	return ok, nil
}

// Cancel is [Queue.CancelDelayed]: it removes only delayed jobs.
//
// Deprecated: use CancelDelayed, whose name says what it cancels (the
// inspect package cancels jobs in every state).
func (q *Queue) Cancel(ctx context.Context, id string) (bool, error) {
	return q.CancelDelayed(ctx, id)
}
