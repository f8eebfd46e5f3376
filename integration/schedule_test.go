package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/periodic"
)

// schedQueue opens the queue called name with its own client, as a separate
// process would.
func schedQueue(t *testing.T, name string) (*redis.Client, *streamq.Queue, *streamq.Producer) {
	t.Helper()
	rdb := redistest.NewClient(t)
	q, err := streamq.NewQueue(rdb, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rdb, q, p
}

// schedConsumers starts n consumers of q (each with its own client and its
// own delayed-job scheduler at the default SchedulerInterval) running h. The
// returned stop cancels them and waits until every Run returned; it is also
// registered with t.Cleanup.
func schedConsumers(t *testing.T, name string, n int, cfg streamq.ConsumerConfig, h streamq.HandlerFunc) (stop func()) {
	t.Helper()
	if cfg.Block == 0 {
		cfg.Block = 100 * time.Millisecond
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, n)
	for i := range n {
		_, q, _ := schedQueue(t, name)
		c := cfg
		c.Name = fmt.Sprintf("c%d", i)
		cons, err := streamq.NewConsumer(q, h, &c)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		go func() { errs <- cons.Run(ctx) }()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			timeout := time.NewTimer(10 * time.Second)
			defer timeout.Stop()
			for range n {
				select {
				case err := <-errs:
					if err != nil {
						t.Errorf("consumer Run: %v", err)
					}
				case <-timeout.C:
					t.Errorf("consumers did not stop within 10s")
					return
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestSchedule_DelayedJobsExactlyOnceNeverEarly enqueues 1,000 jobs due in
// 0-2 s for 5 consumers whose schedulers all race to move them: each job must
// be handled exactly once, and never before its due time.
func TestSchedule_DelayedJobsExactlyOnceNeverEarly(t *testing.T) {
	t.Parallel()
	const (
		jobs      = 1000
		consumers = 5
		maxDelay  = 2 * time.Second
	)
	name := redistest.Name(t)
	rdb, q, p := schedQueue(t, name)
	ctx := context.Background()

	var (
		handled atomic.Int64
		mu      sync.Mutex
		count   [jobs]int
		delay   [jobs]time.Duration // handler start - due
	)
	stop := schedConsumers(t, name, consumers, streamq.ConsumerConfig{}, func(_ context.Context, m *streamq.Message) error {
		start := time.Now()
		idx, due, err := schedParseDue(m.Payload)
		if err != nil {
			return streamq.Permanent(err)
		}
		mu.Lock()
		count[idx]++
		delay[idx] = start.Sub(due)
		mu.Unlock()
		handled.Add(1)
		return nil
	})

	ids := make([]string, jobs)
	for i := range jobs {
		d := rand.N(maxDelay + 1)
		// The due time is taken before Enqueue, so it is at or before the
		// time ProcessIn computes inside Enqueue; it is cut to whole
		// milliseconds, the resolution of the delayed set.
		due := time.Now().Add(d).UnixMilli()
		id, err := p.Enqueue(ctx, []byte(strconv.Itoa(i)+":"+strconv.FormatInt(due, 10)), streamq.ProcessIn(d))
		if err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
		ids[i] = id
	}
	redistest.WaitFor(t, 30*time.Second, "all delayed jobs handled", func() bool { return handled.Load() >= jobs })
	// Let the consumers finish their acknowledgements, then look at Redis.
	stop()

	mu.Lock()
	defer mu.Unlock()
	for i, n := range count {
		if n != 1 {
			t.Errorf("job %d (%s) handled %d times, want 1", i, ids[i], n)
		}
	}
	var early []string
	ds := make([]time.Duration, 0, jobs)
	for i, d := range delay {
		if d < 0 {
			early = append(early, fmt.Sprintf("job %d %s early", i, -d))
		}
		ds = append(ds, d)
	}
	if len(early) > 0 {
		t.Errorf("%d jobs ran before their due time: %s", len(early), strings.Join(early[:min(len(early), 10)], "; "))
	}
	slices.Sort(ds)
	t.Logf("delay from due time to handler start over %d jobs, %d consumers, SchedulerInterval %s: p50 %s, p99 %s, max %s",
		jobs, consumers, streamq.DefaultSchedulerInterval,
		ds[len(ds)/2].Round(time.Microsecond), ds[len(ds)*99/100].Round(time.Microsecond), ds[len(ds)-1].Round(time.Microsecond))

	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every job entered the stream exactly once: no double move by racing schedulers.
	if st.Length != jobs || st.Delayed != 0 || st.Pending != 0 {
		t.Errorf("stats %+v: want %d stream entries, nothing delayed or pending", st, jobs)
	}
	if n := rdb.HLen(ctx, q.Key("delayed:jobs")).Val(); n != 0 {
		t.Errorf("%d delayed job bodies left behind", n)
	}
}

func schedParseDue(payload []byte) (int, time.Time, error) {
	a, b, ok := strings.Cut(string(payload), ":")
	idx, err1 := strconv.Atoi(a)
	ms, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || idx < 0 || idx >= 1000 {
		return 0, time.Time{}, fmt.Errorf("bad payload %q", payload)
	}
	return idx, time.UnixMilli(ms), nil
}

// TestSchedule_PeriodicOnePerTickAcrossSchedulers runs 4 schedulers (each with
// its own client, as 4 processes would) for about 10 s with two schedules
// ticking every second: each schedule gives 10±1 jobs, one per tick.
func TestSchedule_PeriodicOnePerTickAcrossSchedulers(t *testing.T) {
	t.Parallel()
	const (
		schedulers = 4
		window     = 10 * time.Second
	)
	name := redistest.Name(t)
	rdb, q, _ := schedQueue(t, name)
	ctx := context.Background()

	var (
		mu    sync.Mutex
		ticks = map[string][]time.Time{}
		bad   []string
	)
	var handled atomic.Int64
	stop := schedConsumers(t, name, 2, streamq.ConsumerConfig{}, func(_ context.Context, m *streamq.Message) error {
		s, tick, ok := periodic.FromMessage(m)
		mu.Lock()
		defer mu.Unlock()
		if !ok || string(m.Payload) != "payload-"+s {
			bad = append(bad, fmt.Sprintf("%s: headers %v payload %q", m.ID, m.Headers, m.Payload))
		} else {
			ticks[s] = append(ticks[s], tick)
		}
		handled.Add(1)
		return nil
	})

	runCtx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	errs := make(chan error, schedulers)
	for range schedulers {
		_, _, p := schedQueue(t, name)
		s, err := periodic.New(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Register("cron-1s", "* * * * * *", []byte("payload-cron-1s")); err != nil {
			t.Fatal(err)
		}
		if err := s.RegisterInterval("interval-1s", time.Second, []byte("payload-interval-1s")); err != nil {
			t.Fatal(err)
		}
		go func() { errs <- s.Run(runCtx) }()
	}
	for range schedulers {
		select {
		case err := <-errs:
			if err != nil {
				t.Errorf("scheduler Run: %v", err)
			}
		case <-time.After(window + 10*time.Second):
			t.Fatal("schedulers did not stop after their context ended")
		}
	}
	redistest.WaitFor(t, 10*time.Second, "every periodic job handled", func() bool {
		return handled.Load() == rdb.XLen(ctx, q.StreamKey()).Val()
	})
	stop()

	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Errorf("jobs without periodic headers or with a wrong payload: %v", bad)
	}
	for _, s := range []string{"cron-1s", "interval-1s"} {
		ts := slices.Clone(ticks[s])
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		t.Logf("%s: %d jobs, ticks %s .. %s", s, len(ts), schedFirst(ts), schedLast(ts))
		if n := len(ts); n < 9 || n > 11 {
			t.Errorf("%s: %d jobs in %s, want 10±1", s, n, window)
		}
		for i := range ts {
			if ts[i].Nanosecond() != 0 {
				t.Errorf("%s: tick %s is not on a whole second", s, ts[i])
			}
			if i > 0 && ts[i].Equal(ts[i-1]) {
				t.Errorf("%s: two jobs for tick %s", s, ts[i])
			}
		}
	}
}

func schedFirst(ts []time.Time) string {
	if len(ts) == 0 {
		return "-"
	}
	return ts[0].Format(time.RFC3339)
}

func schedLast(ts []time.Time) string {
	if len(ts) == 0 {
		return "-"
	}
	return ts[len(ts)-1].Format(time.RFC3339)
}

// TestSchedule_CancelDelayedJob: a delayed job cancelled before it is due
// never runs; cancelling a job that already ran reports false.
func TestSchedule_CancelDelayedJob(t *testing.T) {
	t.Parallel()
	name := redistest.Name(t)
	_, q, p := schedQueue(t, name)
	ctx := context.Background()

	ran := make(chan string, 10)
	// One handler slot: jobs run in stream order, and the scheduler moves due
	// jobs in due-time order, so once a job due later than the cancelled one
	// has run, the cancelled one would have run before it.
	schedConsumers(t, name, 1, streamq.ConsumerConfig{Concurrency: 1}, func(_ context.Context, m *streamq.Message) error {
		ran <- string(m.Payload)
		return nil
	})

	cancelled, err := p.Enqueue(ctx, []byte("cancelled"), streamq.ProcessIn(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, []byte("later"), streamq.ProcessIn(600*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	ok, err := q.Cancel(ctx, cancelled)
	if err != nil || !ok {
		t.Fatalf("Cancel before due = %v, %v; want true", ok, err)
	}
	if got := schedWaitPayload(t, ran); got != "later" {
		t.Fatalf("%q ran, want only \"later\"", got)
	}
	if ok, err := q.Cancel(ctx, cancelled); err != nil || ok {
		t.Fatalf("second Cancel = %v, %v; want false", ok, err)
	}

	// Cancel after the job ran.
	id, err := p.Enqueue(ctx, []byte("runs"), streamq.ProcessIn(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if got := schedWaitPayload(t, ran); got != "runs" {
		t.Fatalf("%q ran, want \"runs\"", got)
	}
	if ok, err := q.Cancel(ctx, id); err != nil || ok {
		t.Fatalf("Cancel after run = %v, %v; want false", ok, err)
	}
	if ok, err := q.Cancel(ctx, "d-unknown"); err != nil || ok {
		t.Fatalf("Cancel of an unknown ID = %v, %v; want false", ok, err)
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Delayed != 0 || st.Length != 2 {
		t.Fatalf("stats %+v: want 2 stream entries (the cancelled job never entered) and nothing delayed", st)
	}
	select {
	case got := <-ran:
		t.Fatalf("unexpected job %q ran", got)
	default:
	}
}

func schedWaitPayload(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no job ran within 10s")
		return ""
	}
}
