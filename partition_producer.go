package streamq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
)

// PartitionedProducer enqueues jobs into a [PartitionedQueue]: a job with a
// key (see [PartitionKey]) goes to the partition of the key's hash, a
// keyless job to the next partition in round robin. It is safe for
// concurrent use.
type PartitionedProducer struct {
	pq  *PartitionedQueue
	cfg ProducerConfig

	mu     sync.Mutex
	prods  map[int]*Producer
	layout atomic.Pointer[cachedLayout]
	rr     atomic.Uint64
}

// cachedLayout is a layout and when to read it again.
type cachedLayout struct {
	n    int
	next time.Time
}

// KeyedJob is a job of [PartitionedProducer.EnqueueKeyed] with its
// partition key ("": round robin).
type KeyedJob struct {
	Job
	Key string
}

// NewPartitionedProducer returns a producer for pq with the settings cfg
// (nil: defaults), which every partition's [Producer] uses.
func NewPartitionedProducer(pq *PartitionedQueue, cfg *ProducerConfig) (*PartitionedProducer, error) {
	if pq == nil {
		return nil, configErr("queue", "pq is nil: create one with streamq.NewPartitionedQueue")
	}
	p := &PartitionedProducer{pq: pq, prods: map[int]*Producer{}}
	if cfg != nil {
		p.cfg = *cfg
	}
	if _, err := p.producer(0); err != nil { // validates cfg
		return nil, err
	}
	return p, nil
}

// producer returns the producer of partition k.
func (p *PartitionedProducer) producer(k int) (*Producer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr, ok := p.prods[k]; ok {
		return pr, nil
	}
	q, err := p.pq.Partition(k)
	if err != nil {
		return nil, err
	}
	pr, err := NewProducer(q, &p.cfg)
	if err != nil {
		return nil, err
	}
	p.prods[k] = pr
	return pr, nil
}

// partitions returns the number of partitions to write to, read from Redis
// at most once per Refresh. When the read fails it keeps the last layout
// until the next Refresh (so the master of partition 0 being down does not
// stop enqueues to the others), and fails only if it never read one.
func (p *PartitionedProducer) partitions(ctx context.Context) (int, error) {
	c := p.layout.Load()
	now := time.Now()
	if c != nil && now.Before(c.next) {
		return c.n, nil
	}
	l, err := rdb.ReadLayout(ctx, p.pq.client, p.pq.key)
	if err != nil {
		if c != nil {
			p.layout.Store(&cachedLayout{n: c.n, next: now.Add(p.pq.refresh)})
			return c.n, nil
		}
		return 0, fmt.Errorf("streamq: read partitions of %s: %w", p.pq.name, err)
	}
	p.layout.Store(&cachedLayout{n: l.N, next: now.Add(p.pq.refresh)})
	return l.N, nil
}

// route returns the partition of job j with options o (key: its own
// partition key in a keyed batch) among n.
func (p *PartitionedProducer) route(o *EnqueueOptions, key string, j *Job, n int) int {
	if k := routeKey(o, key, j); k != "" {
		return rdb.PartitionOf(k, n)
	}
	return int((p.rr.Add(1) - 1) % uint64(n))
}

// routeKey returns the key job j with options o routes by: key, else the
// options' partition key, else the key of its dedup mode (unique, by args,
// throttle, debounce), its flow key, or its chosen ID ("": none, round
// robin). Every key that Redis checks within one queue thus routes to one
// partition, so that the check stays exact.
func routeKey(o *EnqueueOptions, key string, j *Job) string {
	if o.UniqueByArgs && key == "" && o.PartitionKey == "" {
		return argsKey(o.Kind, j.Payload)
	}
	for _, k := range []string{key, o.PartitionKey, o.UniqueKey, o.ThrottleKey, o.DebounceKey, o.FlowKey, o.JobID, j.ID} {
		if k != "" {
			return k
		}
	}
	return ""
}

// qualify names the partition k in the generated IDs of ids (see
// rdb.PartitionJobID); chosen IDs stay as they are.
func qualify(k int, ids []string) []string {
	for i, id := range ids {
		ids[i] = rdb.PartitionJobID(k, id)
	}
	return ids
}

// Enqueue adds one job to its partition and returns its ID, as
// [Producer.Enqueue] does. A generated ID names the partition:
// "p<k>~<ID within the partition>" (for example "p3~1700000000000-0"), so
// [PartitionedQueue.Cancel] and package inspect's Partitioned go to that
// partition at once. A chosen ID ([WithJobID]) is returned as chosen; the
// job routes by it when it has no partition, dedup or flow key, and a
// look-up asks that partition first. [Message.ID] is the ID within the
// partition and [Message.Queue] names the partition ("orders#3"). See
// docs/partitions.md, "Job IDs".
func (p *PartitionedProducer) Enqueue(ctx context.Context, payload []byte, opts ...EnqueueOption) (string, error) {
	var o EnqueueOptions
	if err := buildOptions(&o, opts); err != nil {
		return "", fmt.Errorf("streamq: enqueue on %s: %w", p.pq.name, err)
	}
	n, err := p.partitions(ctx)
	if err != nil {
		return "", err
	}
	j := Job{Payload: payload}
	k := p.route(&o, "", &j, n)
	pr, err := p.producer(k)
	if err != nil {
		return "", err
	}
	ids, err := pr.enqueueWith(ctx, []Job{j}, &o)
	if len(ids) == 0 {
		return "", err
	}
	return qualify(k, ids)[0], err
}

// EnqueueBatch adds many jobs with the options opts: all to one partition
// when the options name a key, else spread evenly over the partitions.
// Each partition's share is written as [Producer.EnqueueBatch] writes a
// batch. When every share is a plain add of at most [MaxBatchChunk] jobs
// (jobs due now, without IDs of their own, a dedup mode or a chosen ID,
// and no MinReplicas), the calls of all partitions go in one pipeline per
// node (one round trip to each master, the masters side by side); else
// the partitions are written concurrently. The IDs name their partitions,
// as Enqueue's do. On error, ids[i] is "" for every job that was not
// enqueued, and the error is the first one met.
func (p *PartitionedProducer) EnqueueBatch(ctx context.Context, jobs []Job, opts ...EnqueueOption) ([]string, error) {
	keyed := make([]KeyedJob, len(jobs))
	for i, j := range jobs {
		keyed[i].Job = j
	}
	return p.EnqueueKeyed(ctx, keyed, opts...)
}

// EnqueueKeyed adds many jobs, each to the partition of its Key (keyless
// ones as [PartitionedProducer.EnqueueBatch] spreads them), with the
// options opts. Jobs of one key keep their order. See EnqueueBatch for the
// IDs and errors.
func (p *PartitionedProducer) EnqueueKeyed(ctx context.Context, jobs []KeyedJob, opts ...EnqueueOption) ([]string, error) {
	var o EnqueueOptions
	if err := buildOptions(&o, opts); err != nil {
		return nil, fmt.Errorf("streamq: enqueue on %s: %w", p.pq.name, err)
	}
	ids := make([]string, len(jobs))
	if len(jobs) == 0 {
		return ids, nil
	}
	n, err := p.partitions(ctx)
	if err != nil {
		return nil, err
	}
	// Keyless jobs of a batch go in runs, one per partition, starting at
	// the round robin's next partition.
	keyless := 0
	for _, j := range jobs {
		if routeKey(&o, j.Key, &j.Job) == "" {
			keyless++
		}
	}
	per := (keyless + n - 1) / n
	start := int((p.rr.Add(uint64(n)) - uint64(n)) % uint64(n))
	shares := make(map[int][]int, n)
	seen := 0
	for i, j := range jobs {
		k := (start + seen/max(per, 1)) % n
		if rk := routeKey(&o, j.Key, &jobs[i].Job); rk != "" {
			k = rdb.PartitionOf(rk, n)
		} else {
			seen++
		}
		shares[k] = append(shares[k], i)
	}
	parts := make([]*share, 0, len(shares))
	for k, idx := range shares {
		pr, err := p.producer(k)
		if err != nil {
			return ids, err
		}
		sub := make([]Job, len(idx))
		for i, x := range idx {
			sub[i] = jobs[x].Job
		}
		parts = append(parts, &share{k: k, pr: pr, idx: idx, jobs: sub})
	}
	if !p.pipeline(ctx, parts, &o) {
		var wg sync.WaitGroup
		for _, s := range parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				oo := o
				s.ids, s.err = s.pr.enqueueWith(ctx, s.jobs, &oo)
			}()
		}
		wg.Wait()
	}
	var first error
	for _, s := range parts {
		qualify(s.k, s.ids)
		for i, x := range s.idx {
			if i < len(s.ids) {
				ids[x] = s.ids[i]
			}
		}
		if first == nil {
			first = s.err
		}
	}
	return ids, first
}

// share is the part of a batch that goes to partition k: the jobs at
// indexes idx of the batch, and how their write went.
type share struct {
	k    int
	pr   *Producer
	idx  []int
	jobs []Job
	ids  []string
	err  error
}

// pipeline writes the shares of a batch with one pipeline per node (a
// Redis Cluster client sends each node its commands in one round trip,
// the nodes side by side) when every share is a plain add of at most
// MaxBatchChunk jobs (one call): jobs due now, without IDs of their own, a
// dedup mode or a chosen ID, and no replicas to wait for. It reports false,
// having written nothing, otherwise. A call that fails in the pipeline is
// sent again on its own with the same memo (see rdb.Queue.EnqueuePiped), so
// a call Redis ran stores its jobs once; a share's error clears the IDs of
// the call that failed.
func (p *PartitionedProducer) pipeline(ctx context.Context, parts []*share, o *EnqueueOptions) bool {
	if p.cfg.MinReplicas > 0 {
		return false
	}
	calls := make([]*rdb.EnqueueParams, len(parts))
	for i, s := range parts {
		// A share of more than one call goes the other way: a call that
		// fails stops the calls after it there, which keeps a key's jobs
		// in order; a pipeline would have sent them.
		if len(s.jobs) > MaxBatchChunk {
			return false
		}
		oo := *o
		if s.pr.checkOptions(&oo) != nil {
			return false
		}
		b, err := s.pr.prepare(s.jobs, &oo)
		if err != nil || b.withIDs || b.one || b.due.later() {
			return false
		}
		s.ids = make([]string, len(s.jobs))
		if calls[i], err = s.pr.addCall(ctx, s.jobs, 0, &oo, b.enq, s.ids); err != nil {
			return false
		}
	}
	pipe := p.pq.client.Pipeline()
	finish := make([]func() error, len(parts))
	for i, s := range parts {
		finish[i] = s.pr.q.db.EnqueuePiped(ctx, pipe, calls[i])
	}
	_, _ = pipe.Exec(ctx) // each call's own error is read by its finish
	for i, s := range parts {
		if err := finish[i](); err != nil {
			s.err = s.pr.addFailed(s.ids, err)
			continue
		}
		core.OfProducer(s.pr).Register(ctx)
	}
	return true
}
