package periodic_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/periodic"
)

// Every worker process runs a Scheduler next to its Consumer. However many
// processes run, each tick of each schedule is enqueued once.
func Example() {
	rdb := exampleClient()
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, exampleQueueName("reports"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cleanupQueue(rdb, q)
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		log.Fatal(err)
	}

	s, err := periodic.New(p, &periodic.Config{Missed: periodic.MissedRunOnce})
	if err != nil {
		log.Fatal(err)
	}
	// 02:00 every night, Paris time, even across daylight saving changes.
	if err := s.Register("nightly-report", "CRON_TZ=Europe/Paris 0 2 * * *", []byte(`{"report":"daily"}`)); err != nil {
		log.Fatal(err)
	}
	// Every 200 ms, so that this example ends quickly (a real heartbeat would
	// rather beat every 30 s, on :00 and :30 of every minute); skip missed beats.
	if err := s.RegisterInterval("heartbeat", 200*time.Millisecond, nil, periodic.WithMissed(periodic.MissedSkip)); err != nil {
		log.Fatal(err)
	}

	first := make(chan string, 1)
	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		if name, tick, ok := periodic.FromMessage(m); ok && name == "heartbeat" {
			select {
			case first <- fmt.Sprintf("%s job, tick on a 200 ms boundary: %t", name, tick.UnixMilli()%200 == 0):
			default: // this example prints the first job only
			}
		}
		return nil
	}), nil)
	if err != nil {
		log.Fatal(err)
	}

	// In a real program ctx comes from main, e.g. signal.NotifyContext, and
	// the errgroup runs until SIGTERM.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.Run(gctx) })
	g.Go(func() error { return c.Run(gctx) })

	select {
	case line := <-first:
		fmt.Println(line)
	case <-time.After(10 * time.Second):
		fmt.Println("no periodic job within 10s")
	}
	cancel()
	if err := g.Wait(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// heartbeat job, tick on a 200 ms boundary: true
}

// Next shows the ticks a spec gives, without talking to Redis.
func ExampleScheduler_Next() {
	// NewQueue does not connect; nothing here talks to Redis.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	q, _ := streamq.NewQueue(rdb, "reports", nil)
	p, _ := streamq.NewProducer(q, nil)
	s, _ := periodic.New(p, nil)

	_ = s.Register("weekday-9am-new-york", "CRON_TZ=America/New_York 0 9 * * 1-5", nil)
	_ = s.Register("every-20s", "*/20 * * * * *", nil) // six fields: seconds first
	_ = s.RegisterInterval("every-90s", 90*time.Second, nil)

	from := time.Date(2024, time.March, 8, 14, 30, 5, 0, time.UTC) // a Friday
	for _, name := range []string{"weekday-9am-new-york", "every-20s", "every-90s"} {
		t := from
		fmt.Print(name, ":")
		for range 3 {
			t, _ = s.Next(name, t)
			fmt.Print(" ", t.UTC().Format("Mon 15:04:05"))
		}
		fmt.Println()
	}
	// Output:
	// weekday-9am-new-york: Mon 13:00:00 Tue 13:00:00 Wed 13:00:00
	// every-20s: Fri 14:30:20 Fri 14:30:40 Fri 14:31:00
	// every-90s: Fri 14:31:30 Fri 14:33:00 Fri 14:34:30
}

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

// cleanupQueue deletes every key of q: stream, tick keys, last-tick keys.
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
