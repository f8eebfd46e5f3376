package engine

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// The engine's own cost per job, without Redis: a backend that makes jobs
// in memory as fast as they are asked for, against the smallest hand-written
// pipeline that moves the same jobs (one reader, c handler goroutines fed
// through an unbuffered channel, one acker batching finished IDs), as the
// e2e baseline of cmd/streamq-bench does around real Redis calls. Both sides
// build the same fields map per job (what go-redis hands over), so the
// difference is the engine's bookkeeping. One op is one job.
//
//	go test -run '^$' -bench 'Engine_(Run|Baseline)' -benchmem ./internal/engine/

// benchFields returns the fields of a job as go-redis decodes a stream
// entry: a fresh map of strings.
func benchFields(payload string, enq string) map[string]any {
	return map[string]any{wire.FieldVersion: "1", wire.FieldPayload: payload, wire.FieldEnqueued: enq}
}

// genBackend makes total jobs on demand and counts their acknowledgements.
type genBackend struct {
	total   int64
	made    int64 // owned by the fetch loop
	acked   atomic.Int64
	done    chan struct{}
	once    sync.Once
	payload string
	enq     string
	buf     []Delivery
}

func newGen(total int) *genBackend {
	return &genBackend{total: int64(total), done: make(chan struct{}), payload: string(make([]byte, 128)),
		enq: strconv.FormatInt(time.Now().UnixMilli(), 10), buf: make([]Delivery, 1024)}
}

func (g *genBackend) Start(context.Context) error { return nil }

func (g *genBackend) Fetch(ctx context.Context, n int, wait time.Duration, _ func(string) bool) ([]Delivery, error) {
	n = int(min(int64(n), g.total-g.made))
	if n <= 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		return nil, nil
	}
	ds := g.buf[:n] // reused, as the stream backend does
	for i := range ds {
		g.made++
		id := "1700000000000-" + strconv.FormatInt(g.made, 10)
		ds[i] = Delivery{Key: id, ID: id, Fields: benchFields(g.payload, g.enq), Charged: true}
	}
	return ds, nil
}

func (g *genBackend) Charge(context.Context, *Delivery, bool) (bool, error) { return true, nil }
func (g *genBackend) Touch(context.Context, []string) ([]string, error)     { return nil, nil }

func (g *genBackend) Finish(_ context.Context, done []Finished) error {
	ids := make([]string, len(done)) // as the stream backend's XACK arguments
	for i, f := range done {
		ids[i] = f.Key
	}
	if g.acked.Add(int64(len(ids))) >= g.total {
		g.once.Do(func() { close(g.done) })
	}
	return nil
}

func (g *genBackend) Move(context.Context, *Delivery, []any, time.Duration, rdb.Settle) (bool, error) {
	return true, nil
}
func (g *genBackend) DeadLetter(context.Context, *Delivery, string, string, rdb.Settle, []any) (string, error) {
	return "", nil
}
func (g *genBackend) DropCancels(context.Context, []string) error { return nil }
func (g *genBackend) Abandon(string)                              {}
func (g *genBackend) Loops() []Loop                               { return nil }
func (g *genBackend) Wake()                                       {}

// benchMsg is a handler's view of a job, as the root package's Message.
type benchMsg struct {
	ID, JobID, Queue string
	Payload          []byte
	Headers          map[string]string
	EnqueuedAt       time.Time
	Attempt          int
}

type benchExec struct{}

func (benchExec) Call(_ context.Context, r Run, m *benchMsg) error {
	*m = benchMsg{ID: r.ID, JobID: r.ID, Queue: r.Queue, Payload: r.Job.Payload, Headers: r.Headers,
		EnqueuedAt: time.UnixMilli(r.Job.EnqMillis), Attempt: r.Attempt}
	return nil
}

func (benchExec) Classify(error) Outcome { return Outcome{Kind: Fail} }

func BenchmarkEngine_Run(b *testing.B) {
	benchmarkRun(b, false)
}

// BenchmarkEngine_RunLatency is BenchmarkEngine_Run with the wait and run
// time recording of a run that writes statistics (a control loop and a
// DB): compare the two in one run for the recording's cost.
//
//	go test -run '^$' -bench 'Engine_Run' -benchmem -count 5 ./internal/engine/
func BenchmarkEngine_RunLatency(b *testing.B) {
	benchmarkRun(b, true)
}

func benchmarkRun(b *testing.B, latency bool) {
	for _, c := range []int{1, 16, 64} {
		b.Run("concurrency="+strconv.Itoa(c), func(b *testing.B) {
			g := newGen(b.N)
			e := New[benchMsg](Config{
				Queue: "q", Concurrency: c, Block: time.Second, JobTimeout: 5 * time.Minute,
				ShutdownTimeout: wait, TouchEvery: time.Minute, TouchTimeout: time.Second,
				MaxDeliveries: 10, Backoff: func(int) time.Duration { return time.Second }, FinishBatch: 512,
				ShutdownCause: errShutdown, LostCause: errLost, TimeoutCause: errTimeout,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			}, benchExec{})
			e.recordLatency = latency
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			go func() { errc <- e.Run(ctx, g) }()
			select {
			case <-g.done:
			case <-time.After(time.Minute):
				b.Fatal("jobs not finished within a minute")
			}
			b.StopTimer()
			cancel()
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
		})
	}
}

func BenchmarkEngine_Baseline(b *testing.B) {
	for _, c := range []int{1, 16, 64} {
		b.Run("concurrency="+strconv.Itoa(c), func(b *testing.B) {
			g := newGen(b.N)
			type entry struct {
				id     string
				fields map[string]any
			}
			work := make(chan entry)
			fin := make(chan string, 2*c)
			var wg, hw sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			wg.Go(func() {
				defer close(work)
				for made := 0; made < b.N; {
					n := min(c, b.N-made)
					batch := make([]entry, n)
					for i := range batch {
						made++
						id := "1700000000000-" + strconv.Itoa(made)
						batch[i] = entry{id, benchFields(g.payload, g.enq)}
					}
					for _, e := range batch {
						work <- e
					}
				}
			})
			for range c {
				hw.Go(func() {
					for e := range work { // a no-op handler, as the e2e baseline's
						fin <- e.id
					}
				})
			}
			var acked int
			wg.Go(func() {
				ids := make([]string, 0, 512)
				for id := range fin {
					ids = append(ids[:0], id)
				fill:
					for len(ids) < 512 {
						select {
						case id, ok := <-fin:
							if !ok {
								break fill
							}
							ids = append(ids, id)
						default:
							break fill
						}
					}
					acked += len(append([]string(nil), ids...))
				}
			})
			hw.Wait()
			close(fin)
			wg.Wait()
			b.StopTimer()
			if acked != b.N {
				b.Fatalf("acked %d of %d", acked, b.N)
			}
		})
	}
}
