package streamq_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
)

// refuseLeases is a go-redis hook that fails the start-lease script of a
// queue (the script whose keys are its pause flag and its leases) while
// on is set, as a Redis that cannot be reached for that call would.
type refuseLeases struct {
	paused, leases string
	on             *atomic.Bool
	refused        *atomic.Int64
}

var errLeaseRefused = errors.New("test: the start-lease call failed")

func (h refuseLeases) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h refuseLeases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h refuseLeases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if h.on.Load() && len(a) >= 5 && a[3] == h.paused && a[4] == h.leases {
			h.refused.Add(1)
			cmd.SetErr(errLeaseRefused)
			return errLeaseRefused
		}
		return next(ctx, cmd)
	}
}

// TestConsumer_PauseExactAfterTheLeaseLapsed covers the path a consumer
// takes without a start lease: its lease renewals fail, the lease lapses,
// and its reads must look at the pause flag themselves (the checked read).
// Jobs still run while the queue runs; once Pause returned no job starts,
// not even one read during the pause; after the resume each runs on its
// first attempt.
func TestConsumer_PauseExactAfterTheLeaseLapsed(t *testing.T) {
	t.Parallel()
	c, q, p, k := ctlSetup(t)
	ctx := context.Background()
	var refuse atomic.Bool
	var refused atomic.Int64
	c.AddHook(refuseLeases{paused: k.Paused, leases: k.StartLeases, on: &refuse, refused: &refused})

	const later = 5
	ct := countingConsumer(t, q, later+1)
	redistest.WaitFor(t, 5*time.Second, "the consumer to take a start lease", func() bool {
		return c.ZCard(ctx, k.StartLeases).Val() == 1
	})

	// From now on every renewal fails: the lease lapses, in Redis (its end
	// passes) and in the consumer (earlier, by the slack).
	refuse.Store(true)
	redistest.WaitFor(t, 10*time.Second, "the lease to lapse in Redis", func() bool {
		n, err := c.ZCount(ctx, k.StartLeases, "("+serverMillis(t, c), "+inf").Result()
		return err == nil && n == 0
	})
	if refused.Load() == 0 {
		t.Fatal("no lease renewal was refused: the hook does not match the lease script")
	}
	if _, err := p.Enqueue(ctx, []byte("unleased")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "a job to run without a lease", func() bool { return ct.started.Load() == 1 })

	iq := ctlInspect(t, c, q)
	if err := iq.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range later {
		if _, err := p.Enqueue(ctx, []byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	ct.holdsThePause(t, iq, 1, later+1, func() { refuse.Store(false) })
}

// serverMillis returns the server's time in Unix milliseconds, as text.
func serverMillis(t *testing.T, c *redis.Client) string {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(now.UnixMilli(), 10)
}

// counting is a consumer of a test's queue whose handler counts its starts
// and sends each job's attempt.
type counting struct {
	cons     *streamq.Consumer
	started  atomic.Int64
	attempts chan int
}

// countingConsumer runs a counting consumer of q (see ctlConsumer) that may
// run up to jobs jobs.
func countingConsumer(t *testing.T, q *streamq.Queue, jobs int) *counting {
	t.Helper()
	ct := &counting{attempts: make(chan int, jobs)}
	ct.cons, _ = ctlConsumer(t, q, func(_ context.Context, m *streamq.Message) error {
		ct.started.Add(1)
		ct.attempts <- m.Attempt
		return nil
	}, streamq.ConsumerConfig{})
	return ct
}

// ctlInspect returns inspect's view of q.
func ctlInspect(t *testing.T, c *redis.Client, q *streamq.Queue) *inspect.Queue {
	t.Helper()
	in, err := inspect.New(c, &inspect.Options{Prefix: core.Of(q).Prefix})
	if err != nil {
		t.Fatal(err)
	}
	iq, err := in.Queue(context.Background(), q.Name())
	if err != nil {
		t.Fatal(err)
	}
	return iq
}

// holdsThePause checks that, once the consumer reports the pause of iq
// (which returned), no job starts beyond the before that had, over five
// control ticks; then it resumes and waits for all jobs to start, each on
// its first attempt. beforeResume, if not nil, runs right before the
// resume.
func (ct *counting) holdsThePause(t *testing.T, iq *inspect.Queue, before, all int64, beforeResume func()) {
	t.Helper()
	redistest.WaitFor(t, 5*time.Second, "the consumer to report the pause", func() bool { return ct.cons.Health().Paused })
	// Asserting that nothing happens takes a window: five control ticks, in
	// which the consumer reads (and hands back, or is refused) the jobs.
	time.Sleep(5 * ctlInterval)
	if got := ct.started.Load(); got != before {
		t.Fatalf("%d jobs started after Pause returned", got-before)
	}
	if beforeResume != nil {
		beforeResume()
	}
	if err := iq.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "the jobs to run after the resume", func() bool { return ct.started.Load() == all })
	for range all {
		if a := <-ct.attempts; a != 1 {
			t.Errorf("a job ran as attempt %d, want 1", a)
		}
	}
}

// TestConsumer_PauseExactUnderFlowControl: a consumer of a queue with flow
// limits reads through the flow script, which holds no start lease; once
// Pause returned no job starts, and after the resume each runs on its first
// attempt.
func TestConsumer_PauseExactUnderFlowControl(t *testing.T) {
	t.Parallel()
	c, q, p, _ := ctlSetup(t)
	ctx := context.Background()
	if err := q.SetFlowLimits(ctx, streamq.FlowLimits{PerKey: 2}); err != nil {
		t.Fatal(err)
	}
	const later = 6
	ct := countingConsumer(t, q, later+1)
	if _, err := p.Enqueue(ctx, []byte("first"), streamq.FlowKey("a")); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "the first job to run", func() bool { return ct.started.Load() == 1 })
	iq := ctlInspect(t, c, q)
	if err := iq.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range later {
		if _, err := p.Enqueue(ctx, []byte{byte('a' + i)}, streamq.FlowKey(string(rune('a'+i%3)))); err != nil {
			t.Fatal(err)
		}
	}
	ct.holdsThePause(t, iq, 1, later+1, nil)
}

// pauseBeforeFlowRead is a go-redis hook that, once armed, holds the next
// read (XREADGROUP; under flow control the flow_read script that admits
// its entries follows it) until fn returned: the read then reaches Redis
// after whatever fn did.
type pauseBeforeFlowRead struct {
	armed *atomic.Bool
	fn    func()
}

func (h pauseBeforeFlowRead) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h pauseBeforeFlowRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h pauseBeforeFlowRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) > 0 && a[0] == "xreadgroup" && h.armed.CompareAndSwap(true, false) {
			h.fn()
		}
		return next(ctx, cmd)
	}
}

// TestConsumer_PauseLandsDuringAFlowRead: a pause that completes (Pause
// returned: the consumer gave its start lease back) while a flow read is on
// its way must keep that read's jobs from starting. A flow read holds no
// start lease, so the flow script that admits what it read looks at the
// pause flag.
func TestConsumer_PauseLandsDuringAFlowRead(t *testing.T) {
	t.Parallel()
	c, q, p, k := ctlSetup(t)
	ctx := context.Background()
	if err := q.SetFlowLimits(ctx, streamq.FlowLimits{PerKey: 2}); err != nil {
		t.Fatal(err)
	}
	iq := ctlInspect(t, c, q)
	var armed atomic.Bool
	paused := make(chan error, 1)
	const n = 4
	c.AddHook(pauseBeforeFlowRead{armed: &armed, fn: func() {
		// Jobs arrive, then a whole pause happens, before the read.
		for i := range n {
			if _, err := p.Enqueue(ctx, []byte{byte('a' + i)}, streamq.FlowKey(string(rune('a'+i)))); err != nil {
				paused <- err
				return
			}
		}
		paused <- iq.Pause(ctx)
	}})
	ct := countingConsumer(t, q, n)
	redistest.WaitFor(t, 5*time.Second, "the consumer to take a start lease", func() bool {
		return c.ZCard(ctx, k.StartLeases).Val() == 1
	})
	armed.Store(true) // the next flow read waits for jobs and a whole pause
	select {
	case err := <-paused:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no flow read happened, or the pause did not complete")
	}
	ct.holdsThePause(t, iq, 0, n, nil)
}
