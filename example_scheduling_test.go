package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
)

// ExampleProcessIn delays jobs: ProcessIn by a duration, ProcessAt until a
// point in time. Delayed jobs wait in the queue's delayed set; every running
// consumer moves them into the stream once they are due, never before.
func ExampleProcessIn() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("reminders"), nil)
	defer cleanupQueue(rdb, q)
	producer, _ := streamq.NewProducer(q, nil)

	// notBefore is a lower bound of each job's due time, to check that it
	// does not run early.
	start := time.Now()
	notBefore := map[string]time.Time{
		"send reminder":  start.Add(100 * time.Millisecond),
		"end free trial": start.Add(200 * time.Millisecond),
	}
	if _, err := producer.Enqueue(ctx, []byte("send reminder"), streamq.ProcessIn(100*time.Millisecond)); err != nil {
		panic(err)
	}
	if _, err := producer.Enqueue(ctx, []byte("end free trial"), streamq.ProcessAt(start.Add(200*time.Millisecond))); err != nil {
		panic(err)
	}
	stats, _ := q.Stats(ctx)
	fmt.Printf("delayed: %d, in the stream: %d\n", stats.Delayed, stats.Length)

	ran := make(chan string, 2)
	handler := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		early := time.Now().Before(notBefore[string(msg.Payload)])
		ran <- fmt.Sprintf("%s (early: %t)", msg.Payload, early)
		return nil
	})
	// One job at a time, so they run in the order they fall due.
	consumer, _ := streamq.NewConsumer(q, handler, &streamq.ConsumerConfig{Concurrency: 1, Block: 50 * time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- consumer.Run(runCtx) }()
	for range 2 {
		select {
		case line := <-ran:
			fmt.Println(line)
		case <-time.After(10 * time.Second):
			fmt.Println("timed out waiting for a delayed job")
		}
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// delayed: 2, in the stream: 0
	// send reminder (early: false)
	// end free trial (early: false)
}

// ExampleUnique enqueues a job at most once per key: while a job with the
// key is waiting, scheduled, retrying or running, Enqueue returns that job's
// ID with ErrDuplicate.
func ExampleUnique() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("billing"), nil)
	defer cleanupQueue(rdb, q)
	producer, _ := streamq.NewProducer(q, nil)

	first, err := producer.Enqueue(ctx, []byte("charge invoice 42"), streamq.Unique("invoice:42", time.Hour))
	fmt.Println("first enqueue:", err)

	id, err := producer.Enqueue(ctx, []byte("charge invoice 42"), streamq.Unique("invoice:42", time.Hour))
	if errors.Is(err, streamq.ErrDuplicate) {
		fmt.Println("second enqueue: duplicate of the first job:", id == first)
	}

	_, err = producer.Enqueue(ctx, []byte("charge invoice 43"), streamq.Unique("invoice:43", time.Hour))
	fmt.Println("other key:", err)

	stats, _ := q.Stats(ctx)
	fmt.Println("jobs in the stream:", stats.Length)
	// Output:
	// first enqueue: <nil>
	// second enqueue: duplicate of the first job: true
	// other key: <nil>
	// jobs in the stream: 2
}

// ExampleQueue_CancelDelayed removes a delayed job before it is due, given the ID
// Enqueue returned. CancelDelayed also releases the job's unique key, so the work
// can be scheduled again at once.
func ExampleQueue_CancelDelayed() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("digests"), nil)
	defer cleanupQueue(rdb, q)
	producer, _ := streamq.NewProducer(q, nil)

	id, err := producer.Enqueue(ctx, []byte("weekly digest for ada"),
		streamq.ProcessIn(time.Hour), streamq.Unique("digest:ada", 2*time.Hour))
	if err != nil {
		panic(err)
	}

	ok, err := q.CancelDelayed(ctx, id)
	fmt.Println("cancelled:", ok, err)
	ok, err = q.CancelDelayed(ctx, id) // nothing left to cancel
	fmt.Println("cancelled again:", ok, err)

	_, err = producer.Enqueue(ctx, []byte("weekly digest for ada"),
		streamq.ProcessIn(30*time.Minute), streamq.Unique("digest:ada", 2*time.Hour))
	fmt.Println("rescheduled with the same unique key:", err)

	stats, _ := q.Stats(ctx)
	fmt.Println("delayed jobs:", stats.Delayed)
	// Output:
	// cancelled: true <nil>
	// cancelled again: false <nil>
	// rescheduled with the same unique key: <nil>
	// delayed jobs: 1
}

// cleanupQueue deletes every key of q, unique-key locks included.
func cleanupQueue(rdb *redis.Client, q *streamq.Queue) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, core.Of(q).Keys.Part("*"), 100).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}
