package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

// An operator's view of every queue of a key prefix: the registry lists
// them, an Overview counts each one's jobs.
func Example() {
	rdb, prefix, done := examplePrefix()
	defer done()
	ctx := context.Background()
	exampleQueue(rdb, prefix, "emails", 3)
	exampleQueue(rdb, prefix, "reports", 1)

	in, err := inspect.New(rdb, &inspect.Options{Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	queues, err := in.Queues(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, qi := range queues {
		q, err := in.Queue(ctx, qi.Name)
		if err != nil {
			log.Fatal(err)
		}
		o, err := q.Overview(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (%s): %d waiting, %d running, %d dead\n", o.Name, o.Kind, o.Waiting, o.Running, o.Dead)
	}
	_, err = in.Queue(ctx, "email")
	fmt.Println(errors.Is(err, inspect.ErrQueueNotFound), err)
	// Output:
	// emails (stream): 3 waiting, 0 running, 0 dead
	// reports (stream): 1 waiting, 0 running, 0 dead
	// true inspect: queue "email" not found; did you mean "emails"?
}

// Jobs lists one state page by page, filtered by header and payload; each
// call examines at most ScanLimit entries and returns a cursor.
func ExampleQueue_Jobs() {
	rdb, prefix, done := examplePrefix()
	defer done()
	ctx := context.Background()
	p := exampleQueue(rdb, prefix, "emails", 0)
	for _, to := range []string{"ada@example.com", "bob@example.com", "ada@example.org"} {
		if _, err := p.Enqueue(ctx, []byte(to), streamq.WithHeader("tenant", "acme")); err != nil {
			log.Fatal(err)
		}
	}
	in, _ := inspect.New(rdb, &inspect.Options{Prefix: prefix})
	q, err := in.Queue(ctx, "emails")
	if err != nil {
		log.Fatal(err)
	}
	opts := inspect.ListOptions{State: inspect.StateWaiting, Limit: 1, Grep: "ada@", Header: map[string]string{"tenant": "acme"}}
	for {
		page, err := q.Jobs(ctx, opts)
		if err != nil {
			log.Fatal(err)
		}
		for _, j := range page.Jobs {
			fmt.Printf("%s %s\n", j.State, j.Payload)
		}
		if page.Cursor == "" {
			break
		}
		opts.Cursor = page.Cursor
	}
	// Output:
	// waiting ada@example.com
	// waiting ada@example.org
}

// Pause stops the queue's consumers from taking new jobs within their
// ControlInterval; enqueueing keeps working; Resume undoes it.
func ExampleQueue_Pause() {
	rdb, prefix, done := examplePrefix()
	defer done()
	ctx := context.Background()
	exampleQueue(rdb, prefix, "emails", 1)
	in, _ := inspect.New(rdb, &inspect.Options{Prefix: prefix})
	q, err := in.Queue(ctx, "emails")
	if err != nil {
		log.Fatal(err)
	}
	if err := q.Pause(ctx); err != nil {
		log.Fatal(err)
	}
	o, _ := q.Overview(ctx)
	fmt.Println("paused:", o.Paused)
	if err := q.Resume(ctx); err != nil {
		log.Fatal(err)
	}
	o, _ = q.Overview(ctx)
	fmt.Println("paused:", o.Paused)
	// Output:
	// paused: true
	// paused: false
}

// Delete removes a waiting job, or says why it cannot.
func ExampleQueue_Delete() {
	rdb, prefix, done := examplePrefix()
	defer done()
	ctx := context.Background()
	p := exampleQueue(rdb, prefix, "emails", 0)
	id, err := p.Enqueue(ctx, []byte("hello"), streamq.ProcessIn(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	in, _ := inspect.New(rdb, &inspect.Options{Prefix: prefix})
	q, _ := in.Queue(ctx, "emails")
	j, err := q.Job(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.State, string(j.Payload))
	fmt.Println(q.Delete(ctx, id))
	_, err = q.Job(ctx, id)
	fmt.Println(errors.Is(err, inspect.ErrJobNotFound))
	// Output:
	// delayed hello
	// <nil>
	// true
}

// RequeueDead moves dead letters back into the queue by filter, in
// batches, reporting progress.
func ExampleQueue_RequeueDead() {
	rdb, prefix, done := examplePrefix()
	defer done()
	ctx := context.Background()
	p := exampleQueue(rdb, prefix, "emails", 2)
	q := p.Queue()
	c, _ := streamq.NewConsumer(q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		return streamq.Permanent(errors.New("smtp: connection refused"))
	}), &streamq.ConsumerConfig{Block: 10 * time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- c.Run(runCtx) }()
	for i, n := 0, int64(0); i < 2000 && n < 2; i, n = i+1, mustLen(q.DeadLetters().Len(ctx)) {
		time.Sleep(5 * time.Millisecond) // wait up to 10 s for both jobs to fail
	}
	stop()
	<-ran

	in, _ := inspect.New(rdb, &inspect.Options{Prefix: prefix})
	iq, _ := in.Queue(ctx, "emails")
	f := inspect.DeadFilter{Error: "connection refused", Since: time.Now().Add(-time.Hour)}
	count, _ := iq.CountDead(ctx, f)
	fmt.Println("dead letters matching:", count)
	n, err := iq.RequeueDead(ctx, f, func(done int) { fmt.Println("requeued so far:", done) })
	fmt.Println(n, err)
	// Output:
	// dead letters matching: 2
	// requeued so far: 2
	// 2 <nil>
}

func mustLen(n int64, err error) int64 {
	if err != nil {
		log.Fatal(err)
	}
	return n
}

// examplePrefix returns a client and a key prefix of the example's own,
// and a function that deletes its keys.
func examplePrefix() (*redis.Client, string, func()) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
	prefix := fmt.Sprintf("example-%d", time.Now().UnixNano())
	return rdb, prefix, func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+":*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	}
}

// exampleQueue sets up queue name under prefix with n waiting jobs and
// returns its producer.
func exampleQueue(rdb *redis.Client, prefix, name string, n int) *streamq.Producer {
	ctx := context.Background()
	q, err := streamq.NewQueue(rdb, name, &streamq.QueueConfig{KeyPrefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	if err := q.Setup(ctx); err != nil {
		log.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		log.Fatal(err)
	}
	for i := range n {
		if _, err := p.Enqueue(ctx, fmt.Appendf(nil, "job %d", i)); err != nil {
			log.Fatal(err)
		}
	}
	return p
}
