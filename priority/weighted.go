package priority

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/streamq/streamq"
)

// Limits of weighted mode.
const (
	// MaxBands is the most bands WorkerConfig.Bands may hold.
	MaxBands = 16
	// MaxWeight is the largest weight of a band.
	MaxWeight = 1000
)

// Band is a range of priorities that shares the worker's attention with the
// other bands in proportion to its weight, in weighted mode (see
// WorkerConfig.Bands).
type Band struct {
	// Min and Max are the lowest and highest priority of the band,
	// inclusive.
	Min, Max int
	// Weight is the band's share: with bands weighted 6, 3 and 1 that all
	// hold jobs, 6 of every 10 jobs a worker takes come from the first band,
	// 3 from the second and 1 from the third. From 1 to MaxWeight.
	Weight int
}

// band is a Band as the weighted pop script sees it: a score range.
type band struct {
	lo, hi string // scores, inclusive
	weight int
}

// bandRanges validates bands and returns them as score ranges, most urgent
// band first. Bands must not overlap and must hold every priority from
// MinPriority to MaxPriority, so that no job is left out.
func bandRanges(bs []Band, lowerFirst bool) ([]band, error) {
	if len(bs) == 0 {
		return nil, nil
	}
	field := func(i int) string { return fmt.Sprintf("priority.WorkerConfig.Bands[%d]", i) }
	if len(bs) > MaxBands {
		return nil, &streamq.ConfigError{Field: "priority.WorkerConfig.Bands",
			Reason: fmt.Sprintf("has %d bands: use at most %d", len(bs), MaxBands)}
	}
	for i, b := range bs {
		switch {
		case checkPriority(b.Min) != nil || checkPriority(b.Max) != nil:
			return nil, &streamq.ConfigError{Field: field(i),
				Reason: fmt.Sprintf("Min %d or Max %d is out of range: use priorities from priority.MinPriority (%d) to priority.MaxPriority (%d)", b.Min, b.Max, MinPriority, MaxPriority)}
		case b.Min > b.Max:
			return nil, &streamq.ConfigError{Field: field(i),
				Reason: fmt.Sprintf("Min %d is above Max %d: swap them", b.Min, b.Max)}
		case b.Weight < 1 || b.Weight > MaxWeight:
			return nil, &streamq.ConfigError{Field: field(i),
				Reason: fmt.Sprintf("Weight %d: use a weight from 1 to %d", b.Weight, MaxWeight)}
		}
	}
	idx := make([]int, len(bs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(bs[a].Min, bs[b].Min) })
	if first := bs[idx[0]]; first.Min != MinPriority {
		return nil, &streamq.ConfigError{Field: field(idx[0]),
			Reason: fmt.Sprintf("no band holds priorities %d to %d, so such jobs would never run: make the lowest band start at priority.MinPriority (Min: priority.MinPriority)", MinPriority, first.Min-1)}
	}
	if last := bs[idx[len(idx)-1]]; last.Max != MaxPriority {
		return nil, &streamq.ConfigError{Field: field(idx[len(idx)-1]),
			Reason: fmt.Sprintf("no band holds priorities %d to %d, so such jobs would never run: make the highest band end at priority.MaxPriority (Max: priority.MaxPriority)", last.Max+1, MaxPriority)}
	}
	for k := 1; k < len(idx); k++ {
		prev, cur := bs[idx[k-1]], bs[idx[k]]
		switch {
		case cur.Min <= prev.Max:
			return nil, &streamq.ConfigError{Field: field(idx[k]),
				Reason: fmt.Sprintf("overlaps Bands[%d] on priorities %d to %d: every priority must belong to one band", idx[k-1], cur.Min, min(prev.Max, cur.Max))}
		case cur.Min > prev.Max+1:
			return nil, &streamq.ConfigError{Field: field(idx[k]),
				Reason: fmt.Sprintf("no band holds priorities %d to %d (between Bands[%d] and Bands[%d]), so such jobs would never run: extend one of them", prev.Max+1, cur.Min-1, idx[k-1], idx[k])}
		}
	}
	out := make([]band, len(idx))
	for k, i := range idx {
		b := bs[i]
		if lowerFirst {
			// Lower priorities first: the band with the lowest Min is the most
			// urgent; scores are the priorities.
			out[k] = band{lo: strconv.FormatInt(int64(b.Min), 10), hi: strconv.FormatInt(int64(b.Max), 10), weight: b.Weight}
		} else {
			// Higher first: scores are -priority, the band with the highest
			// Max is the most urgent.
			out[len(idx)-1-k] = band{lo: strconv.FormatInt(-int64(b.Max), 10), hi: strconv.FormatInt(-int64(b.Min), 10), weight: b.Weight}
		}
	}
	return out, nil
}
