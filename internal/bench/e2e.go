package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
)

// ackBatch is the most IDs the baseline acknowledges in one XACK, the same
// bound as streamq's consumer uses.
const ackBatch = 512

// stopTimeout bounds waiting for a consumer to return after its run.
const stopTimeout = time.Minute

func (b *bench) scenarioE2E(ctx context.Context, scenario string, mw []streamq.Middleware) error {
	for _, c := range b.o.concurrency {
		r := Result{Scenario: scenario, Variant: fmt.Sprintf("concurrency=%d", c), Param: c, Unit: "jobs/s"}
		for i := range b.o.runs {
			for _, sd := range order(i) {
				var run Run
				var err error
				if sd == sideStreamq {
					run, err = b.e2eStreamq(ctx, c, b.o.jobs, mw, i)
				} else {
					run, err = b.e2eBaseline(ctx, c, b.o.jobs, i)
				}
				if err != nil {
					return err
				}
				r.add(sd, run)
			}
		}
		r.finish()
		note := fmt.Sprintf("cmds/job %.3f vs %.3f, %s",
			r.Streamq.ServerCmdsPerJob, r.Baseline.ServerCmdsPerJob, costNote(&r))
		if r.Notes != "" {
			note += "; " + r.Notes
		}
		if scenario == "middleware" && b.chainNote != "" {
			note += "; chain: " + b.chainNote
		}
		r.Notes = note
		b.emit(r)
	}
	return nil
}

// e2eStreamq pre-enqueues n jobs, then runs a Consumer with a no-op handler
// until all n are acknowledged (seen by the client hook on XACK replies).
func (b *bench) e2eStreamq(ctx context.Context, c, n int, mw []streamq.Middleware, i int) (Run, error) {
	name := b.name("e2e", strconv.Itoa(c), strconv.Itoa(i), "s")
	q0, err := streamq.NewQueue(b.admin, name, nil)
	if err != nil {
		return Run{}, err
	}
	hook := newCountHook(core.Of(q0).Keys.Stream, int64(n))
	rdb := newClient(b.o.addr, hook, c+10)
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, name, nil)
	if err != nil {
		return Run{}, err
	}
	keys := queueKeys(q)
	b.track(keys...)
	defer b.drop(keys...)
	if err := q.Setup(ctx); err != nil {
		return Run{}, err
	}
	if err := b.prefill(ctx, core.Of(q).Keys.Stream, n, makePayload(b.o.payload)); err != nil {
		return Run{}, err
	}
	noop := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
	cons, err := streamq.NewConsumer(q, noop, &streamq.ConsumerConfig{Name: "bench", Concurrency: c, Middleware: mw})
	if err != nil {
		return Run{}, err
	}
	run, err := b.consume(ctx, hook, n, sideStreamq, cons.Run)
	if err != nil {
		return Run{}, err
	}
	if st := cons.Stats(); st.Failed+st.Retried+st.DeadLettered > 0 {
		return Run{}, fmt.Errorf("consumer had failures with a no-op handler: %+v", st)
	}
	return run, nil
}

// consume runs a consumer of side sd until hook saw n jobs acknowledged or
// the run timed out, measuring Redis around it, then stops it and waits for
// it to return. Its goroutines carry sd's profile label (see labelled).
func (b *bench) consume(ctx context.Context, hook *countHook, n int, sd side, run func(context.Context) error) (Run, error) {
	what := "consumer"
	if sd == sideBaseline {
		what = "baseline consumer"
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := startProbe(ctx, b.admin, hook)
	if err != nil {
		return Run{}, err
	}
	errc := make(chan error, 1)
	go labelled(rctx, sd, func(ctx context.Context) { errc <- run(ctx) })
	timedOut, runErr := waitDone(ctx, hook.done, errc, b.o.runTimeout)
	res := p.stop(ctx, min(hook.acked.Load(), int64(n)), timedOut)
	cancel()
	if runErr == nil {
		runErr = waitStopped(errc)
	}
	if runErr != nil {
		return Run{}, fmt.Errorf("%s: %w", what, runErr)
	}
	if ctx.Err() != nil {
		return Run{}, context.Cause(ctx)
	}
	return res, nil
}

// waitDone waits for done, a consumer error, the run timeout or ctx.
func waitDone(ctx context.Context, done <-chan struct{}, errc <-chan error, timeout time.Duration) (timedOut bool, err error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		return false, nil
	case err := <-errc:
		if err == nil {
			err = errors.New("returned before the run finished")
		}
		return false, err
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		return true, nil
	}
}

// waitStopped waits (bounded) for Run to return after its context ended.
func waitStopped(errc <-chan error) error {
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	select {
	case err := <-errc:
		return err
	case <-t.C:
		return fmt.Errorf("did not return within %s of its context ending", stopTimeout)
	}
}

// baselineConsumer is the minimal hand-written consumer the e2e and latency
// scenarios compare with: one reader doing XREADGROUP COUNT c BLOCK 1s, c
// handler goroutines fed through an unbuffered channel (so at most c entries
// are off the reader at once), and one acker sending one XACK with every ID
// finished since its last flush (up to ackBatch).
type baselineConsumer struct {
	rdb     *redis.Client
	key     string
	c       int
	handler func(m redis.XMessage)
}

func (bc *baselineConsumer) run(ctx context.Context) error {
	work := make(chan redis.XMessage)
	done := make(chan string, 2*bc.c)
	var readErr error
	var wg, ackWG sync.WaitGroup
	wg.Go(func() {
		defer close(work)
		for ctx.Err() == nil {
			res, err := bc.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group:    baselineGroup,
				Consumer: "bench",
				Streams:  []string{bc.key, ">"},
				Count:    int64(bc.c),
				Block:    time.Second,
			}).Result()
			if err != nil {
				if errors.Is(err, redis.Nil) {
					continue
				}
				if ctx.Err() == nil {
					readErr = err
				}
				return
			}
			for _, s := range res {
				for _, m := range s.Messages {
					select {
					case work <- m:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	})
	var handlers sync.WaitGroup
	for range bc.c {
		handlers.Go(func() {
			for m := range work {
				bc.handler(m)
				done <- m.ID
			}
		})
	}
	var ackErr error
	ackWG.Go(func() {
		ids := make([]string, 0, ackBatch)
		for id := range done {
			ids = append(ids[:0], id)
		fill:
			for len(ids) < ackBatch {
				select {
				case id, ok := <-done:
					if !ok {
						break fill
					}
					ids = append(ids, id)
				default:
					break fill
				}
			}
			actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := bc.rdb.XAck(actx, bc.key, baselineGroup, ids...).Err(); err != nil && ackErr == nil {
				ackErr = err
			}
			cancel()
		}
	})
	wg.Wait()
	handlers.Wait()
	close(done)
	ackWG.Wait()
	return errors.Join(readErr, ackErr)
}

// e2eBaseline is e2eStreamq for the baseline consumer.
func (b *bench) e2eBaseline(ctx context.Context, c, n, i int) (Run, error) {
	key := baselineKey(b.name("e2e", strconv.Itoa(c), strconv.Itoa(i), "b"))
	b.track(key)
	defer b.drop(key)
	hook := newCountHook(key, int64(n))
	rdb := newClient(b.o.addr, hook, c+10)
	defer rdb.Close()
	if err := createBaselineGroup(ctx, b.admin, key); err != nil {
		return Run{}, err
	}
	if err := b.prefill(ctx, key, n, makePayload(b.o.payload)); err != nil {
		return Run{}, err
	}
	bc := &baselineConsumer{rdb: rdb, key: key, c: c, handler: func(redis.XMessage) {}}
	return b.consume(ctx, hook, n, sideBaseline, bc.run)
}

// scenarioMiddleware is the end-to-end scenario with a middleware chain.
func (b *bench) scenarioMiddleware(ctx context.Context) error {
	mw, note, cleanup := middlewareChain(b.o)
	defer cleanup()
	if mw == nil {
		fmt.Fprintf(b.out, "%-28s skipped: %s\n", "middleware", note)
		return nil
	}
	b.chainNote = note
	return b.scenarioE2E(ctx, "middleware", mw)
}
