package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
)

// baselineMaxLen is the MAXLEN ~ of the baseline's XADDs: streamq's default
// cap, so both sides bound the stream alike.
const baselineMaxLen = streamq.DefaultMaxLen

// baselineGroup is the consumer group of baseline streams.
const baselineGroup = "workers"

// makePayload returns n printable bytes.
func makePayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// baselineKey is the stream of a baseline measurement; it shares the naming
// scheme (and the run ID) of streamq's keys.
func baselineKey(name string) string { return "streamq-bench:{" + name + "}:baseline" }

// baselineFields are the fields of a baseline entry: the same as a streamq
// job without headers (v, payload, enq), so both sides move the same bytes.
func baselineFields(payload []byte) []any {
	return []any{"v", "1", "payload", payload, "enq", strconv.FormatInt(time.Now().UnixMilli(), 10)}
}

func baselineXAdd(key string, payload []byte) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: key, MaxLen: baselineMaxLen, Approx: true, Values: baselineFields(payload)}
}

// side is one half of a measurement.
type side int

const (
	sideStreamq side = iota
	sideBaseline
)

// labelled runs f with the CPU profile label side=streamq or
// side=baseline, which the goroutines it starts inherit, so that a profile
// of a whole run (-cpuprofile) can be split by side:
//
//	go tool pprof -tagfocus side=streamq streamq-bench cpu.out
func labelled(ctx context.Context, sd side, f func(context.Context)) {
	name := "streamq"
	if sd == sideBaseline {
		name = "baseline"
	}
	pprof.Do(ctx, pprof.Labels("side", name), f)
}

func (s side) String() string {
	if s == sideStreamq {
		return "s"
	}
	return "b"
}

// order returns the sides in the order run i measures them; alternating
// spreads warm-up and drift over both.
func order(i int) []side {
	if i%2 == 0 {
		return []side{sideStreamq, sideBaseline}
	}
	return []side{sideBaseline, sideStreamq}
}

func (b *bench) scenarioEnqueue(ctx context.Context) error {
	for _, g := range b.o.producers {
		r := Result{Scenario: "enqueue", Variant: fmt.Sprintf("goroutines=%d", g), Param: g, Unit: "jobs/s"}
		for i := range b.o.runs {
			for _, sd := range order(i) {
				run, err := b.enqueueRun(ctx, sd, g, 1, i)
				if err != nil {
					return err
				}
				r.add(sd, run)
			}
		}
		r.finish()
		r.Notes = joinNotes(costNote(&r), r.Notes)
		b.emit(r)
	}
	return nil
}

func (b *bench) scenarioBatch(ctx context.Context) error {
	for _, bs := range b.o.batchSizes {
		r := Result{Scenario: "batch", Variant: fmt.Sprintf("batch=%d", bs), Param: bs, Unit: "jobs/s"}
		for i := range b.o.runs {
			for _, sd := range order(i) {
				run, err := b.enqueueRun(ctx, sd, 1, bs, i)
				if err != nil {
					return err
				}
				r.add(sd, run)
			}
		}
		r.finish()
		r.Notes = joinNotes(costNote(&r), r.Notes)
		b.emit(r)
	}
	return nil
}

// costNote says what a job cost on each side of a finished result:
// allocations and CPU of this process (and of its garbage collector), and
// CPU of the Redis server.
func costNote(r *Result) string {
	return fmt.Sprintf("allocs/job %.1f vs %.1f, cpu µs/job %.1f vs %.1f (gc %.2f vs %.2f), redis µs/job %.1f vs %.1f",
		r.Streamq.AllocsPerJob, r.Baseline.AllocsPerJob, r.Streamq.CPUMicrosPerJob, r.Baseline.CPUMicrosPerJob,
		r.Streamq.GCMicrosPerJob, r.Baseline.GCMicrosPerJob, r.Streamq.RedisCPUMicrosPerJob, r.Baseline.RedisCPUMicrosPerJob)
}

// joinNotes joins the non-empty notes with "; ".
func joinNotes(notes ...string) string {
	return strings.Join(slices.DeleteFunc(notes, func(s string) bool { return s == "" }), "; ")
}

func (r *Result) add(sd side, run Run) {
	if run.TimedOut {
		r.Notes = "some runs hit -run-timeout"
	}
	if sd == sideStreamq {
		r.Streamq.Runs = append(r.Streamq.Runs, run)
	} else {
		r.Baseline.Runs = append(r.Baseline.Runs, run)
	}
}

// enqueueRun enqueues -enqueue-jobs jobs with g goroutines, batch jobs per
// call (1: Enqueue / a single XADD; more: EnqueueBatch / a pipeline).
func (b *bench) enqueueRun(ctx context.Context, sd side, g, batch, i int) (Run, error) {
	name := b.name("enq", strconv.Itoa(g), strconv.Itoa(batch), strconv.Itoa(i), sd.String())
	hook := newCountHook("", 0)
	rdb := newClient(b.o.addr, hook, g+4)
	defer rdb.Close()
	payload := makePayload(b.o.payload)

	var call func(ctx context.Context, n int) error
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
		jobs := make([]streamq.Job, batch)
		for j := range jobs {
			jobs[j].Payload = payload
		}
		call = func(ctx context.Context, n int) error {
			if batch == 1 {
				_, err := p.Enqueue(ctx, payload)
				return err
			}
			_, err := p.EnqueueBatch(ctx, jobs[:n])
			return err
		}
	case sideBaseline:
		key := baselineKey(name)
		keys = []string{key}
		b.track(key)
		if err := createBaselineGroup(ctx, b.admin, key); err != nil {
			return Run{}, err
		}
		call = func(ctx context.Context, n int) error {
			if batch == 1 {
				return rdb.XAdd(ctx, baselineXAdd(key, payload)).Err()
			}
			pipe := rdb.Pipeline()
			for range n {
				pipe.XAdd(ctx, baselineXAdd(key, payload))
			}
			_, err := pipe.Exec(ctx)
			return err
		}
	}
	defer b.drop(keys...)

	total := int64(b.o.enqueueJobs)
	rctx, cancel := context.WithTimeout(ctx, b.o.runTimeout)
	defer cancel()
	p, err := startProbe(ctx, b.admin, hook)
	if err != nil {
		return Run{}, err
	}
	var (
		next, done atomic.Int64
		wg         sync.WaitGroup
		errOnce    sync.Once
		firstErr   error
	)
	for range g {
		wg.Go(func() {
			labelled(rctx, sd, func(rctx context.Context) {
				for rctx.Err() == nil {
					start := next.Add(int64(batch)) - int64(batch)
					if start >= total {
						return
					}
					n := int(min(int64(batch), total-start))
					if err := call(rctx, n); err != nil {
						if rctx.Err() == nil {
							errOnce.Do(func() { firstErr = err })
							cancel()
						}
						return
					}
					done.Add(int64(n))
				}
			})
		})
	}
	wg.Wait()
	if firstErr != nil {
		return Run{}, firstErr
	}
	timedOut := errors.Is(rctx.Err(), context.DeadlineExceeded)
	if ctx.Err() != nil {
		return Run{}, context.Cause(ctx)
	}
	return p.stop(ctx, done.Load(), timedOut), nil
}

// queueKeys lists every key a streamq queue may own.
func queueKeys(q *streamq.Queue) []string {
	return []string{core.Of(q).Keys.Stream, core.Of(q).Keys.Dead, core.Of(q).Keys.Delayed, core.Of(q).Keys.Part("delayed:jobs")}
}

func createBaselineGroup(ctx context.Context, rdb *redis.Client, key string) error {
	err := rdb.XGroupCreateMkStream(ctx, key, baselineGroup, "0").Err()
	if err != nil {
		return fmt.Errorf("create baseline group on %s: %w", key, err)
	}
	return nil
}

// prefill appends n jobs in the streamq wire format to key, in pipelines of
// 1,000, with the admin client (not measured).
func (b *bench) prefill(ctx context.Context, key string, n int, payload []byte) error {
	for start := 0; start < n; start += 1000 {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		pipe := b.admin.Pipeline()
		for range min(1000, n-start) {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: baselineFields(payload)})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("prefill %s: %w", key, err)
		}
	}
	return nil
}
