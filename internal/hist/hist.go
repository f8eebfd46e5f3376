// Package hist is the fixed log-scale histogram of wait and run times that
// workers record per minute (internal/engine), write to Redis
// (internal/rdb) and the inspector reads percentiles from (inspect).
//
// A duration is counted in whole microseconds. Values below 8 µs have a
// bucket each; above, every power of two is split into 8 equal buckets, so
// a bucket spans at most 1/8 of its lower bound. [Mid], the value reported
// for a bucket, is therefore within 1/16 (6.25 %) of every value counted in
// it (or within 0.5 µs below 8 µs). Values of [Max] or more share the last
// bucket.
package hist

import (
	"math/bits"
	"sort"
	"time"
)

// sub is the number of buckets per power of two (a power of two itself).
const (
	subBits = 3
	sub     = 1 << subBits
	// maxExp is the largest exponent with buckets of its own: values up to
	// 2^(maxExp+1) µs (about 19 hours).
	maxExp = 35
)

// Buckets is the number of buckets.
const Buckets = (maxExp-subBits+1)*sub + sub

// Max is the smallest duration counted in the last bucket together with
// everything longer.
const Max = time.Duration(1<<(maxExp+1)) * time.Microsecond

// Index returns the bucket of d (negative durations count as 0).
func Index(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	v := uint64(d / time.Microsecond)
	if v < sub {
		return int(v)
	}
	e := bits.Len64(v) - 1
	if e > maxExp {
		return Buckets - 1
	}
	return (e-subBits+1)*sub + int((v>>(e-subBits))&(sub-1))
}

// Lower returns the smallest duration of bucket i.
func Lower(i int) time.Duration {
	if i < sub {
		return time.Duration(i) * time.Microsecond
	}
	e := i/sub + subBits - 1
	m := i % sub
	return time.Duration((sub+m)<<(e-subBits)) * time.Microsecond
}

// Mid returns the value reported for bucket i: the middle of its range.
func Mid(i int) time.Duration {
	if i < sub {
		return time.Duration(i) * time.Microsecond
	}
	return Lower(i) + (Lower(i+1)-Lower(i))/2
}

// Counts are the counts of a histogram by bucket (absent: 0).
type Counts map[int]int64

// Add adds c's counts to h.
func (h Counts) Add(c Counts) {
	for i, n := range c {
		h[i] += n
	}
}

// Total returns the number of values counted.
func (h Counts) Total() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile returns the q-quantile (0 < q <= 1) of the values counted: the
// [Mid] of the bucket of the value of rank ceil(q·n), so within the
// bucket's bound of that value. It returns 0 for an empty histogram.
func (h Counts) Quantile(q float64) time.Duration {
	n := h.Total()
	if n == 0 {
		return 0
	}
	idx := make([]int, 0, len(h))
	for i, c := range h {
		if c > 0 {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	rank := int64(q*float64(n) + 0.999999)
	rank = min(max(rank, 1), n)
	var seen int64
	for _, i := range idx {
		seen += h[i]
		if seen >= rank {
			return Mid(i)
		}
	}
	return Mid(idx[len(idx)-1])
}
