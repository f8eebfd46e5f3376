package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/streamq/streamq"
)

// WelcomeEmail are the args of a typed job: its Kind names the job's type
// of work, and its fields travel as JSON.
type WelcomeEmail struct {
	To   string `json:"to"`
	Name string `json:"name"`
}

// Kind names the kind of WelcomeEmail jobs.
func (WelcomeEmail) Kind() string { return "email.welcome" }

// ResizeImage are the args of another kind, with default options.
type ResizeImage struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

// Kind names the kind of ResizeImage jobs.
func (ResizeImage) Kind() string { return "image.resize" }

// InsertOpts are the default options of every ResizeImage job.
func (ResizeImage) InsertOpts() []streamq.EnqueueOption {
	return []streamq.EnqueueOption{streamq.MaxAttempts(3), streamq.Timeout(30 * time.Second)}
}

// ExampleRegister runs two kinds of typed jobs on one consumer: a Mux routes
// each job by its kind to the function registered for its args type, which
// gets the decoded args.
func ExampleRegister() {
	rdb := exampleClient()
	defer rdb.Close()
	ctx := context.Background()
	q, err := streamq.NewQueue(rdb, exampleQueueName("typed"), nil)
	if err != nil {
		panic(err)
	}
	defer cleanup(rdb, q)

	// readme:typed:begin
	producer, err := streamq.NewProducer(q, nil)
	if err != nil {
		panic(err)
	}
	if _, err := streamq.EnqueueArgs(ctx, producer, WelcomeEmail{To: "ada@example.com", Name: "Ada"}); err != nil {
		panic(err)
	}
	if _, err := streamq.EnqueueArgs(ctx, producer, ResizeImage{URL: "cat.png", Width: 200},
		streamq.Tags("tenant:42")); err != nil { // the caller's options win over InsertOpts
		panic(err)
	}

	done := make(chan string, 2)
	mux := streamq.NewMux()
	streamq.Register(mux, func(ctx context.Context, job *streamq.TypedJob[WelcomeEmail]) error {
		done <- fmt.Sprintf("%s: welcome %s <%s>", job.Kind, job.Args.Name, job.Args.To)
		return nil
	})
	streamq.Register(mux, func(ctx context.Context, job *streamq.TypedJob[ResizeImage]) error {
		done <- fmt.Sprintf("%s: %s to %dpx %v", job.Kind, job.Args.URL, job.Args.Width, job.Tags)
		return nil
	})
	consumer, err := streamq.NewConsumer(q, mux, nil)
	if err != nil {
		panic(err)
	}
	// readme:typed:end

	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- consumer.Run(runCtx) }()
	var lines []string
	for range 2 {
		select {
		case l := <-done:
			lines = append(lines, l)
		case <-time.After(10 * time.Second):
			panic("the jobs were not handled within 10s")
		}
	}
	stop()
	if err := <-ran; err != nil {
		panic(err)
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// email.welcome: welcome Ada <ada@example.com>
	// image.resize: cat.png to 200px [tenant:42]
}

// ExampleMux routes untyped jobs by kind, with middleware for one route.
func ExampleMux() {
	logged := func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
			fmt.Println("audit:", msg.Kind)
			return next.Handle(ctx, msg)
		})
	}
	mux := streamq.NewMux()
	mux.RouteFunc("report.daily", func(ctx context.Context, msg *streamq.Message) error {
		fmt.Println("daily report for", string(msg.Payload))
		return nil
	}, logged)
	mux.RouteFunc("cache.warm", func(ctx context.Context, msg *streamq.Message) error { return nil })
	fmt.Println(mux.Kinds())

	// A consumer calls Handle for every job; the producer set the kind
	// with streamq.WithKind("report.daily").
	_ = mux.Handle(context.Background(), &streamq.Message{Kind: "report.daily", Payload: []byte("acme")})
	err := mux.Handle(context.Background(), &streamq.Message{Kind: "video.encode"})
	fmt.Println(errors.Is(err, streamq.ErrUnknownKind))
	// Output:
	// [cache.warm report.daily]
	// audit: report.daily
	// daily report for acme
	// true
}
