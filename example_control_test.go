package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
)

// cleanupAll deletes every key of q, and its line in the registry.
func cleanupAll(rdb *redis.Client, q *streamq.Queue) {
	ctx := context.Background()
	var keys []string
	iter := rdb.Scan(ctx, 0, core.Of(q).Keys.Pattern(), 100).Iterator()
	for i := 0; i < 1000 && iter.Next(ctx); i++ {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
	rdb.HDel(ctx, streamq.DefaultKeyPrefix+":queues", q.Name())
}

// runUntil runs c until done is closed, then stops it and waits for Run.
func runUntil(c *streamq.Consumer, done <-chan struct{}) {
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		panic("the job was not handled within 10s")
	}
	stop()
	if err := <-ran; err != nil {
		panic(err)
	}
}

// ExampleSetProgress reports a long job's progress and records its result.
// Operators read both by the job's stable ID (Message.ID) with the
// inspect package, while the job runs and for ConsumerConfig.ResultRetention
// after; here the example reads the keys directly.
func ExampleSetProgress() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("reports"), nil)
	defer cleanupAll(rdb, q)
	producer, _ := streamq.NewProducer(q, nil)
	id, _ := producer.Enqueue(ctx, []byte("2026-Q3"))

	done := make(chan struct{})
	handler := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		defer close(done)
		for step := 1; step <= 4; step++ {
			// ... a quarter of the work ...
			if err := streamq.SetProgress(ctx, step*25, fmt.Sprintf("%d of 4 regions", step)); err != nil {
				return err
			}
		}
		return streamq.SetResult(ctx, []byte("report-"+string(msg.Payload)+".pdf"))
	})
	consumer, _ := streamq.NewConsumer(q, handler, &streamq.ConsumerConfig{ResultRetention: time.Hour})
	runUntil(consumer, done)

	key := "streamq:{" + q.Name() + "}:" // the queue's keys (see the README)
	progress, _ := rdb.Get(ctx, key+"progress:"+id).Result()
	result, _ := rdb.Get(ctx, key+"result:"+id).Result()
	fmt.Println(progress[:len(`{"pct":100,"msg":"4 of 4 regions"`)])
	fmt.Println(result)
	// Output:
	// {"pct":100,"msg":"4 of 4 regions"
	// report-2026-Q3.pdf
}

// ExampleSetResult records a small result; one too large is refused with
// ErrTooLarge (store large results elsewhere and record a reference).
func ExampleSetResult() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("thumbs"), nil)
	defer cleanupAll(rdb, q)
	producer, _ := streamq.NewProducer(q, nil)
	_, _ = producer.Enqueue(ctx, []byte("cat.png"))

	done := make(chan struct{})
	handler := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		defer close(done)
		err := streamq.SetResult(ctx, make([]byte, 2<<10))
		fmt.Println("2 KiB result refused:", errors.Is(err, streamq.ErrTooLarge))
		return streamq.SetResult(ctx, []byte("s3://thumbs/"+string(msg.Payload)))
	})
	consumer, _ := streamq.NewConsumer(q, handler, &streamq.ConsumerConfig{MaxResultBytes: 1 << 10})
	runUntil(consumer, done)
	// Output: 2 KiB result refused: true
}

// ExampleHealthHandler serves /healthz for a service's probes: 200 while
// its consumers run (paused or not), 503 once one stopped or Redis fails.
func ExampleHealthHandler() {
	rdb := exampleClient()
	defer rdb.Close()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("health"), nil)
	defer cleanupAll(rdb, q)
	consumer, _ := streamq.NewConsumer(q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }), nil)

	mux := http.NewServeMux()
	mux.Handle("/healthz", streamq.HealthHandler(consumer))
	probe := func() int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code
	}

	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- consumer.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); probe() != http.StatusOK && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("running:", probe())
	stop()
	<-ran
	fmt.Println("stopped:", probe())
	// Output:
	// running: 200
	// stopped: 503
}
