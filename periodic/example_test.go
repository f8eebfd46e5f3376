package periodic_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/periodic"
)

// Every worker process runs a Scheduler next to its Consumer. However many
// processes run, each tick of each schedule is enqueued once.
func Example() {
	// In a real program ctx comes from main, e.g. signal.NotifyContext.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, "reports", nil)
	if err != nil {
		log.Fatal(err)
	}
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
	// Every 30 seconds, on :00 and :30 of every minute; skip missed beats.
	if err := s.RegisterInterval("heartbeat", 30*time.Second, nil, periodic.WithMissed(periodic.MissedSkip)); err != nil {
		log.Fatal(err)
	}

	c, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		if name, tick, ok := periodic.FromMessage(m); ok {
			log.Printf("periodic job %s for %s", name, tick)
		}
		return nil
	}), nil)
	if err != nil {
		log.Fatal(err)
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.Run(ctx) })
	g.Go(func() error { return c.Run(ctx) })
	if err := g.Wait(); err != nil {
		log.Fatal(err)
	}
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
