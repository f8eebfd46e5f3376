package writebehind_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
)

// Benchmark parameters.
const (
	benchKeys    = 10_000 // key space of the updates
	benchValue   = 100    // value size in bytes
	benchWriters = 16     // goroutines calling Writer.Set
)

// BenchmarkWriter_Set measures Writer.Set alone: one Lua script per update,
// from benchWriters goroutines.
//
//	go test -run x -bench Writer_Set ./writebehind/
func BenchmarkWriter_Set(b *testing.B) {
	q := newQueue(b, &streamq.QueueConfig{MaxLen: -1})
	w := newWriter(b, q, nil)
	value := make([]byte, benchValue)
	var n atomic.Int64
	b.SetParallelism(benchWriters)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if _, err := w.Set(context.Background(), fmt.Sprintf("user:%05d", i%benchKeys), value); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
}

// BenchmarkWriteBehind measures rows persisted per second end to end
// (Writer.Set -> stream -> consumer -> Handler -> SQLSink) with batches of up
// to 500 changes per transaction ("batch500") against one change per
// transaction (MaxBatch 1, "row"), for SQLite and PostgreSQL. One iteration
// is one update. Each dialect logs the ratio batch500/row for both modes:
//
//   - drain: the Writer first queues b.N updates (not timed), then the clock
//     runs from starting the consumer until the handler has committed every
//     update. This is the persistence path alone, where batching matters:
//     how fast a backlog is worked off.
//   - live: writers (benchWriters goroutines) and the consumer run together;
//     the clock runs from the first Set until every update is committed.
//     Batched, this is bounded by how fast the Writer can write to Redis.
//
// The updates cycle through benchKeys keys, so batches rarely hold two changes
// of one key and coalescing does not inflate the figures. -v shows the ratio
// lines.
//
//	go test -run x -v -bench WriteBehind -benchtime 20000x ./writebehind/
func BenchmarkWriteBehind(b *testing.B) {
	for _, d := range e2eDialects() {
		b.Run(d.String(), func(b *testing.B) {
			for _, live := range []bool{false, true} {
				mode := "drain"
				if live {
					mode = "live"
				}
				rates := map[string]float64{}
				for _, bc := range []struct {
					name     string
					maxBatch int
				}{
					{"batch500", 500},
					{"row", 1},
				} {
					b.Run(mode+"/"+bc.name, func(b *testing.B) {
						rates[bc.name] = benchEndToEnd(b, d, bc.maxBatch, live)
					})
				}
				if rates["row"] > 0 && rates["batch500"] > 0 {
					b.Logf("%s %s: %.0f rows/s batched, %.0f rows/s one per transaction: batching is %.1fx faster",
						d, mode, rates["batch500"], rates["row"], rates["batch500"]/rates["row"])
				}
			}
		})
	}
}

// benchEndToEnd runs b.N updates through the whole pipeline and returns the
// rows/s it reported. With live false the updates are queued before the
// consumer starts and only their persistence is timed.
func benchEndToEnd(b *testing.B, d writebehind.Dialect, maxBatch int, live bool) float64 {
	sink := newSink(b, d, "")
	q := newQueue(b, &streamq.QueueConfig{MaxLen: -1})
	w := newWriter(b, q, nil)
	h := newHandler(b, sink, &writebehind.HandlerConfig{MaxBatch: maxBatch})
	cfg := consumerConfig(streamq.ConsumerConfig{Concurrency: 2 * writebehind.DefaultMaxBatch})
	value := make([]byte, benchValue)
	write := func() {
		var (
			next atomic.Int64
			wg   sync.WaitGroup
		)
		for range benchWriters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(b.N) {
						return
					}
					if _, err := w.Set(context.Background(), fmt.Sprintf("user:%05d", i%benchKeys), value); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}

	var start time.Time
	if live {
		runConsumer(b, q, h, cfg)
		b.ResetTimer()
		start = time.Now()
		write()
	} else {
		write()
		b.ResetTimer()
		start = time.Now()
		runConsumer(b, q, h, cfg)
	}
	// Wait (bounded) for the handler to commit every update.
	deadline := time.Now().Add(10 * time.Minute)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for h.Stats().Changes < int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d updates persisted after 10 minutes", h.Stats().Changes, b.N)
		}
		<-tick.C
	}
	elapsed := time.Since(start)
	b.StopTimer()
	s := h.Stats()
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "rows/s")
	b.ReportMetric(float64(s.Changes)/float64(max(s.Batches, 1)), "changes/batch")
	return rate
}
