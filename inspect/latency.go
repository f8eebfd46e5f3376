package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/hist"
	"github.com/streamq/streamq/internal/rdb"
)

// KindHistory is the history of the jobs of one kind, as [History.Kinds]
// holds it.
type KindHistory struct {
	// Kind is the jobs' kind ("" for untyped jobs).
	Kind string
	// Points are the kind's, at the times of History.Points. Processed
	// and Failed count handler runs that returned nil and an error (a
	// retried job fails once per attempt), as the workers saw them; the
	// percentiles are as in [Point].
	Points []Point
}

// latSet is the histograms of a span: the queue's and its kinds'.
type latSet struct {
	wait, run hist.Counts
	kinds     map[string]*kindLat
	untracked int64
}

type kindLat struct {
	wait, run  hist.Counts
	ok, failed int64
}

func newLatSet() *latSet {
	return &latSet{wait: hist.Counts{}, run: hist.Counts{}, kinds: map[string]*kindLat{}}
}

func (s *latSet) kind(name string) *kindLat {
	k := s.kinds[name]
	if k == nil {
		k = &kindLat{wait: hist.Counts{}, run: hist.Counts{}}
		s.kinds[name] = k
	}
	return k
}

// parseLat adds the fields of a latency hash (see rdb.Keys.Latency) to s;
// fields of unknown form are skipped (written by a newer version).
func (s *latSet) parse(fields map[string]string) {
	for f, v := range fields {
		n, err := strconv.ParseInt(v, 10, 64)
		e, ok := rdb.ParseLatencyField(f)
		if err != nil || !ok || n <= 0 || e.Bucket >= hist.Buckets {
			continue
		}
		wait, run := s.wait, s.run
		if e.PerKind {
			k := s.kind(e.Kind)
			wait, run = k.wait, k.run
			switch e.Type {
			case rdb.LatencyOK:
				k.ok += n
			case rdb.LatencyFail:
				k.failed += n
			}
		}
		switch e.Type {
		case rdb.LatencyWait:
			wait[e.Bucket] += n
		case rdb.LatencyRun:
			run[e.Bucket] += n
		case 'x':
			s.untracked += n
		}
	}
}

// add adds o to s.
func (s *latSet) add(o *latSet) {
	s.wait.Add(o.wait)
	s.run.Add(o.run)
	s.untracked += o.untracked
	for name, k := range o.kinds {
		sk := s.kind(name)
		sk.wait.Add(k.wait)
		sk.run.Add(k.run)
		sk.ok += k.ok
		sk.failed += k.failed
	}
}

// fields returns s as the fields of a latency hash.
func (s *latSet) fields() []any {
	var out []any
	hf := func(wait, run hist.Counts, kind string, per bool) {
		for i, n := range wait {
			out = append(out, rdb.LatencyField(rdb.LatencyWait, i, kind, per), n)
		}
		for i, n := range run {
			out = append(out, rdb.LatencyField(rdb.LatencyRun, i, kind, per), n)
		}
	}
	hf(s.wait, s.run, "", false)
	for name, k := range s.kinds {
		hf(k.wait, k.run, name, true)
		if k.ok > 0 {
			out = append(out, rdb.LatencyCountField(rdb.LatencyOK, name), k.ok)
		}
		if k.failed > 0 {
			out = append(out, rdb.LatencyCountField(rdb.LatencyFail, name), k.failed)
		}
	}
	if s.untracked > 0 {
		out = append(out, rdb.LatencyUntracked, s.untracked)
	}
	return out
}

// setPercentiles sets the percentiles of p from wait and run.
func setPercentiles(p *Point, wait, run hist.Counts) {
	p.WaitP50, p.WaitP95 = wait.Quantile(0.5), wait.Quantile(0.95)
	p.RunP50, p.RunP95 = run.Quantile(0.5), run.Quantile(0.95)
}

// apply sets the percentiles of h.Points[i] from sets[i], and builds
// h.Kinds and h.Untracked.
func (h *History) apply(sets []*latSet) {
	byKind := map[string]*KindHistory{}
	for i, s := range sets {
		setPercentiles(&h.Points[i], s.wait, s.run)
		h.Untracked += s.untracked
		for name, k := range s.kinds {
			kh := byKind[name]
			if kh == nil {
				kh = &KindHistory{Kind: name, Points: make([]Point, len(h.Points))}
				for j := range kh.Points {
					kh.Points[j].At = h.Points[j].At
				}
				byKind[name] = kh
			}
			p := &kh.Points[i]
			p.Processed, p.Failed = k.ok, k.failed
			setPercentiles(p, k.wait, k.run)
		}
	}
	h.Kinds = make([]KindHistory, 0, len(byKind))
	for _, kh := range byKind {
		h.Kinds = append(h.Kinds, *kh)
	}
	slices.SortFunc(h.Kinds, func(a, b KindHistory) int {
		switch {
		case a.Kind < b.Kind:
			return -1
		case a.Kind > b.Kind:
			return 1
		}
		return 0
	})
}

// readLat reads the latency hashes of keys in one pipeline.
func (q *Queue) readLat(ctx context.Context, keys []string) ([]*latSet, error) {
	pipe := q.rdb().Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("inspect: wait and run times of %s: %w", q.name, err)
	}
	out := make([]*latSet, len(keys))
	for i, cmd := range cmds {
		out[i] = newLatSet()
		out[i].parse(cmd.Val())
	}
	return out, nil
}

// minuteLat reads the latency hashes of the minutes from first to last.
func (q *Queue) minuteLat(ctx context.Context, first, last int64) ([]*latSet, error) {
	keys := make([]string, 0, last-first+1)
	for m := first; m <= last; m++ {
		keys = append(keys, q.keys.Latency(m))
	}
	return q.readLat(ctx, keys)
}

// hourLat returns the histograms of the hours from first to last: from the
// hour hashes RollUp wrote and, for the hours of the last two hours' minutes,
// from those minutes when they hold as many runs (they are newer).
func (q *Queue) hourLat(ctx context.Context, first, last int64) ([]*latSet, error) {
	keys := make([]string, 0, last-first+1)
	for h := first; h <= last; h++ {
		keys = append(keys, q.keys.LatencyHour(h))
	}
	hours, err := q.readLat(ctx, keys)
	if err != nil {
		return nil, err
	}
	recent, err := q.recentHours(ctx)
	if err != nil {
		return nil, err
	}
	for h, s := range recent {
		if i := h - first; i >= 0 && i < int64(len(hours)) && s.run.Total() >= hours[i].run.Total() {
			hours[i] = s
		}
	}
	return hours, nil
}

// recentHours sums the latency hashes of the last MaxThroughputMinutes
// minutes by hour (Unix seconds / 3600).
func (q *Queue) recentHours(ctx context.Context) (map[int64]*latSet, error) {
	now := time.Now().Unix() / 60
	first := now - MaxThroughputMinutes + 1
	mins, err := q.minuteLat(ctx, first, now)
	if err != nil {
		return nil, err
	}
	out := map[int64]*latSet{}
	for i, s := range mins {
		h := (first + int64(i)) / 60
		if out[h] == nil {
			out[h] = newLatSet()
		}
		out[h].add(s)
	}
	return out, nil
}

// rollUpLat writes the sums of the minute latency hashes of each hour of
// the last two hours into the hour's hash, unless the hour's hash holds more
// runs already (its first minutes have expired since an earlier roll-up):
// the sums are copied, not added, so rolling up again changes nothing.
func (q *Queue) rollUpLat(ctx context.Context) error {
	recent, err := q.recentHours(ctx)
	if err != nil {
		return err
	}
	hs := make([]int64, 0, len(recent))
	keys := make([]string, 0, len(recent))
	for h, s := range recent {
		if s.run.Total() > 0 {
			hs = append(hs, h)
			keys = append(keys, q.keys.LatencyHour(h))
		}
	}
	if len(hs) == 0 {
		return nil
	}
	stored, err := q.readLat(ctx, keys)
	if err != nil {
		return err
	}
	pipe := q.rdb().TxPipeline()
	n := 0
	for i, h := range hs {
		s := recent[h]
		if s.run.Total() < stored[i].run.Total() {
			continue
		}
		pipe.Del(ctx, keys[i])
		pipe.HSet(ctx, keys[i], s.fields()...)
		pipe.Expire(ctx, keys[i], hourTTL)
		n++
	}
	if n == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("inspect: roll up the wait and run times of %s: %w", q.name, err)
	}
	return nil
}
