package middleware_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/middleware"
)

// waitingSetup returns a queue under a prefix of its own, its inspect view
// and a Metrics with the queue's gauges read by the returned reader.
func waitingSetup(t *testing.T) (*streamq.Queue, *inspect.Queue, *sdkmetric.ManualReader) {
	t.Helper()
	ctx := context.Background()
	c := redistest.NewClient(t)
	prefix := redistest.Name(t)
	redistest.DeleteKeysAtCleanup(t, c, prefix+":*")
	q, err := streamq.NewQueue(c, "orders", &streamq.QueueConfig{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(c, &inspect.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	iq, err := in.Queue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := middleware.NewMetrics(&middleware.MetricsConfig{MeterProvider: mp, Queues: []*streamq.Queue{q},
		StatsTimeout: time.Minute}) // a loaded test machine
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return q, iq, reader
}

// waitingPoints returns the points of MetricQueueWaiting of queue orders
// by reason.
func waitingPoints(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, p := range collect(t, r).points(middleware.MetricQueueWaiting) {
		if v, _ := p.Attributes.Value("messaging.destination.name"); v.AsString() != "orders" {
			t.Errorf("a point of queue %q", v.AsString())
		}
		reason, _ := p.Attributes.Value(middleware.AttrWaitReason)
		out[reason.AsString()] += p.Value
	}
	return out
}

func sameCounts(got, want map[string]int64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestMetrics_QueueWaiting creates each situation in Redis (jobs with no
// consumer, delayed, a flow key at its cap, a paused queue) and checks
// that the waiting gauge reports it per reason, as the inspector's wait
// summary does.
func TestMetrics_QueueWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, iq, reader := waitingSetup(t)
	if got := waitingPoints(t, reader); len(got) != 0 {
		t.Errorf("an empty queue: %v, want no points", got)
	}
	p := newProducer(t, q)
	enq := func(opts ...streamq.EnqueueOption) {
		t.Helper()
		if _, err := p.Enqueue(ctx, []byte("x"), opts...); err != nil {
			t.Fatal(err)
		}
	}
	enq()
	enq()
	enq(streamq.ProcessIn(time.Hour))
	want := map[string]int64{inspect.WaitNoConsumer: 2, inspect.WaitDelayed: 1}
	if got := waitingPoints(t, reader); !sameCounts(got, want) {
		t.Errorf("no consumer and delayed: %v, want %v", got, want)
	}

	if err := iq.SetFlowLimits(ctx, inspect.FlowLimits{PerKey: 1}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		enq(streamq.FlowKey("tenant-a"))
	}
	// A consumer's read under flow control: the first job of tenant-a
	// starts, the other two wait aside at the key's cap.
	if _, err := core.Of(q).DB.FlowRead(ctx, rdb.FlowReadParams{Consumer: "c", N: 10}); err != nil {
		t.Fatal(err)
	}
	got := waitingPoints(t, reader)
	if got[inspect.WaitKeyCap] != 2 || got[inspect.WaitDelayed] != 1 {
		t.Errorf("a key at its cap: %v, want key_cap 2 and delayed 1", got)
	}
	sum, err := iq.WaitSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !sameCounts(got, sum) {
		t.Errorf("gauge %v, inspector's summary %v", got, sum)
	}

	if err := iq.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	got = waitingPoints(t, reader)
	if got[inspect.WaitPaused] == 0 || got[inspect.WaitKeyCap] != 0 || got[inspect.WaitDelayed] != 1 {
		t.Errorf("paused: %v, want every waiting job paused, delayed 1", got)
	}
}

// TestMetrics_QueueWaitingOnlyWithQueues checks that without
// MetricsConfig.Queues there is no waiting gauge (no Redis read at
// collection).
func TestMetrics_QueueWaitingOnlyWithQueues(t *testing.T) {
	t.Parallel()
	reader, _ := metricsSetup(t)
	if pts := collect(t, reader).points(middleware.MetricQueueWaiting); len(pts) != 0 {
		t.Errorf("waiting points without queues: %v", pts)
	}
}
