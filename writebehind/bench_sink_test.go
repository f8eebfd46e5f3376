package writebehind_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/streamq/streamq/writebehind"
)

// BenchmarkSQLSink measures how many rows per second an SQLSink stores, with
// batches of 500 changes per Write (one transaction) against one change per
// Write. One iteration is one Write. The keys cycle through a fixed key space,
// so after the first pass every change updates an existing row, like a cache
// that keeps changing the same keys.
//
//	go test -run x -bench SQLSink -benchtime 2000x ./writebehind/
func BenchmarkSQLSink(b *testing.B) {
	const (
		keySpace  = 10_000
		valueSize = 100
	)
	keys := make([]string, keySpace)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%05d", i)
	}
	value := bytes.Repeat([]byte("v"), valueSize)

	for _, d := range sinkDialects() {
		b.Run(d.String(), func(b *testing.B) {
			for _, bc := range []struct {
				name  string
				batch int
			}{
				{"batch500", 500},
				{"row", 1},
			} {
				b.Run(bc.name, func(b *testing.B) {
					s := setupSink(b, d, nil)
					ctx := context.Background()
					batch := make([]writebehind.Change, bc.batch)
					rows := 0
					for b.Loop() {
						for j := range batch {
							batch[j] = writebehind.Change{
								Key:     keys[rows%keySpace],
								Value:   value,
								Version: int64(rows/keySpace + 1), // grows each pass over the keys
							}
							rows++
						}
						if err := s.Write(ctx, batch); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
				})
			}
		})
	}
}
