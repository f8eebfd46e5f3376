package streamq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/streamq/streamq"
)

// ExampleNewWorker runs three queues with one budget of 10 handler slots,
// weighted as asynq's {"critical": 6, "default": 3, "low": 1}: while all
// three have jobs waiting, 6 of every 10 slots that free up go to critical.
// The low queue's Concurrency caps it at 2 jobs at once. A priority queue
// joins the same worker with priority.NewWorker as its Source.
func ExampleNewWorker() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()

	done := make(chan string, 30)
	var queues []streamq.WorkerQueue
	for _, qw := range []struct {
		name   string
		weight int
		limit  int // 0: the queue may take the whole budget
	}{{"critical", 6, 0}, {"default", 3, 0}, {"low", 1, 2}} {
		q, err := streamq.NewQueue(rdb, exampleQueueName(qw.name), nil)
		if err != nil {
			panic(err)
		}
		defer cleanup(rdb, q)
		producer, err := streamq.NewProducer(q, nil)
		if err != nil {
			panic(err)
		}
		for i := range 10 {
			if _, err := producer.Enqueue(ctx, fmt.Appendf(nil, "%s-%d", qw.name, i)); err != nil {
				panic(err)
			}
		}
		name := qw.name
		handler := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
			done <- name
			return nil
		})
		// Each queue keeps its own settings: retries, timeouts, middleware.
		consumer, err := streamq.NewConsumer(q, handler, &streamq.ConsumerConfig{Concurrency: qw.limit})
		if err != nil {
			panic(err)
		}
		queues = append(queues, streamq.WorkerQueue{Source: consumer, Weight: qw.weight})
	}

	worker, err := streamq.NewWorker(streamq.WorkerConfig{Queues: queues, Concurrency: 10})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- worker.Run(runCtx) }() // a service runs it until SIGTERM
	counts := map[string]int{}
	for range 30 {
		select {
		case name := <-done:
			counts[name]++
		case <-time.After(10 * time.Second):
			panic("the jobs were not handled within 10s")
		}
	}
	stop() // every queue stops reading; running jobs finish
	if err := <-ran; err != nil {
		panic(err)
	}
	fmt.Println(counts["critical"], counts["default"], counts["low"], worker.Stats().Processed)
	// Output: 10 10 10 30
}
