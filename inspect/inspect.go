package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/rdb"
)

// DefaultScanLimit is the ScanLimit used when Options.ScanLimit is 0.
const DefaultScanLimit = 10_000

// Options configures an [Inspector]. The zero value (or nil) is valid.
type Options struct {
	// Prefix is the key prefix of the queues (QueueConfig.KeyPrefix).
	// Defaults to streamq.DefaultKeyPrefix.
	Prefix string
	// Group is the consumer group of stream queues (QueueConfig.Group):
	// which entries are waiting and which are running is read for it.
	// Defaults to streamq.DefaultGroup.
	Group string
	// ScanLimit is the most entries one filtered listing call (and one
	// CountDead call) examines. Defaults to DefaultScanLimit (10,000).
	ScanLimit int
}

// Inspector reads and controls the queues of one key prefix. It is safe for
// concurrent use; the caller owns the client.
type Inspector struct {
	rdb   redis.UniversalClient
	opts  Options
	queue string // registry key
	wb    string // write-behind registry key
}

// New returns an Inspector of the queues on client. It validates opts
// (which may be nil) and does not talk to Redis.
func New(client redis.UniversalClient, opts *Options) (*Inspector, error) {
	if client == nil {
		return nil, &streamq.ConfigError{Field: "client", Reason: "is nil: pass a redis.UniversalClient such as redis.NewClient(&redis.Options{Addr: \"127.0.0.1:6379\"})"}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = streamq.DefaultKeyPrefix
	}
	if o.Group == "" {
		o.Group = streamq.DefaultGroup
	}
	switch {
	case o.ScanLimit == 0:
		o.ScanLimit = DefaultScanLimit
	case o.ScanLimit < 1:
		return nil, &streamq.ConfigError{Field: "Options.ScanLimit", Reason: fmt.Sprintf("%d is negative: use a positive number of entries, or 0 for the default (%d)", o.ScanLimit, DefaultScanLimit)}
	}
	return &Inspector{rdb: client, opts: o, queue: rdb.Registry(o.Prefix), wb: rdb.WriteBehindRegistry(o.Prefix)}, nil
}

// Kind is the kind of a queue.
type Kind string

// Kinds of queues.
const (
	KindStream   Kind = "stream"   // a Redis stream with a consumer group
	KindPriority Kind = "priority" // a priority set (priority/)
)

// QueueInfo is one queue of the registry.
type QueueInfo struct {
	Name        string
	Kind        Kind
	Paused      bool
	WriteBehind bool // fed by a writebehind.Writer
}

// Queues returns every registered queue of the prefix, sorted by name.
// It reads the registry hash and one pipeline of paused flags.
func (in *Inspector) Queues(ctx context.Context) ([]QueueInfo, error) {
	pipe := in.rdb.Pipeline()
	reg := pipe.HGetAll(ctx, in.queue)
	wb := pipe.HGetAll(ctx, in.wb)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("inspect: read the registry %s: %w", in.queue, err)
	}
	names := make([]string, 0, len(reg.Val()))
	for n := range reg.Val() {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]QueueInfo, len(names))
	paused := make([]*redis.IntCmd, len(names))
	pipe = in.rdb.Pipeline()
	for i, n := range names {
		out[i] = QueueInfo{Name: n, Kind: Kind(reg.Val()[n]), WriteBehind: wb.Val()[n] != ""}
		paused[i] = pipe.Exists(ctx, rdb.NewKeys(in.opts.Prefix, n).Paused)
	}
	if len(names) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("inspect: read paused flags: %w", err)
		}
	}
	for i := range out {
		out[i].Paused = paused[i].Val() == 1
	}
	return out, nil
}

// Queue returns the registered queue called name, or a [*NotFoundError]
// (errors.Is [ErrQueueNotFound]) that lists the registered names close to it.
func (in *Inspector) Queue(ctx context.Context, name string) (*Queue, error) {
	kind, err := in.rdb.HGet(ctx, in.queue, name).Result()
	if errors.Is(err, redis.Nil) {
		names, err := in.rdb.HKeys(ctx, in.queue).Result()
		if err != nil {
			return nil, fmt.Errorf("inspect: read the registry %s: %w", in.queue, err)
		}
		return nil, &NotFoundError{What: "queue", Name: name, Similar: similar(name, names)}
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: read the registry %s: %w", in.queue, err)
	}
	return in.newQueue(name, Kind(kind)), nil
}

func (in *Inspector) newQueue(name string, kind Kind) *Queue {
	if kind != KindPriority {
		kind = KindStream
	}
	db := rdb.New(in.rdb, rdb.Config{Prefix: in.opts.Prefix, Name: name, Group: in.opts.Group})
	return &Queue{in: in, name: name, kind: kind, db: db, keys: db.Keys(), pkeys: db.Priority().Keys()}
}

// Queue reads and controls one queue. It is cheap and safe for concurrent
// use.
type Queue struct {
	in    *Inspector
	name  string
	kind  Kind
	db    *rdb.Queue // the queue's scripts
	keys  rdb.Keys
	pkeys rdb.PriorityKeys
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Kind returns the queue's kind.
func (q *Queue) Kind() Kind { return q.kind }

func (q *Queue) rdb() redis.UniversalClient { return q.in.rdb }
