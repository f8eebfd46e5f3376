package priority_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
)

// exampleClient returns a client to the test Redis. In your code this is
// redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), or a
// redis.NewFailoverClient or redis.NewClusterClient.
func exampleClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: redistest.Addr()})
}

// Example pushes jobs straight into a priority set and forwards one from
// the queue's stream, then runs them with a worker: most urgent first, FIFO
// among equal priorities. The README's example is this one.
func Example() {
	rdb := exampleClient()
	defer rdb.Close()
	name := fmt.Sprintf("mail-%d", time.Now().UnixNano())

	// readme:priority:begin
	ctx := context.Background()
	q, err := streamq.NewQueue(rdb, name, nil)
	if err != nil {
		panic(err)
	}
	pq, err := priority.NewQueue(q, nil)
	if err != nil {
		panic(err)
	}

	// Push jobs straight into the priority set...
	for _, job := range []priority.Job{
		{Priority: 0, Payload: []byte("weekly digest")},
		{Priority: 10, Payload: []byte("password reset")},
		{Priority: 0, Payload: []byte("newsletter")},
	} {
		if _, err := pq.Push(ctx, job); err != nil {
			panic(err)
		}
	}
	// ...or enqueue them on the stream with a priority: a consumer running
	// priority.Forward moves them into the priority set.
	producer, err := streamq.NewProducer(q, nil)
	if err != nil {
		panic(err)
	}
	if _, err := producer.Enqueue(ctx, []byte("invoice"), priority.WithPriority(5)); err != nil {
		panic(err)
	}
	forward := priority.Forward(pq)
	forwarded := make(chan struct{}, 1) // only so that this example's order is fixed
	forwarder, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		err := forward.Handle(ctx, msg)
		if err == nil {
			forwarded <- struct{}{}
		}
		return err
	}), nil)
	if err != nil {
		panic(err)
	}

	handled := make(chan string)
	handler := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		p, _ := priority.Of(msg)
		handled <- fmt.Sprintf("%d %s", p, msg.Payload)
		return nil // nil finishes the job; an error retries it
	})
	worker, err := priority.NewWorker(pq, handler, &priority.WorkerConfig{Concurrency: 1})
	if err != nil {
		panic(err)
	}

	runCtx, stop := context.WithCancel(ctx) // a real service runs until SIGTERM
	g, runCtx := errgroup.WithContext(runCtx)
	g.Go(func() error { return forwarder.Run(runCtx) })
	<-forwarded // the invoice is in the priority set
	g.Go(func() error { return worker.Run(runCtx) })
	for range 4 {
		fmt.Println(<-handled)
	}
	stop()
	if err := g.Wait(); err != nil {
		panic(err)
	}
	// readme:priority:end

	deleteQueueKeys(q)
	// Output:
	// 10 password reset
	// 5 invoice
	// 0 weekly digest
	// 0 newsletter
}

// ExampleWorkerConfig_weighted shares a worker between three bands of
// priorities in proportion 6:3:1, so low priorities keep moving while higher
// ones have work: every 10 jobs started hold 6 of the top band, 3 of the
// middle one and 1 of the bottom one, interleaved.
func ExampleWorkerConfig_weighted() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, fmt.Sprintf("weighted-%d", time.Now().UnixNano()), nil)
	defer deleteQueueKeys(q)
	pq, _ := priority.NewQueue(q, nil)
	var jobs []priority.Job
	for range 30 {
		for _, p := range []int{20, 10, 0} {
			jobs = append(jobs, priority.Job{Priority: p})
		}
	}
	if _, err := pq.PushBatch(ctx, jobs); err != nil {
		panic(err)
	}

	started := make(chan int, len(jobs))
	worker, err := priority.NewWorker(pq, streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		p, _ := priority.Of(msg)
		started <- p
		return nil
	}), &priority.WorkerConfig{
		Concurrency: 1,
		Bands: []priority.Band{
			{Min: 20, Max: priority.MaxPriority, Weight: 6},
			{Min: 10, Max: 19, Weight: 3},
			{Min: priority.MinPriority, Max: 9, Weight: 1},
		},
	})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- worker.Run(runCtx) }()
	var order []string
	for range 20 {
		order = append(order, fmt.Sprint(<-started))
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	fmt.Println(strings.Join(order[:10], " "))
	fmt.Println(strings.Join(order[10:], " "))
	// Output:
	// 20 10 20 20 10 20 0 20 10 20
	// 20 10 20 20 10 20 0 20 10 20
}
