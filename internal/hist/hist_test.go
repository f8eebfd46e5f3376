package hist

import (
	"testing"
	"time"
)

// TestIndex checks that every bucket's range holds the durations Index puts
// in it and that Mid is within the documented bound of each.
func TestIndex(t *testing.T) {
	t.Parallel()
	for i := range Buckets - 1 {
		lo, hi := Lower(i), Lower(i+1)
		if hi <= lo {
			t.Fatalf("bucket %d: Lower %v, next %v", i, lo, hi)
		}
		for _, d := range []time.Duration{lo, hi - time.Microsecond, lo + (hi-lo)/2} {
			if got := Index(d); got != i {
				t.Fatalf("Index(%v) = %d, want %d", d, got, i)
			}
			diff := Mid(i) - d
			if diff < 0 {
				diff = -diff
			}
			if bound := max(d/16, time.Microsecond/2); diff > bound {
				t.Fatalf("Mid(%d) = %v is %v from %v, more than %v", i, Mid(i), diff, d, bound)
			}
		}
	}
	for _, d := range []time.Duration{Max, 100 * time.Hour, -time.Second} {
		want := Buckets - 1
		if d < 0 {
			want = 0
		}
		if got := Index(d); got != want {
			t.Errorf("Index(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestCounts_Quantile(t *testing.T) {
	t.Parallel()
	h := Counts{}
	if got := h.Quantile(0.5); got != 0 {
		t.Errorf("empty Quantile = %v", got)
	}
	// 90 values of 10 ms, 10 of 1 s.
	h[Index(10*time.Millisecond)] += 90
	h[Index(time.Second)] += 10
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 10 * time.Millisecond}, {0.9, 10 * time.Millisecond}, {0.91, time.Second}, {0.95, time.Second}, {1, time.Second}} {
		got := h.Quantile(tc.q)
		if d := got - tc.want; d > tc.want/16 || d < -tc.want/16 {
			t.Errorf("Quantile(%v) = %v, want %v ± 6.25%%", tc.q, got, tc.want)
		}
	}
}
