package pool

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkPool_Launch measures the pool's own cost per job: take slots,
// register, launch on a handler goroutine, run a no-op work function,
// release and unregister. One op is one job.
func BenchmarkPool_Launch(b *testing.B) {
	for _, conc := range []int{1, 16, 64} {
		b.Run("concurrency="+strconv.Itoa(conc), func(b *testing.B) {
			p := New(context.Background(), Config{Concurrency: conc, ShutdownTimeout: wait}, func(*Job[int]) bool { return false })
			keys := make([]string, 4096)
			for i := range keys {
				keys[i] = strconv.Itoa(i)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for i < b.N {
				n, err := p.Slots(ctx, int64(conc), true, int64(conc/2), 0)
				if err != nil {
					b.Fatal(err)
				}
				n = min(n, int64(b.N-i))
				for range n {
					p.Launch(p.Register(keys[i%len(keys)], i), 1, time.Now())
					i++
				}
			}
			p.Drain(func(int) {})
			p.Close()
		})
	}
}
