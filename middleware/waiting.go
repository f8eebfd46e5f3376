package middleware

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/core"
)

// MetricQueueWaiting is a gauge: jobs of a queue that have not started,
// per reason (attribute AttrWaitReason: the reasons of
// [inspect.Queue.WaitSummary], such as paused, delayed, retry_backoff,
// key_cap, global_cap, behind, no_consumer). Reasons that hold no job are
// left out.
const MetricQueueWaiting = "streamq.queue.waiting"

// AttrWaitReason is the attribute of MetricQueueWaiting: why the jobs
// counted wait (one of the inspect.Wait… reasons).
const AttrWaitReason = attribute.Key("streamq.wait.reason")

// waitSource reads the wait summary of one queue of MetricsConfig.Queues.
type waitSource struct {
	name string
	in   *inspect.Inspector
}

// newWaitSources returns the inspectors of queues, for MetricQueueWaiting.
func newWaitSources(queues []*streamq.Queue) ([]waitSource, error) {
	out := make([]waitSource, len(queues))
	for i, q := range queues {
		cq := core.Of(q)
		in, err := inspect.New(cq.RDB, &inspect.Options{Prefix: cq.Prefix, Group: cq.Group})
		if err != nil {
			return nil, fmt.Errorf("streamq: metrics of queue %s: %w", q.Name(), err)
		}
		out[i] = waitSource{name: q.Name(), in: in}
	}
	return out, nil
}

// observeWaiting is the callback of MetricQueueWaiting: it reads the wait
// summary of every queue (bounded work per queue: see
// inspect.Queue.WaitSummary), at most maxStatsConcurrency at once, each
// bounded by StatsTimeout. A queue not registered yet (no job was ever
// enqueued or read) has nothing waiting and is left out.
func (m *Metrics) observeWaiting(ctx context.Context, o metric.Observer) error {
	sums := make([]map[string]int64, len(m.waits))
	errs := m.eachQueue(ctx, func(ctx context.Context, i int) (err error) {
		sums[i], err = m.waits[i].summary(ctx)
		return err
	})
	for i, src := range m.waits {
		queue := semconv.MessagingDestinationName(src.name)
		for reason, n := range sums[i] {
			o.ObserveInt64(m.waiting, n, metric.WithAttributes(queue, AttrWaitReason.String(reason)))
		}
	}
	return errors.Join(errs...)
}

// summary returns the wait summary of the queue (nil when the queue is not
// registered).
func (src waitSource) summary(ctx context.Context) (map[string]int64, error) {
	q, err := src.in.Queue(ctx, src.name)
	if errors.Is(err, inspect.ErrQueueNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return q.WaitSummary(ctx)
}
