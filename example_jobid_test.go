package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/streamq/streamq"
)

// ExampleWithJobID enqueues a job under an ID of the caller's choice, such
// as an outbox row's key: sending it again, while the job lives or within
// QueueConfig.DoneRetention after it finished, stores nothing and returns
// ErrDuplicate with the ID. The handler sees the same ID on every attempt.
func ExampleWithJobID() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("invoices"), nil)
	defer cleanupQueue(rdb, q)
	producer, _ := streamq.NewProducer(q, nil)

	id, err := producer.Enqueue(ctx, []byte(`{"invoice":42}`), streamq.WithJobID("invoice-42"))
	fmt.Println(id, err)
	id, err = producer.Enqueue(ctx, []byte(`{"invoice":42}`), streamq.WithJobID("invoice-42"))
	fmt.Println(id, errors.Is(err, streamq.ErrDuplicate))

	_, err = producer.Enqueue(ctx, []byte("x"), streamq.WithJobID("42"))
	var bad *streamq.ConfigError
	if errors.As(err, &bad) {
		fmt.Println(bad.Field+":", bad.Reason)
	}
	// Output:
	// invoice-42 <nil>
	// invoice-42 true
	// WithJobID: "42" has the form of a generated ID (a stream entry ID): add a letter, e.g. "job-42"
}

// ExampleDebounce runs a recalculation once its triggers have been quiet
// for a while: each trigger while the job waits replaces its payload and
// moves its start, and returns the same job's ID.
func ExampleDebounce() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("recalc"), nil)
	defer cleanupQueue(rdb, q)
	producer, _ := streamq.NewProducer(q, nil)

	first, _ := producer.Enqueue(ctx, []byte("totals after change 1"), streamq.Debounce("account:7", time.Minute))
	second, err := producer.Enqueue(ctx, []byte("totals after change 2"), streamq.Debounce("account:7", time.Minute))
	fmt.Println(second == first, err)
	stats, _ := q.Stats(ctx)
	fmt.Println("delayed jobs:", stats.Delayed)
	// Output:
	// true <nil>
	// delayed jobs: 1
}

// ExampleUniqueWhile keeps one sync of an account queued at a time, but
// lets the next one queue up as soon as the current one started, so that a
// change made while it runs is not missed.
func ExampleUniqueWhile() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("sync"), nil)
	defer cleanupQueue(rdb, q)
	producer, _ := streamq.NewProducer(q, nil)

	queued := streamq.UniqueWhile("sync:42", time.Hour, streamq.UniqueWaiting, streamq.UniqueDelayed)
	_, err := producer.Enqueue(ctx, []byte("sync 42"), queued)
	fmt.Println(err)
	_, err = producer.Enqueue(ctx, []byte("sync 42"), queued)
	fmt.Println(errors.Is(err, streamq.ErrDuplicate))
	// Output:
	// <nil>
	// true
}
