package workflow_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/workflow"
)

// Resize are the args of an image job.
type Resize struct {
	Image string `json:"image"`
	Size  int    `json:"size"`
}

// Kind names the kind of Resize jobs.
func (Resize) Kind() string { return "image.resize" }

// Notify are the args of a mail job.
type Notify struct {
	To string `json:"to"`
}

// Kind names the kind of Notify jobs.
func (Notify) Kind() string { return "mail.notify" }

// Example builds a workflow: two resizes after a fetch, a mail when both
// succeeded, a cleanup when both ended whatever the outcome; and the
// consumer side: the workflow middleware, and a handler that reads its
// parents' results.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	images, _ := streamq.NewQueue(rdb, "images", nil)
	mail, _ := streamq.NewQueue(rdb, "mail", nil)
	wc, err := workflow.NewClient([]*streamq.Queue{images, mail}, nil)
	if err != nil {
		panic(err)
	}

	w := workflow.New("order-42").
		Add("fetch", images, Resize{Image: "cat.png"}).
		Add("small", images, Resize{Image: "cat.png", Size: 64}, workflow.After("fetch")).
		Add("large", images, Resize{Image: "cat.png", Size: 512}, workflow.After("fetch")).
		Add("notify", mail, Notify{To: "ada@example.com"}).
		Add("cleanup", images, Resize{Image: "cat.png", Size: -1}).
		Batch("thumbs", []string{"small", "large"}, "notify", "cleanup")
	if err := wc.Enqueue(ctx, w); err != nil {
		panic(err) // a cycle, an unknown parent, ... : nothing was written
	}

	mux := streamq.NewMux()
	streamq.Register(mux, func(ctx context.Context, job *streamq.TypedJob[Notify]) error {
		results, err := workflow.ParentResults(ctx) // "small" and "large" by name
		if err != nil {
			return err
		}
		fmt.Println(len(results))
		return nil
	})
	consumer, err := streamq.NewConsumer(mail, mux, &streamq.ConsumerConfig{
		Middleware: []streamq.Middleware{wc.Middleware()},
	})
	if err != nil {
		panic(err)
	}
	var g errgroup.Group
	g.Go(func() error { return wc.Run(ctx) }) // repairs what crashes leave
	g.Go(func() error { return consumer.Run(ctx) })
	_ = g.Wait()
}
