package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/streamqtest"
)

// promoteSetup opens a queue with a per-test name and returns its client and
// a producer; the queue's keys are deleted when the test ends.
func promoteSetup(t *testing.T, cfg *streamq.QueueConfig) (*redis.Client, *streamq.Queue, *streamq.Producer) {
	t.Helper()
	rdb := redistest.NewClient(t)
	q, err := streamq.NewQueue(rdb, redistest.Name(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	redistest.DeleteKeysAtCleanup(t, rdb, core.Of(q).Keys.Part("*"))
	return rdb, q, p
}

// TestPromote_RacingSchedulersMoveEachJobOnce has 10 schedulers, each with
// its own client, move 2,000 due jobs at the same time in small batches:
// every job must enter the stream exactly once, and the 200 jobs that are
// not due yet must stay in the delayed set.
func TestPromote_RacingSchedulersMoveEachJobOnce(t *testing.T) {
	t.Parallel()
	const (
		due        = 2000
		notDue     = 200
		schedulers = 10
		batch      = 25 // 80 batches to race for
	)
	rdb, q, p := promoteSetup(t, nil)
	ctx := context.Background()

	// The jobs are due in a minute, and the schedulers pass a "now" two
	// minutes ahead: the race does not wait for the clock.
	base := time.Now()
	jobs := make([]streamq.Job, due)
	for i := range jobs {
		jobs[i] = streamq.Job{Payload: []byte(strconv.Itoa(i))}
	}
	if _, err := p.EnqueueBatch(ctx, jobs, streamq.ProcessAt(base.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	later := make([]streamq.Job, notDue)
	for i := range later {
		later[i] = streamq.Job{Payload: []byte("later-" + strconv.Itoa(i))}
	}
	if _, err := p.EnqueueBatch(ctx, later, streamq.ProcessAt(base.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	now := base.Add(2 * time.Minute)

	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		moved [schedulers]int
		calls [schedulers]int
		errs  = make(chan error, schedulers)
	)
	for i := range schedulers {
		sq, err := streamq.NewQueue(redistest.NewClient(t), q.Name(), nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			<-start
			// Bounded: every call but the last moves at least one job.
			for range due + 1 {
				calls[i]++
				n, err := streamq.Promote(sq, ctx, now, batch)
				if err != nil {
					errs <- fmt.Errorf("scheduler %d: %w", i, err)
					return
				}
				if n == 0 {
					return
				}
				moved[i] += n
			}
			errs <- fmt.Errorf("scheduler %d still moving jobs after %d calls", i, due+1)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := 0
	for _, n := range moved {
		total += n
	}
	t.Logf("jobs moved per scheduler %v, script calls %v", moved, calls)
	if total != due {
		t.Errorf("schedulers report %d jobs moved, want %d", total, due)
	}

	entries, err := rdb.XRange(ctx, core.Of(q).Keys.Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]int, due)
	for _, e := range entries {
		payload, _ := e.Values["payload"].(string)
		seen[payload]++
	}
	for i := range due {
		if n := seen[strconv.Itoa(i)]; n != 1 {
			t.Errorf("job %d is in the stream %d times, want 1", i, n)
		}
	}
	if len(entries) != due {
		t.Errorf("stream holds %d entries, want %d", len(entries), due)
	}
	for payload := range seen {
		if strings.HasPrefix(payload, "later-") {
			t.Errorf("job %s moved before its due time", payload)
		}
	}
	if n := rdb.ZCard(ctx, core.Of(q).Keys.Delayed).Val(); n != notDue {
		t.Errorf("delayed set holds %d jobs, want the %d not yet due", n, notDue)
	}
	if n := rdb.HLen(ctx, core.Of(q).Keys.Part("delayed:jobs")).Val(); n != notDue {
		t.Errorf("delayed job hash holds %d bodies, want %d", n, notDue)
	}
}

// TestPromote_IgnoresMaxLen: due delayed jobs (and retries) enter the stream
// even when it is at QueueConfig.MaxLen. They were accepted at enqueue time;
// refusing them now would strand them, so the stream may exceed the cap by
// the number of due jobs, as the README says.
func TestPromote_IgnoresMaxLen(t *testing.T) {
	t.Parallel()
	const maxLen = 3
	_, q, p := promoteSetup(t, &streamq.QueueConfig{MaxLen: maxLen})
	ctx := context.Background()

	base := time.Now()
	jobs := make([]streamq.Job, 5)
	for i := range jobs {
		jobs[i] = streamq.Job{Payload: []byte("delayed-" + strconv.Itoa(i))}
	}
	if _, err := p.EnqueueBatch(ctx, jobs, streamq.ProcessAt(base.Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	for i := range maxLen {
		if _, err := p.Enqueue(ctx, []byte("now-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Enqueue(ctx, []byte("one too many")); !errors.Is(err, streamq.ErrQueueFull) {
		t.Fatalf("Enqueue on a full stream: %v, want ErrQueueFull", err)
	}
	n, err := streamq.Promote(q, ctx, base.Add(2*time.Minute), 100)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(jobs) {
		t.Errorf("moved %d due jobs into the full stream, want %d", n, len(jobs))
	}
	// The stream holds the cap plus the due jobs, and nothing is left in
	// the delayed set.
	inStream := func(j streamqtest.EnqueuedJob) bool { return !j.Scheduled }
	var want []streamqtest.Want
	for i := range jobs {
		want = append(want, streamqtest.Want{Payload: jobs[i].Payload, Match: inStream})
	}
	streamqtest.RequireEnqueued(ctx, t, q, want...)
	streamqtest.RequireEnqueuedN(ctx, t, q, maxLen+len(jobs))
}
