package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/outbox"
)

// Benchmarks against the tests' Redis, the test PostgreSQL and SQLite
// files; see docs/performance.md for figures:
//
//	go test -run '^$' -bench 'Relay|CommitToStart' -benchtime 5000x -count 3 ./outbox/

// benchPayload is the payload of every benchmark job.
var benchPayload = []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" +
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef") // 128 bytes

// benchBatch is the relay's batch size and the baseline's EnqueueBatch size.
const benchBatch = 500

// fill commits n rows for q, benchBatch per transaction.
func (tb *table) fill(b testing.TB, q *streamq.Queue, n int) {
	b.Helper()
	for start := 0; start < n; start += benchBatch {
		inTx(b, tb.db, true, func(tx *sql.Tx) error {
			for range min(benchBatch, n-start) {
				if _, err := tb.enqueue(b.Context(), tx, q, benchPayload); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// BenchmarkRelay measures how fast a relay moves committed rows to Redis
// (per job: claim, enqueue, delete), against EnqueueBatch of the same jobs
// in batches of the same size (the baseline).
func BenchmarkRelay(b *testing.B) {
	for _, driver := range drivers {
		for _, batches := range []int{1, 4} {
			b.Run(fmt.Sprintf("%s/batches=%d", driver, batches), func(b *testing.B) {
				tb := openTable(b, driver, false)
				c := redistest.NewClient(b)
				q, p := newQueue(b, c)
				tb.fill(b, q, b.N)
				r := newRelay(b, tb.store, outbox.RelayConfig{BatchSize: benchBatch, Batches: batches, PollInterval: time.Millisecond}, p)
				b.ResetTimer()
				run := redistest.Background(b, "relay", 10*time.Minute, r.Run)
				// Wait on the stream's length (XLEN costs nothing), then for
				// the last batch's rows to go: polling the table's backlog
				// all along cost the benchmark more CPU than the relay.
				redistest.WaitFor(b, 10*time.Minute, "the jobs in the stream", func() bool {
					n, err := c.XLen(b.Context(), keys(q).Stream).Result()
					return err == nil && n == int64(b.N)
				})
				tb.waitEmpty(b, time.Minute)
				b.StopTimer()
				if err := run.Stop(); err != nil {
					b.Fatal(err)
				}
				if n := len(payloads(b, c, q)); n != b.N {
					b.Fatalf("relayed %d rows, want %d", n, b.N)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			})
		}
	}
	b.Run("EnqueueBatch", func(b *testing.B) {
		c := redistest.NewClient(b)
		_, p := newQueue(b, c)
		jobs := make([]streamq.Job, benchBatch)
		for i := range jobs {
			jobs[i].Payload = benchPayload
		}
		b.ResetTimer()
		for start := 0; start < b.N; start += benchBatch {
			if _, err := p.EnqueueBatch(b.Context(), jobs[:min(benchBatch, b.N-start)]); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	})
}

// BenchmarkCommitToStart measures the time from a transaction's commit to
// its job's handler start, one job at a time, with a relay that wakes on
// LISTEN/NOTIFY and with one that polls every 100 ms; it reports the p50
// and p99 in ms.
func BenchmarkCommitToStart(b *testing.B) {
	for _, mode := range []string{"notify", "poll-100ms"} {
		b.Run(mode, func(b *testing.B) {
			tb := openTable(b, "postgres", mode == "notify")
			c := redistest.NewClient(b)
			q, p := newQueue(b, c)
			started := make(chan time.Time, 1)
			cons, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
				started <- time.Now()
				return nil
			}), nil)
			if err != nil {
				b.Fatal(err)
			}
			redistest.Background(b, "consumer", 10*time.Minute, cons.Run)
			poll := 100 * time.Millisecond
			if mode == "notify" {
				poll = time.Hour
			}
			r := newRelay(b, tb.store, outbox.RelayConfig{PollInterval: poll}, p)
			redistest.Background(b, "relay", 10*time.Minute, r.Run)
			if mode == "notify" {
				waitListening(b, tb)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				tx, err := tb.db.BeginTx(b.Context(), nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tb.enqueue(b.Context(), tx, q, []byte(strconv.Itoa(i))); err != nil {
					b.Fatal(err)
				}
				committed := time.Now() // the commit's start: the job may start before Commit returns
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				select {
				case at := <-started:
					lat = append(lat, at.Sub(committed))
				case <-time.After(30 * time.Second):
					b.Fatalf("job %d did not start within 30s of its commit", i)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
			b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
		})
	}
}
