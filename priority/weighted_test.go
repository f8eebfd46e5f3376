package priority_test

import (
	"strconv"
	"testing"

	"github.com/streamq/streamq/priority"
)

// TestWorker_Weighted fills three bands weighted 6:3:1 and checks that a
// worker (concurrency 1) takes exactly 60, 30 and 10 of its first 100 jobs
// from them, FIFO within a band, so the lowest band is not starved while the
// upper ones hold work.
func TestWorker_Weighted(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	const perBand = 100
	var prios []int
	for range perBand {
		prios = append(prios, 100, 50, -100)
	}
	e.push(t, prios...)
	bands := []priority.Band{
		{Min: 100, Max: priority.MaxPriority, Weight: 6},
		{Min: 0, Max: 99, Weight: 3},
		{Min: priority.MinPriority, Max: -1, Weight: 1},
	}
	order := drainOrder(t, e, 3*perBand, priority.WorkerConfig{Bands: bands})
	count := map[int]int{}
	last := map[int]int{100: -1, 50: -1, -100: -1}
	for i, s := range order {
		n, _ := strconv.Atoi(s)
		p := prios[n]
		if i < 100 {
			count[p]++
		}
		if n <= last[p] {
			t.Errorf("job %d (priority %d) ran after job %d of the same priority: not FIFO", n, p, last[p])
		}
		last[p] = n
	}
	if count[100] != 60 || count[50] != 30 || count[-100] != 10 {
		t.Errorf("first 100 jobs by band: %v, want 60/30/10", count)
	}
	if len(order) != 3*perBand {
		t.Errorf("%d jobs ran, want %d", len(order), 3*perBand)
	}
}
