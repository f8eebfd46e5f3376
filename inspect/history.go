package inspect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// How long the counters of History are kept.
const (
	// MinuteHistory is the history kept per minute: the counters the
	// consumers and workers write (see [Queue.Throughput]).
	MinuteHistory = MaxThroughputMinutes * time.Minute
	// HourHistory is the history kept per hour, in the hour counters that
	// [Queue.RollUp] writes.
	HourHistory = 7 * 24 * time.Hour
)

// hourTTL is how long an hour counter is kept after its last roll-up: seven
// days and the hour itself.
const hourTTL = HourHistory + time.Hour

// History is processed and failed jobs, wait and run times over a span of
// time, for the queue and for each kind.
type History struct {
	// Step is the time each Point covers: a minute or an hour.
	Step time.Duration
	// Points, oldest first, the current minute or hour last.
	Points []Point
	// Kinds are the histories of the kinds that ran in the span, by kind.
	// A worker tracks up to 32 kinds a minute (the first that run); runs of
	// further kinds count in Points and in Untracked, not in Kinds.
	Kinds []KindHistory
	// Untracked counts the handler runs of the span whose kind was not
	// tracked.
	Untracked int64
}

// hourKey returns the key of the hour counters of hour (Unix seconds /
// 3600): a hash of fields "p:MM" and "f:MM", the processed and failed jobs
// of minute MM of the hour, copied from the minute counters by RollUp.
//
// It belongs with the other keys in internal/rdb (rdb.Keys); it lives here
// until the key builders there take a new part.
func (q *Queue) hourKey(hour int64) string {
	return q.keys.Part("stats:hour:" + strconv.FormatInt(hour, 10))
}

// RollUp copies the queue's per-minute counters (kept two hours) into hour
// counters kept seven days, so that [Queue.History] can go back a week. It
// is idempotent: each minute's counts are copied, not added, so calling it
// again, or from several processes at once, changes nothing more. It reads
// the 120 minute counters in one pipeline and writes one hash per hour
// that had jobs. A minute's counts are kept for a week only if RollUp runs
// while its counter exists, so something must call it at least every two
// hours: the dashboard does on its pages (at most once a minute per
// queue), `streamq stats` does, and `streamq stats --rollup` from cron.
//
// The wait and run time histograms are rolled up as sums per hour: each
// of the hours the last 120 minutes touch gets the sum of its minutes,
// unless its hour hash holds more runs already. An hour is complete in the
// 7-day history if RollUp ran in the hour after it ended (its minutes are
// all there then), so run it hourly to keep every hour's percentiles.
func (q *Queue) RollUp(ctx context.Context) error {
	if err := q.rollUpLat(ctx); err != nil {
		return err
	}
	pts, err := q.Throughput(ctx, MaxThroughputMinutes)
	if err != nil {
		return err
	}
	byHour := map[int64][]any{}
	for _, p := range pts {
		if p.Processed == 0 && p.Failed == 0 {
			continue
		}
		m := p.At.Unix() / 60
		h, mm := m/60, fmt.Sprintf("%02d", m%60)
		byHour[h] = append(byHour[h], "p:"+mm, p.Processed, "f:"+mm, p.Failed)
	}
	if len(byHour) == 0 {
		return nil
	}
	pipe := q.rdb().Pipeline()
	for h, fields := range byHour {
		pipe.HSet(ctx, q.hourKey(h), fields...)
		pipe.Expire(ctx, q.hourKey(h), hourTTL)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("inspect: roll up the counters of %s: %w", q.name, err)
	}
	return nil
}

// RollUp runs [Queue.RollUp] for every registered queue and returns how
// many it rolled up. A queue that fails does not stop the others; the
// first error is returned.
func (in *Inspector) RollUp(ctx context.Context) (int, error) {
	qs, err := in.Queues(ctx)
	if err != nil {
		return 0, err
	}
	var first error
	n := 0
	for _, info := range qs {
		err := in.newQueue(info.Name, info.Kind).RollUp(ctx)
		if err == nil {
			n++
		} else if first == nil {
			first = err
		}
	}
	return n, first
}

// History returns the queue's processed and failed jobs over the last span:
// per minute for a span of up to MinuteHistory (two hours), per hour for a
// longer one up to HourHistory (seven days), rounded up to whole minutes or
// hours. The hours come from the hour counters [Queue.RollUp] wrote and,
// for the last two hours, from the minute counters themselves, so they are
// current even when RollUp has not run lately. The wait and run time
// percentiles and the kinds' histories come from the latency histograms
// the workers write per minute and RollUp sums per hour, the same way.
// Three pipelines.
func (q *Queue) History(ctx context.Context, span time.Duration) (*History, error) {
	switch {
	case span <= 0 || span > HourHistory:
		return nil, fmt.Errorf("inspect: History of %s: use a span from 1m to %s (the hour counters are kept 7 days)", span, HourHistory)
	case span <= MinuteHistory:
		minutes := int((span + time.Minute - 1) / time.Minute)
		pts, err := q.Throughput(ctx, minutes)
		if err != nil {
			return nil, err
		}
		last := pts[len(pts)-1].At.Unix() / 60
		sets, err := q.minuteLat(ctx, last-int64(minutes)+1, last)
		if err != nil {
			return nil, err
		}
		h := &History{Step: time.Minute, Points: pts}
		h.apply(sets)
		return h, nil
	}
	hours := int((span + time.Hour - 1) / time.Hour)
	now := time.Now().Unix() / 3600
	pipe := q.rdb().Pipeline()
	cmds := make([]*redis.MapStringStringCmd, hours)
	for i := range cmds {
		cmds[i] = pipe.HGetAll(ctx, q.hourKey(now-int64(hours-1-i)))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("inspect: history of %s: %w", q.name, err)
	}
	// minute (Unix seconds / 60) -> counts, from the hour counters, then
	// the minute counters where they are larger (newer).
	type counts struct{ p, f int64 }
	minutes := map[int64]counts{}
	for i, cmd := range cmds {
		h := now - int64(hours-1-i)
		for field, v := range cmd.Val() {
			kind, mm, ok := strings.Cut(field, ":")
			m, err1 := strconv.ParseInt(mm, 10, 64)
			n, err2 := strconv.ParseInt(v, 10, 64)
			if !ok || err1 != nil || err2 != nil || m < 0 || m > 59 {
				continue
			}
			c := minutes[h*60+m]
			switch kind {
			case "p":
				c.p = n
			case "f":
				c.f = n
			}
			minutes[h*60+m] = c
		}
	}
	recent, err := q.Throughput(ctx, MaxThroughputMinutes)
	if err != nil {
		return nil, err
	}
	for _, p := range recent {
		m := p.At.Unix() / 60
		c := minutes[m]
		minutes[m] = counts{max(c.p, p.Processed), max(c.f, p.Failed)}
	}
	out := &History{Step: time.Hour, Points: make([]Point, hours)}
	for i := range out.Points {
		h := now - int64(hours-1-i)
		out.Points[i].At = time.Unix(h*3600, 0)
		for m := h * 60; m < h*60+60; m++ {
			out.Points[i].Processed += minutes[m].p
			out.Points[i].Failed += minutes[m].f
		}
	}
	sets, err := q.hourLat(ctx, now-int64(hours-1), now)
	if err != nil {
		return nil, err
	}
	out.apply(sets)
	return out, nil
}
