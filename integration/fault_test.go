package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/streamq/streamq"
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
