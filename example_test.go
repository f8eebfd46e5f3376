package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rediscontainer"
	"github.com/streamq/streamq/internal/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Run(m, rediscontainer.Start)) }

// exampleClient returns a client to the test Redis. In your code this is
// redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), or a
// redis.NewFailoverClient or redis.NewClusterClient.
func exampleClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: redistest.Addr()})
}

// exampleQueueName gives each example its own queue, as a test would.
func exampleQueueName(base string) string {
	return fmt.Sprintf("%s-%d", base, time.Now().UnixNano())
}

// Example shows the whole life of a job: a queue, a producer, a consumer
// that handles jobs until its context is cancelled. The README's quick start
// is this example.
func Example() {
	rdb := exampleClient()
	defer rdb.Close()
	name := exampleQueueName("emails")

	// readme:quickstart:begin
	ctx := context.Background()
	q, err := streamq.NewQueue(rdb, name, nil)
	if err != nil {
		panic(err)
	}
	producer, err := streamq.NewProducer(q, nil)
	if err != nil {
		panic(err)
	}
	for _, to := range []string{"ada@example.com", "grace@example.com"} {
		if _, err := producer.Enqueue(ctx, []byte(to), streamq.WithHeader("kind", "welcome")); err != nil {
			panic(err)
		}
	}

	sent := make(chan string, 2)
	handler := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		sent <- msg.Headers["kind"] + " mail to " + string(msg.Payload)
		return nil // nil acknowledges the job; an error retries it
	})
	consumer, err := streamq.NewConsumer(q, handler, &streamq.ConsumerConfig{Concurrency: 8})
	if err != nil {
		panic(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- consumer.Run(runCtx) }() // a service runs it until SIGTERM
	var mails []string
	for range 2 {
		select {
		case m := <-sent:
			mails = append(mails, m)
		case <-time.After(10 * time.Second):
			panic("the jobs were not handled within 10s")
		}
	}
	stop() // Run lets running jobs finish, acknowledges them and returns
	if err := <-done; err != nil {
		panic(err)
	}
	slices.Sort(mails)
	fmt.Println(strings.Join(mails, "\n"))
	// readme:quickstart:end

	cleanup(rdb, q)
	// Output:
	// welcome mail to ada@example.com
	// welcome mail to grace@example.com
}

// ExampleProducer_EnqueueBatch enqueues many jobs in one round trip.
func ExampleProducer_EnqueueBatch() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("thumbnails"), nil)
	defer cleanup(rdb, q)
	producer, _ := streamq.NewProducer(q, nil)

	jobs := make([]streamq.Job, 500)
	for i := range jobs {
		jobs[i] = streamq.Job{Payload: fmt.Appendf(nil, "image-%d.png", i)}
	}
	ids, err := producer.EnqueueBatch(ctx, jobs)
	if err != nil {
		panic(err)
	}
	stats, _ := q.Stats(ctx)
	fmt.Println(len(ids), "jobs enqueued; stream length", stats.Length)
	// Output: 500 jobs enqueued; stream length 500
}

// ExampleConsumer_Run shows a handler's three outcomes: success, a retry
// after a chosen delay, and a permanent failure that dead-letters the job.
func ExampleConsumer_Run() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, _ := streamq.NewQueue(rdb, exampleQueueName("payments"), nil)
	defer cleanup(rdb, q)
	producer, _ := streamq.NewProducer(q, nil)
	for _, p := range []string{"ok", "flaky", "invalid"} {
		_, _ = producer.Enqueue(ctx, []byte(p))
	}

	var mu sync.Mutex
	tries := map[string]int{}
	settled := make(chan struct{}, 3) // one per job that is done or dead
	handler := streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
		mu.Lock()
		tries[string(msg.Payload)]++
		n := tries[string(msg.Payload)]
		mu.Unlock()
		switch string(msg.Payload) {
		case "flaky":
			if n == 1 {
				return streamq.RetryAfter(50*time.Millisecond, errors.New("gateway busy"))
			}
		case "invalid":
			return streamq.Permanent(errors.New("card number has 3 digits"))
		}
		settled <- struct{}{}
		return nil
	})
	consumer, _ := streamq.NewConsumer(q, handler, &streamq.ConsumerConfig{
		Block: 50 * time.Millisecond,
		OnEvent: func(ctx context.Context, e streamq.Event) {
			if e.Kind == streamq.EventDeadLettered {
				settled <- struct{}{}
			}
		},
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- consumer.Run(runCtx) }()
	for range 3 {
		select {
		case <-settled:
		case <-time.After(10 * time.Second):
			panic("the jobs were not settled within 10s")
		}
	}
	stop()
	<-done

	s := consumer.Stats()
	fmt.Printf("processed %d, retried %d, dead-lettered %d\n", s.Processed, s.Retried, s.DeadLettered)
	letters, _, _ := q.DeadLetters().List(ctx, "", 10)
	for _, dl := range letters {
		fmt.Printf("dead letter %q: %s (%s)\n", dl.Payload, dl.Error, dl.Reason)
	}
	// Output:
	// processed 2, retried 1, dead-lettered 1
	// dead letter "invalid": permanent: card number has 3 digits (permanent)
}

func cleanup(rdb *redis.Client, q *streamq.Queue) {
	rdb.Del(context.Background(), core.Of(q).Keys.Stream, core.Of(q).Keys.Dead, core.Of(q).Keys.Delayed, core.Of(q).Keys.Part("delayed:jobs"))
}
