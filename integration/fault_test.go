package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/faultproxy"
	"github.com/streamq/streamq/internal/redistest"
)

// Fault test settings.
const (
	faultConsumers   = 3
	faultConcurrency = 4
	faultMinIdle     = 500 * time.Millisecond
	faultPhases      = 6    // one fault per phase
	faultPhaseJobs   = 1000 // jobs enqueued per phase
	faultOutagePhase = 3    // the phase whose fault is a refused outage
	faultOutage      = time.Second
	faultProbeRounds = 20  // bound on the rounds proving every consumer recovered
	faultProbeJobs   = 200 // jobs per such round
	faultSettle      = 60 * time.Second
)

// TestFault_ConnectionCutsAndOutage runs consumers that reach Redis through a
// fault proxy, cuts all their connections several times while jobs run and
// refuses connections for a second once, and checks that every job is
// handled, every consumer recovers, and no goroutine is left after Run
// returns.
//
// Not parallel: the goroutine leak check compares with the goroutines that
// existed when the test started, which works only while no other test runs.
func TestFault_ConnectionCutsAndOutage(t *testing.T) {
	baseline := goleak.IgnoreCurrent()
	direct := redistest.NewClient(t)
	dq, p := relQueue(t, direct, nil)

	proxy, err := faultproxy.New(redistest.Addr())
	if err != nil {
		t.Fatal(err)
	}
	proxyClosed := false
	t.Cleanup(func() {
		if !proxyClosed {
			_ = proxy.Close()
		}
	})
	viaProxy := redis.NewClient(&redis.Options{
		Addr:         proxy.Addr(),
		DialTimeout:  time.Second,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
	})
	clientClosed := false
	t.Cleanup(func() {
		if !clientClosed {
			_ = viaProxy.Close()
		}
	})
	q, err := streamq.NewQueue(viaProxy, dq.Name(), nil)
	if err != nil {
		t.Fatal(err)
	}

	cnt := newRelCounter()
	h := func(ctx context.Context, m *streamq.Message) error {
		timer := time.NewTimer(time.Millisecond) // simulated work
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		cnt.add(m.Payload)
		return nil
	}
	consumers := make([]*streamq.Consumer, faultConsumers)
	runs := make([]*relRunning, faultConsumers)
	for i := range consumers {
		consumers[i] = relConsumer(t, q, h, streamq.ConsumerConfig{
			Concurrency: faultConcurrency,
			MinIdle:     faultMinIdle,
			Backoff:     streamq.ExponentialBackoff(10*time.Millisecond, 200*time.Millisecond),
		})
		runs[i] = relRun(t, consumers[i])
	}
	alive := func() {
		t.Helper()
		for i, r := range runs {
			select {
			case <-r.done:
				t.Fatalf("consumer %d: Run returned %v during the faults, want it to keep going", i, r.Err())
			default:
			}
		}
	}

	begin := time.Now()
	var want []string
	for phase := range faultPhases {
		payloads := numbers(len(want), faultPhaseJobs)
		enqueueAll(t, p, payloads)
		want = append(want, payloads...)
		// Cut while jobs are flowing.
		base := cnt.total.Load()
		redistest.WaitFor(t, faultSettle, fmt.Sprintf("phase %d: jobs flowing", phase), func() bool {
			return cnt.total.Load() >= base+faultPhaseJobs/5
		})
		if phase == faultOutagePhase {
			proxy.SetRefuse(true)
			proxy.CutAll()
			outage := time.NewTimer(faultOutage) // the outage's length, not a synchronisation
			<-outage.C
			proxy.SetRefuse(false)
		} else {
			proxy.CutAll()
		}
		alive()
	}
	cuts := proxy.Cuts()

	// Every consumer recovers: each handles jobs after the last fault.
	atFault := make([]int64, len(consumers))
	for i, c := range consumers {
		atFault[i] = c.Stats().Processed
	}
	recovered := func() bool {
		for i, c := range consumers {
			if c.Stats().Processed <= atFault[i] {
				return false
			}
		}
		return true
	}
	for round := 0; round < faultProbeRounds && !recovered(); round++ {
		payloads := numbers(len(want), faultProbeJobs)
		enqueueAll(t, p, payloads)
		want = append(want, payloads...)
		redistest.WaitFor(t, faultSettle, "the probe jobs handled", func() bool {
			return cnt.count(payloads[len(payloads)-1]) > 0 && cnt.total.Load() >= int64(len(want))
		})
	}
	if !recovered() {
		for i, c := range consumers {
			t.Errorf("consumer %d: %d jobs handled after the last fault", i, c.Stats().Processed-atFault[i])
		}
		t.FailNow()
	}

	redistest.WaitFor(t, faultSettle, fmt.Sprintf("all %d jobs handled", len(want)), func() bool {
		missing, _, _ := cnt.check(want)
		return len(missing) == 0
	})
	relSettled(t, dq, 0, faultSettle)
	alive()
	took := time.Since(begin)

	missing, dups, unexpected := cnt.check(want)
	if len(missing) > 0 || len(unexpected) > 0 {
		t.Fatalf("of %d jobs: %d lost %v, %d unexpected %v", len(want), len(missing), head(missing), len(unexpected), head(unexpected))
	}
	var total streamq.ConsumerStats
	for i, r := range runs {
		r.stop()
		s := consumers[i].Stats()
		total.Processed += s.Processed
		total.Reclaimed += s.Reclaimed
		total.ClaimsLost += s.ClaimsLost
		total.Deleted += s.Deleted
		total.DeadLettered += s.DeadLettered
	}
	if total.Deleted != 0 || total.DeadLettered != 0 {
		t.Errorf("consumers' stats %+v: want nothing deleted or dead-lettered", total)
	}
	t.Logf("%d jobs through %d faults (%d connections cut, one %s outage) handled in %s: "+
		"%d runs, %d duplicate runs (%d jobs), %d reclaimed, %d claims lost",
		len(want), faultPhases, cuts, faultOutage, took.Round(time.Millisecond),
		cnt.total.Load(), cnt.total.Load()-int64(len(want)), len(dups), total.Reclaimed, total.ClaimsLost)

	// Every goroutine the consumers started has returned. The client and the
	// proxy are closed first, since their connections are theirs, not the
	// consumers'. go-redis's pool may still be in its one-second dial probe
	// after the outage: that goroutine belongs to the closed client and
	// returns on its own.
	clientClosed = true
	if err := viaProxy.Close(); err != nil {
		t.Errorf("closing the client: %v", err)
	}
	proxyClosed = true
	if err := proxy.Close(); err != nil {
		t.Errorf("closing the proxy: %v", err)
	}
	goleak.VerifyNone(t, baseline,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// lostReplyBound bounds how long a job whose read reply was lost may take
// to run: far less than the default MinIdle or Lease (30 s), after which a
// reaper would take it over.
const lostReplyBound = 10 * time.Second

// TestFault_LostReadReplyRunsOnce: the reply of an XREADGROUP that delivered
// jobs is lost (Redis ran the read and counted the deliveries; the
// connection broke before the reply reached the client), and go-redis sends
// the read again, which delivers nothing new. The consumer finds the unseen
// entries pending for itself and takes them back uncharged, so each job
// runs exactly once, as attempt 1, within seconds rather than after MinIdle
// (the default, 30 s), and none is dead-lettered.
func TestFault_LostReadReplyRunsOnce(t *testing.T) {
	t.Parallel()
	direct := redistest.NewClient(t)
	dq, p := relQueue(t, direct, nil)
	proxy, viaProxy := redistest.NewProxiedClient(t)
	q, err := streamq.NewQueue(viaProxy, dq.Name(), nil)
	if err != nil {
		t.Fatal(err)
	}

	// The jobs wait before the consumer starts, so its first read delivers
	// them all, and that read's reply is the one lost.
	jobs := numbers(0, 3)
	enqueueAll(t, p, jobs)
	dropped := proxy.DropReply(faultproxy.Command("XREADGROUP"))

	type start struct {
		payload string
		attempt int
		count   int64 // the entry's delivery counter while the handler runs
	}
	starts := make(chan start, 2*len(jobs))
	cnt := newRelCounter()
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		s := start{payload: string(m.Payload), attempt: m.Attempt, count: -1}
		pe, err := direct.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: core.Of(q).Keys.Stream, Group: q.Group(), Start: m.EntryID, End: m.EntryID, Count: 1}).Result()
		if err == nil && len(pe) == 1 {
			s.count = pe[0].RetryCount
		}
		cnt.add(m.Payload)
		starts <- s
		return nil
	}, streamq.ConsumerConfig{Concurrency: 4}) // MinIdle: the default
	begin := time.Now()
	r := relRun(t, c)
	select {
	case <-dropped:
	case <-time.After(relWait):
		t.Fatal("no XREADGROUP reply was dropped")
	}
	redistest.WaitFor(t, lostReplyBound, "every job of the lost read handled", func() bool { return cnt.total.Load() >= int64(len(jobs)) })
	took := time.Since(begin)
	relSettled(t, dq, 0, relWait)
	r.stop()

	cnt.exactlyOnce(t, jobs)
	close(starts)
	for s := range starts {
		if s.attempt != 1 || s.count != 1 {
			t.Errorf("job %s ran as attempt %d with delivery counter %d, want attempt 1 counted once: the lost delivery is not an attempt", s.payload, s.attempt, s.count)
		}
	}
	if s := c.Stats(); s.Processed != int64(len(jobs)) || s.Reclaimed != 0 || s.DeadLettered != 0 {
		t.Errorf("consumer stats %+v: want %d processed, nothing reclaimed (the jobs were taken back, not taken over after MinIdle) or dead-lettered", s, len(jobs))
	}
	if proxy.Dropped() != 1 {
		t.Errorf("%d replies dropped, want 1", proxy.Dropped())
	}
	t.Logf("the %d jobs of the lost read were handled %s after the consumer started (MinIdle %s)",
		len(jobs), took.Round(time.Millisecond), streamq.DefaultMinIdle)
}
