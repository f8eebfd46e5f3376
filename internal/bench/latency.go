package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamq/streamq"
)

// latencyProducers is the number of goroutines that enqueue the latency
// scenario's jobs, one job per call. They only keep up with the schedule;
// the schedule, not their speed, sets the offered rate (open loop).
const latencyProducers = 16

// latencyTick is the period of the open-loop scheduler.
const latencyTick = time.Millisecond

func (b *bench) scenarioLatency(ctx context.Context) error {
	c := b.o.latConc
	rate := b.o.latRate
	var how string
	if rate == 0 {
		maxRate, err := b.pipelineMax(ctx, c)
		if err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
		rate = maxRate * b.o.latLoad
		how = fmt.Sprintf("%.0f%% of the max pipeline rate %s jobs/s", b.o.latLoad*100, commas(int64(maxRate)))
	} else {
		how = "set by -latency-rate"
	}
	if rate < 1 {
		return fmt.Errorf("offered rate %.2f jobs/s is too low", rate)
	}
	r := Result{Scenario: "latency", Variant: fmt.Sprintf("concurrency=%d", c), Param: c, Unit: "jobs/s"}
	for i := range b.o.runs {
		for _, sd := range order(i) {
			run, err := b.latencyRun(ctx, sd, c, rate, i)
			if err != nil {
				return err
			}
			r.add(sd, run)
		}
	}
	r.finish()
	s, bl := r.Streamq.Latency, r.Baseline.Latency
	note := fmt.Sprintf("offered %s jobs/s (%s); p50/p99/p99.9 ms: streamq %.2f/%.2f/%.2f, baseline %.2f/%.2f/%.2f",
		commas(int64(rate)), how, s.P50, s.P99, s.P999, bl.P50, bl.P99, bl.P999)
	if r.Notes != "" {
		note += "; " + r.Notes
	}
	r.Notes = note
	b.emit(r)
	return nil
}

// latencyRun offers rate jobs/s for -latency-duration with an open-loop
// producer (a 1 ms ticker releases the jobs that are due; producer goroutines
// enqueue them one per call) and records, for each job, the time from the
// start of its enqueue call to the start of its handler. The payload carries
// the enqueue time (monotonic nanoseconds since the run started).
func (b *bench) latencyRun(ctx context.Context, sd side, c int, rate float64, i int) (Run, error) {
	total := int(rate * b.o.latDuration.Seconds())
	if total < 1 {
		return Run{}, errors.New("latency run would offer no job: raise -latency-rate or -latency-duration")
	}
	name := b.name("lat", strconv.Itoa(c), strconv.Itoa(i), sd.String())
	hook := newCountHook("", 0)
	rdb := redis.NewClient(&redis.Options{
		Addr:         b.o.addr,
		PoolSize:     c + latencyProducers + 8,
		MinIdleConns: latencyProducers + 4, // dialled before the clock starts
	})
	rdb.AddHook(hook)
	defer rdb.Close()

	t0 := time.Now()
	lat := make([]int64, total)
	var handled atomic.Int64
	allDone := make(chan struct{})
	record := func(payload []byte) {
		if len(payload) < 8 {
			return
		}
		d := time.Since(t0).Nanoseconds() - int64(binary.LittleEndian.Uint64(payload))
		k := handled.Add(1)
		if k <= int64(total) {
			lat[k-1] = d
		}
		if k == int64(total) {
			close(allDone)
		}
	}

	var enqueue func(ctx context.Context, payload []byte) error
	var startConsumer func(ctx context.Context) <-chan error
	var keys []string
	switch sd {
	case sideStreamq:
		q, err := streamq.NewQueue(rdb, name, nil)
		if err != nil {
			return Run{}, err
		}
		keys = queueKeys(q)
		b.track(keys...)
		if err := q.Setup(ctx); err != nil {
			return Run{}, err
		}
		p, err := streamq.NewProducer(q, nil)
		if err != nil {
			return Run{}, err
		}
		enqueue = func(ctx context.Context, payload []byte) error {
			_, err := p.Enqueue(ctx, payload)
			return err
		}
		h := streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
			record(m.Payload)
			return nil
		})
		cons, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Name: "bench", Concurrency: c})
		if err != nil {
			return Run{}, err
		}
		startConsumer = func(ctx context.Context) <-chan error {
			errc := make(chan error, 1)
			go func() { errc <- cons.Run(ctx) }()
			return errc
		}
	case sideBaseline:
		key := baselineKey(name)
		keys = []string{key}
		b.track(key)
		if err := createBaselineGroup(ctx, b.admin, key); err != nil {
			return Run{}, err
		}
		enqueue = func(ctx context.Context, payload []byte) error {
			return rdb.XAdd(ctx, baselineXAdd(key, payload)).Err()
		}
		bc := &baselineConsumer{rdb: rdb, key: key, c: c, handler: func(m redis.XMessage) {
			if s, ok := m.Values["payload"].(string); ok && len(s) >= 8 {
				record([]byte(s[:8]))
			}
		}}
		startConsumer = func(ctx context.Context) <-chan error {
			errc := make(chan error, 1)
			go func() { errc <- bc.run(ctx) }()
			return errc
		}
	}
	defer b.drop(keys...)

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := startConsumer(rctx)
	// Let the consumer reach its first blocking read and the pool dial.
	settle := time.NewTimer(300 * time.Millisecond)
	select {
	case <-settle.C:
	case <-ctx.Done():
		settle.Stop()
		return Run{}, context.Cause(ctx)
	}

	p, err := startProbe(ctx, b.admin, hook)
	if err != nil {
		return Run{}, err
	}
	pctx, pcancel := context.WithTimeout(rctx, b.o.latDuration+b.o.runTimeout)
	defer pcancel()
	tokens := make(chan struct{}, total)
	var producers sync.WaitGroup
	var prodErr atomic.Pointer[error]
	var lastEnq atomic.Int64
	for range latencyProducers {
		producers.Go(func() {
			buf := makePayload(max(b.o.payload, 8))
			for range tokens {
				binary.LittleEndian.PutUint64(buf, uint64(time.Since(t0).Nanoseconds()))
				if err := enqueue(pctx, buf); err != nil {
					if pctx.Err() == nil {
						prodErr.CompareAndSwap(nil, &err)
						pcancel()
					}
					return
				}
				lastEnq.Store(time.Since(t0).Nanoseconds())
			}
		})
	}
	start := time.Now()
	startNs := start.Sub(t0).Nanoseconds()
	tick := time.NewTicker(latencyTick)
	issued := 0
	for issued < total && pctx.Err() == nil {
		select {
		case <-tick.C:
		case <-pctx.Done():
		}
		due := min(int(rate*time.Since(start).Seconds()), total)
		for ; issued < due; issued++ {
			tokens <- struct{}{} // never blocks: capacity is total
		}
	}
	tick.Stop()
	close(tokens)
	producers.Wait()
	if e := prodErr.Load(); e != nil {
		return Run{}, fmt.Errorf("enqueue: %w", *e)
	}

	// Wait for the handlers to start every job (bounded).
	timedOut := false
	wait := time.NewTimer(b.o.runTimeout)
	select {
	case <-allDone:
	case err := <-errc:
		wait.Stop()
		return Run{}, fmt.Errorf("consumer returned early: %v", err)
	case <-wait.C:
		timedOut = true
	case <-ctx.Done():
		timedOut = true
	}
	wait.Stop()
	n := int(min(handled.Load(), int64(total)))
	run := p.stop(ctx, int64(n), timedOut)
	cancel()
	if err := waitStopped(errc); err != nil {
		return Run{}, fmt.Errorf("consumer: %w", err)
	}
	if ctx.Err() != nil {
		return Run{}, context.Cause(ctx)
	}

	got := slices.Clone(lat[:n])
	slices.Sort(got)
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	prodSecs := float64(lastEnq.Load()-startNs) / 1e9
	l := &Latency{
		OfferedRate: rate,
		Samples:     n,
		P50:         ms(percentile(got, 50)),
		P99:         ms(percentile(got, 99)),
		P999:        ms(percentile(got, 99.9)),
	}
	if n > 0 {
		l.Max = ms(got[n-1])
	}
	if prodSecs > 0 {
		l.AchievedRate = float64(total) / prodSecs
	}
	run.Latency = l
	run.Rate = l.AchievedRate
	return run, nil
}

// calibrateTime bounds the measurement of the max pipeline rate.
const calibrateTime = 5 * time.Second

// pipelineMax measures the highest rate streamq sustains with producers and
// consumer running together in this process (as in the latency runs): the
// latencyProducers goroutines enqueue one job per call as fast as they can
// for up to 5 s while a consumer with concurrency c handles them; the rate is
// the number of jobs handled in that time. On a small machine the producers
// and the consumer compete for the same cores, so this is well below the
// consume-only rate of the e2e scenario.
func (b *bench) pipelineMax(ctx context.Context, c int) (float64, error) {
	name := b.name("cal", strconv.Itoa(c))
	rdb := redis.NewClient(&redis.Options{Addr: b.o.addr, PoolSize: c + latencyProducers + 8})
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, name, nil)
	if err != nil {
		return 0, err
	}
	keys := queueKeys(q)
	b.track(keys...)
	defer b.drop(keys...)
	if err := q.Setup(ctx); err != nil {
		return 0, err
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		return 0, err
	}
	var handled atomic.Int64
	h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		handled.Add(1)
		return nil
	})
	cons, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Name: "bench", Concurrency: c})
	if err != nil {
		return 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- cons.Run(rctx) }()
	d := min(calibrateTime, b.o.latDuration)
	pctx, pcancel := context.WithTimeout(rctx, d)
	defer pcancel()
	payload := makePayload(b.o.payload)
	var producers sync.WaitGroup
	var prodErr atomic.Pointer[error]
	start := time.Now()
	for range latencyProducers {
		producers.Go(func() {
			for pctx.Err() == nil {
				if _, err := p.Enqueue(pctx, payload); err != nil {
					if pctx.Err() == nil {
						prodErr.CompareAndSwap(nil, &err)
						pcancel()
					}
					return
				}
			}
		})
	}
	producers.Wait()
	n := handled.Load()
	elapsed := time.Since(start)
	cancel()
	if err := waitStopped(errc); err != nil {
		return 0, fmt.Errorf("consumer: %w", err)
	}
	if e := prodErr.Load(); e != nil {
		return 0, fmt.Errorf("enqueue: %w", *e)
	}
	if ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	return float64(n) / elapsed.Seconds(), nil
}
