package streamq_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/streamq/streamq"
)

// ExampleFlowKey caps the jobs of each customer at one at a time: the
// customer's jobs run in enqueue order, and wait aside in Redis while one
// of them runs, without holding up other customers' jobs.
func ExampleFlowKey() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("invoices"), nil)
	defer cleanupAll(rdb, q)
	if err := q.SetFlowLimits(ctx, streamq.FlowLimits{PerKey: 1}); err != nil {
		panic(err)
	}
	producer, _ := streamq.NewProducer(q, nil)
	for _, job := range []string{"acme 1", "acme 2", "acme 3"} {
		if _, err := producer.Enqueue(ctx, []byte(job), streamq.FlowKey("customer:acme")); err != nil {
			panic(err)
		}
	}

	var mu sync.Mutex
	var order []string
	done := make(chan struct{})
	h := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, string(m.Payload))
		if len(order) == 3 {
			close(done)
		}
		return nil
	})
	c, _ := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Concurrency: 8})
	runUntil(c, done)
	fmt.Println(order)
	// Output: [acme 1 acme 2 acme 3]
}
