package streamq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
)

// Partition defaults and limits.
const (
	// MaxPartitions is the most partitions a [PartitionedQueue] may have.
	MaxPartitions = rdb.MaxPartitions
	// DefaultPartitionRefresh is how often partitioned producers and
	// workers read the queue's layout again when
	// PartitionedQueueConfig.Refresh is 0.
	DefaultPartitionRefresh = time.Second
	// DefaultDrainGrace is how long after a change of the number of
	// partitions [PartitionedQueue.FinishDrain] waits before it may stop
	// the reading of the partitions that were dropped, when
	// PartitionedQueueConfig.DrainGrace is 0: longer than any producer
	// writes with the layout it read before the change.
	DefaultDrainGrace = 30 * time.Second
)

// ErrDraining is returned by [PartitionedQueue.FinishDrain] while a
// partition that was dropped still holds jobs, or before DrainGrace passed.
var ErrDraining = errors.New("streamq: dropped partitions are still draining")

// PartitionedQueueConfig configures a [PartitionedQueue]. The zero value is
// valid.
type PartitionedQueueConfig struct {
	// Queue configures the queue of every partition (see [QueueConfig]).
	// Its MaxLen caps each partition. Defaults to the zero QueueConfig.
	Queue *QueueConfig

	// Refresh is how often producers and workers read the number of
	// partitions from Redis again, so that a change made with
	// [PartitionedQueue.SetPartitions] reaches every process within
	// Refresh. Defaults to DefaultPartitionRefresh.
	Refresh time.Duration

	// DrainGrace is how long after a change of the number of partitions
	// [PartitionedQueue.FinishDrain] refuses to stop reading dropped
	// partitions. It must be well above Refresh plus the longest enqueue
	// call. Defaults to DefaultDrainGrace.
	DrainGrace time.Duration
}

// PartitionedQueue is one logical queue spread over N partitions, each an
// ordinary [Queue] with a Redis Cluster hash tag of its own, so that the
// partitions spread over the masters of a cluster. Partition 0 is the queue
// of the base name itself ("{orders}"), partition k > 0 the queue
// "<name>#k" ("{orders#3}"): a queue that never had partitions is a
// partitioned queue of one partition, and gaining partitions keeps its jobs
// where they are.
//
// N is stored in Redis under the base name's tag, so every process agrees;
// it is 1 until [PartitionedQueue.SetPartitions] changes it. Every job lives
// in one partition for its whole life, so delayed jobs, retries, dead
// letters, reclaim, unique keys, flow-control keys, pause and cancel work
// per partition as they do on a Queue. A job with a partition key (or a
// unique key or flow key) goes to the partition the key's hash names, so
// per-key order, uniqueness and per-key limits stay exact; keyless jobs
// are spread round robin. See docs/partitions.md.
//
// A PartitionedQueue is safe for concurrent use.
type PartitionedQueue struct {
	client  redis.UniversalClient
	name    string
	cfg     QueueConfig
	refresh time.Duration
	grace   time.Duration
	key     string

	mu    sync.Mutex
	parts map[int]*Queue
}

// PartitionLayout is the number of partitions of a queue, as stored in
// Redis.
type PartitionLayout struct {
	// N is the number of partitions producers write to.
	N int
	// Epoch counts the changes of N; 0 when it was never set.
	Epoch int64
	// Draining is, after N was lowered, the number of partitions that may
	// still hold jobs (0: none is draining). Workers and inspectors read
	// partitions 0..Read()-1.
	Draining int
	// Switched is when N last changed, on Redis's clock (zero: never).
	Switched time.Time
}

// Read returns the number of partitions workers and inspectors read:
// max(N, Draining).
func (l PartitionLayout) Read() int { return max(l.N, l.Draining) }

func newLayout(l rdb.Layout) PartitionLayout {
	pl := PartitionLayout{N: l.N, Epoch: l.Epoch, Draining: l.Drain}
	if l.Switched > 0 {
		pl.Switched = time.UnixMilli(l.Switched)
	}
	return pl
}

// NewPartitionedQueue returns the partitioned queue called name on client.
// It validates name and cfg (which may be nil) but does not talk to Redis.
// name must not contain '#', which separates a partition's number.
func NewPartitionedQueue(client redis.UniversalClient, name string, cfg *PartitionedQueueConfig) (*PartitionedQueue, error) {
	var c PartitionedQueueConfig
	if cfg != nil {
		c = *cfg
	}
	if p := core.NameProblem(name, rdb.PartitionSep); p != "" {
		return nil, configErr("partitioned queue name", "%s", p)
	}
	pq := &PartitionedQueue{client: client, name: name, parts: map[int]*Queue{}}
	if c.Queue != nil {
		pq.cfg = *c.Queue
	}
	var err error
	if pq.refresh, err = positive("PartitionedQueueConfig.Refresh", c.Refresh, DefaultPartitionRefresh); err != nil {
		return nil, err
	}
	if pq.grace, err = positive("PartitionedQueueConfig.DrainGrace", c.DrainGrace, DefaultDrainGrace); err != nil {
		return nil, err
	}
	q0, err := NewQueue(client, name, &pq.cfg)
	if err != nil {
		return nil, err
	}
	pq.parts[0] = q0
	pq.key = rdb.PartitionKey(q0.cfg.KeyPrefix, name)
	return pq, nil
}

// positive returns d, def for 0, or an error for a negative d.
func positive(field string, d, def time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return def, nil
	case d < 0:
		return 0, configErr(field, "%s is negative: use a positive duration, or 0 for %s", d, def)
	}
	return d, nil
}

// Name returns the queue's base name.
func (pq *PartitionedQueue) Name() string { return pq.name }

// Partition returns the [Queue] of partition k, whatever the current
// layout: 0 <= k < MaxPartitions.
func (pq *PartitionedQueue) Partition(k int) (*Queue, error) {
	if k < 0 || k >= MaxPartitions {
		return nil, configErr("partition", "%d is out of range: use 0 to %d", k, MaxPartitions-1)
	}
	pq.mu.Lock()
	defer pq.mu.Unlock()
	if q, ok := pq.parts[k]; ok {
		return q, nil
	}
	q, err := NewQueue(pq.client, rdb.PartitionName(pq.name, k), &pq.cfg)
	if err != nil {
		return nil, err
	}
	pq.parts[k] = q
	return q, nil
}

// partitions returns the queues of partitions 0..n-1.
func (pq *PartitionedQueue) partitions(n int) ([]*Queue, error) {
	qs := make([]*Queue, n)
	for k := range qs {
		q, err := pq.Partition(k)
		if err != nil {
			return nil, err
		}
		qs[k] = q
	}
	return qs, nil
}

// Layout reads the queue's layout from Redis (N = 1 when none was set).
func (pq *PartitionedQueue) Layout(ctx context.Context) (PartitionLayout, error) {
	l, err := pq.layout(ctx)
	if err != nil {
		return PartitionLayout{}, err
	}
	return newLayout(l), nil
}

// layout reads the queue's layout from Redis.
func (pq *PartitionedQueue) layout(ctx context.Context) (rdb.Layout, error) {
	l, err := rdb.ReadLayout(ctx, pq.client, pq.key)
	if err != nil {
		return rdb.Layout{}, fmt.Errorf("streamq: read partitions of %s: %w", pq.name, err)
	}
	return l, nil
}

// SetPartitions sets the number of partitions producers write to, 1 to
// MaxPartitions, and returns the new layout. Producers and workers of every
// process follow within Refresh. Raising N takes effect at once: workers
// read the new partitions as they learn of them. Lowering N keeps the
// dropped partitions readable (PartitionLayout.Draining) until
// [PartitionedQueue.FinishDrain] sees them empty, so no job is lost. A call
// with the current N changes nothing. See docs/partitions.md for the
// procedure and what a change means for per-key order.
func (pq *PartitionedQueue) SetPartitions(ctx context.Context, n int) (PartitionLayout, error) {
	if n < 1 || n > MaxPartitions {
		return PartitionLayout{}, configErr("partitions", "%d is out of range: use 1 to %d", n, MaxPartitions)
	}
	l, err := rdb.SetLayout(ctx, pq.client, pq.key, n, -1)
	if err != nil {
		return PartitionLayout{}, fmt.Errorf("streamq: set partitions of %s: %w", pq.name, err)
	}
	return newLayout(l), nil
}

// FinishDrain ends the draining of the partitions a lowered N dropped, once
// they hold no job (none waiting, running, delayed or dead) and DrainGrace
// has passed since the change; then workers stop reading them. It returns
// the layout, and an error wrapping [ErrDraining] that says what is left
// while they are not empty. Dead letters of dropped partitions must be
// requeued or purged first (requeued ones run in the dropped partition,
// which is read until it is empty). It is safe against producers that
// still write with the old layout: it checks again after the change and
// undoes it if a job arrived.
func (pq *PartitionedQueue) FinishDrain(ctx context.Context) (PartitionLayout, error) {
	l, err := pq.layout(ctx)
	if err != nil {
		return PartitionLayout{}, err
	}
	if l.Drain <= l.N {
		return newLayout(l), nil
	}
	now := pq.parts[0].db.Now()
	if wait := time.UnixMilli(l.Switched).Add(pq.grace).Sub(now); wait > 0 {
		return newLayout(l), fmt.Errorf("%w: the change is %s old, wait %s more (DrainGrace %s)", ErrDraining, now.Sub(time.UnixMilli(l.Switched)).Round(time.Millisecond), wait.Round(time.Millisecond), pq.grace)
	}
	if err := pq.checkDrained(ctx, l.N, l.Drain); err != nil {
		return newLayout(l), err
	}
	done, err := rdb.SetDrain(ctx, pq.client, pq.key, l.Epoch, 0)
	if err != nil {
		return newLayout(l), fmt.Errorf("streamq: finish draining %s: %w", pq.name, err)
	}
	if err := pq.checkDrained(ctx, l.N, l.Drain); err != nil {
		// A producer with the old layout wrote after the first check:
		// read the partitions again until they are empty.
		if _, uerr := rdb.SetDrain(ctx, pq.client, pq.key, l.Epoch, l.Drain); uerr != nil {
			return newLayout(done), fmt.Errorf("streamq: finish draining %s: a job arrived in a dropped partition and restoring the drain failed: %w; workers do not read it now: run SetPartitions(%d) and then SetPartitions(%d)", pq.name, uerr, l.Drain, l.N)
		}
		return newLayout(l), err
	}
	return newLayout(done), nil
}

// checkDrained returns an error wrapping ErrDraining when a partition from
// lo to hi-1 holds a job.
func (pq *PartitionedQueue) checkDrained(ctx context.Context, lo, hi int) error {
	for k := lo; k < hi; k++ {
		q, err := pq.Partition(k)
		if err != nil {
			return err
		}
		s, err := q.Stats(ctx)
		if err != nil {
			return err
		}
		if s.Lag != 0 || s.Pending != 0 || s.Delayed != 0 || s.DeadLetters != 0 {
			return fmt.Errorf("%w: partition %s holds %d waiting (-1: unknown), %d running, %d delayed and %d dead jobs", ErrDraining, q.Name(), s.Lag, s.Pending, s.Delayed, s.DeadLetters)
		}
	}
	return nil
}

// Setup creates the stream and consumer group of every partition of the
// current layout (see [Queue.Setup]).
func (pq *PartitionedQueue) Setup(ctx context.Context) error {
	l, err := pq.Layout(ctx)
	if err != nil {
		return err
	}
	qs, err := pq.partitions(l.Read())
	if err != nil {
		return err
	}
	for _, q := range qs {
		if err := q.Setup(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Stats returns the sum of the counters of the partitions workers read
// (see [Queue.Stats]); OldestWaiting is the oldest of any partition.
func (pq *PartitionedQueue) Stats(ctx context.Context) (QueueStats, error) {
	var s QueueStats
	l, err := pq.Layout(ctx)
	if err != nil {
		return s, err
	}
	qs, err := pq.partitions(l.Read())
	if err != nil {
		return s, err
	}
	for _, q := range qs {
		t, err := q.Stats(ctx)
		if err != nil {
			return s, err
		}
		s.Length += t.Length
		s.Pending += t.Pending
		if s.Lag >= 0 {
			s.Lag += t.Lag
		}
		if t.Lag < 0 {
			s.Lag = -1
		}
		s.Delayed += t.Delayed
		s.DeadLetters += t.DeadLetters
		s.Consumers += t.Consumers
		s.OldestWaiting = max(s.OldestWaiting, t.OldestWaiting)
	}
	return s, nil
}

// Cancel removes a delayed job before it is due, given the ID Enqueue
// returned (see [Queue.CancelDelayed]). An ID that names its partition
// ("p3~…", see [PartitionedProducer.Enqueue]) costs one call to that
// partition; another ID (a chosen one, or one from before IDs named their
// partition) is looked for in the partition its hash routes to first, then
// in the others.
func (pq *PartitionedQueue) Cancel(ctx context.Context, id string) (bool, error) {
	l := rdb.Layout{N: 1}
	if _, _, named := rdb.SplitPartitionJobID(id); !named {
		var err error
		if l, err = pq.layout(ctx); err != nil {
			return false, err
		}
	}
	bare, ks := rdb.PartitionsToAsk(id, l)
	for _, k := range ks {
		q, err := pq.Partition(k)
		if err != nil {
			return false, err
		}
		ok, err := q.CancelDelayed(ctx, bare)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// SetFlowLimits sets the flow-control limits of every partition the
// workers read (see [Queue.SetFlowLimits]). Per-key caps and rates apply
// as given: a flow key routes to one partition, so they stay exact. The
// global cap is split into per-partition budgets that sum to l.Global
// (partition k gets Global/N, the first Global%N one more), so the queue
// never runs more than l.Global jobs at once; a partition cannot lend its
// unused budget to another (see docs/guarantees.md, "Partitioned queues").
// A global cap below the number of partitions is refused: a partition's
// cap of 0 would mean no cap.
func (pq *PartitionedQueue) SetFlowLimits(ctx context.Context, l FlowLimits) error {
	if err := l.validate(); err != nil {
		return err
	}
	lay, err := pq.Layout(ctx)
	if err != nil {
		return err
	}
	n := lay.Read()
	if l.Global > 0 && l.Global < n {
		return configErr("FlowLimits.Global", "%d is below the %d partitions of %s, each of which needs a cap of 1 or more: use at least %d, or fewer partitions", l.Global, n, pq.name, n)
	}
	qs, err := pq.partitions(n)
	if err != nil {
		return err
	}
	for k, q := range qs {
		pl := l
		if l.Global > 0 {
			pl.Global = l.Global / n
			if k < l.Global%n {
				pl.Global++
			}
		}
		if err := q.SetFlowLimits(ctx, pl); err != nil {
			return err
		}
	}
	return nil
}
