// Package core is the state of a queue shared by the root package and the
// packages built on it (priority, writebehind, periodic, middleware, the
// tools): its Redis client and calls (internal/rdb), its keys and caps, and
// the root package's rules for running handlers; and what a stream
// consumer and a priority worker set up alike (run.go), and what every
// writer of jobs does alike (Producer: hooks, registration). Users never see it: a *streamq.Queue carries it
// behind an unexported field, and sibling packages read it with [Of].
//
// The handle works without exporting anything from the root package: Queue
// embeds a [Handle] under an unexported alias, which promotes Handle's
// unexported method into *streamq.Queue's method set. Only this package can
// name that method, so [Of] is the one way to reach the state.
package core

import (
	"context"
	"log/slog"
	"maps"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Queue is the shared state of one queue.
type Queue struct {
	// DB makes the queue's Redis calls (its scripts, with its clock).
	DB               *rdb.Queue
	RDB              redis.UniversalClient
	Name             string
	Group            string
	Prefix           string
	Keys             rdb.Keys
	MaxLen           int64 // -1: no cap
	MaxPayloadBytes  int64 // -1: no limit
	MaxHeaderBytes   int64 // -1: no limit
	DeadLetterMaxLen int64 // 0: keep every dead letter

	// NewEngine returns an engine that runs a streamq.Handler h with the
	// root package's rules (building the streamq.Message, recovering
	// panics, classifying errors, the causes of cancelled handlers) and
	// reports events to onEvent (a func(context.Context, streamq.Event), or
	// nil). group is the consumer group the handler sees in Message.Group
	// ("" for none). It sets cfg's OnEvent and causes.
	NewEngine func(h any, onEvent any, group string, cfg engine.Config) engine.Runner
	// MessageOpts returns the wire fields of version 2 (kind, per-job
	// options) of a *streamq.Message, for a forwarder that writes the job
	// again (priority.Forward).
	MessageOpts func(msg any) wire.Opts
	// Defaults are the root package's defaults of consumers and workers
	// (see [Queue.NewRun]).
	Defaults RunDefaults

	// HasPrioritySet is set once a priority set of the queue was created in
	// this process (priority.NewQueue): the stream producer then accepts
	// the priority option, which the set's forwarder reads.
	HasPrioritySet atomic.Bool
}

// CheckJob checks a job about to be written to the queue (see wire.Check):
// its payload and headers against the queue's limits, its headers for
// invalid UTF-8.
func (q *Queue) CheckJob(payload []byte, headers map[string]string) error {
	return wire.Check(payload, headers, q.MaxPayloadBytes, q.MaxHeaderBytes)
}

// WarnEvictionPolicy logs a warning on log when the Redis server evicts keys
// under memory pressure (its maxmemory-policy is not noeviction): streams,
// pending lists, delayed jobs and locks can then vanish, jobs with them.
// Consumers and workers call it once when they start. It reads INFO memory
// once; if that fails (INFO denied by an ACL, Redis unreachable), it says
// nothing.
func (q *Queue) WarnEvictionPolicy(ctx context.Context, log *slog.Logger) {
	policy, err := rdb.EvictionPolicy(ctx, q.RDB)
	if err != nil || policy == "" || policy == "noeviction" {
		return
	}
	log.WarnContext(ctx, "streamq: Redis may evict keys under memory pressure, which loses jobs; set maxmemory-policy to noeviction",
		"maxmemory_policy", policy)
}

// Handle carries a *Queue inside a *streamq.Queue.
type Handle struct{ q *Queue }

// NewHandle returns a handle of q.
func NewHandle(q *Queue) Handle { return Handle{q: q} }

func (h Handle) coreQueue() *Queue { return h.q }

type holder interface{ coreQueue() *Queue }

// Of returns the state of a *streamq.Queue.
func Of(q holder) *Queue { return q.coreQueue() }

// Producer is the shared state of a writer of jobs: a *streamq.Producer,
// and the priority set's pushes.
type Producer struct {
	Queue *Queue
	// Hooks are the producer's enqueue hooks, run on the headers of every
	// job written for it (also by periodic schedules and write-behind).
	Hooks []func(ctx context.Context, headers map[string]string)
	// Kind is what a successful write records the queue as in the
	// registry of its prefix (rdb.KindStream, rdb.KindPriority).
	Kind string
	// WriteBehind records the queue as fed by a write-behind Writer too.
	WriteBehind bool
	// Replicas is what the producer's writes wait for (MinReplicas).
	Replicas rdb.Replicas

	registered atomic.Bool
}

// Register records the producer's queue in the registry of its key prefix
// as p.Kind (and in the write-behind registry with p.WriteBehind), once:
// after the first call that succeeds it costs one atomic load. Producers
// call it after a successful write; an error is left for the next call to
// retry.
func (p *Producer) Register(ctx context.Context) {
	if p.registered.Load() {
		return
	}
	db := p.Queue.DB
	if p.WriteBehind && db.RegisterWriteBehind(ctx) != nil {
		return
	}
	if db.Register(ctx, p.Kind) == nil {
		p.registered.Store(true)
	}
}

// Headers returns the headers of a job: common, then own over them, then
// what the hooks made of them, in a new map; nil when there are no headers
// and no hooks, which keeps entries small.
func (p *Producer) Headers(ctx context.Context, common, own map[string]string) map[string]string {
	if len(common) == 0 && len(own) == 0 && len(p.Hooks) == 0 {
		return nil
	}
	h := make(map[string]string, len(common)+len(own))
	maps.Copy(h, common)
	maps.Copy(h, own)
	for _, hook := range p.Hooks {
		hook(ctx, h)
	}
	return h
}

// ProducerHandle carries a *Producer inside a *streamq.Producer, as Handle
// does for queues.
type ProducerHandle struct{ p *Producer }

// NewProducerHandle returns a handle of p.
func NewProducerHandle(p *Producer) ProducerHandle { return ProducerHandle{p: p} }

func (h ProducerHandle) coreProducer() *Producer { return h.p }

type producerHolder interface{ coreProducer() *Producer }

// OfProducer returns the state of a *streamq.Producer.
func OfProducer(p producerHolder) *Producer { return p.coreProducer() }

// Consumer is the shared state of a *streamq.Consumer or a
// *priority.Worker: what a streamq.Worker needs to run it beside others.
type Consumer struct {
	// Engine is the consumer's engine, built from its ConsumerConfig after
	// defaults: the handler with its middleware, the outcome rules, the
	// backoff. streamqtest runs it on an in-memory backend, so that its
	// verdicts are the ones a consumer reaches.
	Engine engine.Runner
	// Run is its run: the guard that lets one Run at a time, the monitor.
	Run *Run
	// Backend returns the backend of one run.
	Backend func() engine.Backend
	// Concurrency is its Concurrency after defaults; SetConcurrency is
	// true when the caller's config set it (not left to its default).
	Concurrency    int
	SetConcurrency bool
	// Reads names what it reads, such as "stream streamq:{orders}:stream",
	// for errors that must tell two sources apart.
	Reads string
}

// ConsumerHandle carries a *Consumer inside a *streamq.Consumer or a
// *priority.Worker, as Handle does for queues.
type ConsumerHandle struct{ c *Consumer }

// NewConsumerHandle returns a handle of c.
func NewConsumerHandle(c *Consumer) ConsumerHandle { return ConsumerHandle{c: c} }

func (h ConsumerHandle) coreConsumer() *Consumer { return h.c }

// ConsumerHolder is a *streamq.Consumer or a *priority.Worker: only types
// that embed a [ConsumerHandle] have its method.
type ConsumerHolder interface{ coreConsumer() *Consumer }

// OfConsumer returns the state of a *streamq.Consumer or a
// *priority.Worker.
func OfConsumer(c ConsumerHolder) *Consumer { return c.coreConsumer() }
