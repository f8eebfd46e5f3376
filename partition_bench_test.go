package streamq_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
)

// BenchmarkPartitionedProducer enqueues b.N jobs into a queue of 4
// partitions on one Redis, one by one and in keyless batches of 1,000; one
// op is one job.
//
//	go test -run '^$' -bench PartitionedProducer -benchtime 100000x .
func BenchmarkPartitionedProducer(b *testing.B) {
	for _, size := range []int{1, 1000} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			pq := partSetup(b, redistest.NewClient(b), 4, &streamq.PartitionedQueueConfig{Queue: &streamq.QueueConfig{MaxLen: -1}})
			p, err := streamq.NewPartitionedProducer(pq, nil)
			if err != nil {
				b.Fatal(err)
			}
			enqueueBatches(b, size, p.EnqueueBatch)
		})
	}
}

// enqueueBatches times b.N jobs enqueued by enqueue in batches of size,
// and reports jobs per second.
func enqueueBatches(b *testing.B, size int, enqueue func(context.Context, []streamq.Job, ...streamq.EnqueueOption) ([]string, error)) {
	jobs := make([]streamq.Job, size)
	for i := range jobs {
		jobs[i].Payload = benchPayload
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += size {
		if _, err := enqueue(ctx, jobs[:min(size, b.N-i)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
