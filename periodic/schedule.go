package periodic

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// specParser accepts the standard 5-field crontab syntax, an optional leading
// seconds field (6 fields), descriptors (@hourly, @daily, @every 10s, ...) and
// a "CRON_TZ=Zone " or "TZ=Zone " prefix. The parser is an immutable value.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour |
	cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxLookBack bounds how far back [prevCron] searches for the latest tick:
// a little more than the 5 years that robfig/cron searches forward.
const maxLookBack = 1 << 28 * time.Second // about 8.5 years

// ticker is a schedule's tick arithmetic. Ticks are absolute instants; every
// process that registers the same schedule computes the same ticks.
type ticker interface {
	// next returns the first tick strictly after t, or the zero time if
	// there is none within five years.
	next(t time.Time) time.Time
	// prev returns the latest tick at or before t, or the zero time if there
	// is none within maxLookBack.
	prev(t time.Time) time.Time
}

// intervalTicker ticks at every whole multiple of every since the Unix epoch,
// so that independent processes agree on the ticks without talking to each
// other (a process-relative "every 10s" would give each process its own).
type intervalTicker struct {
	every time.Duration // a positive whole number of milliseconds
}

func (it intervalTicker) prev(t time.Time) time.Time {
	ms, e := t.UnixMilli(), it.every.Milliseconds()
	r := ms % e
	if r < 0 { // before 1970
		r += e
	}
	return time.UnixMilli(ms - r).In(t.Location())
}

func (it intervalTicker) next(t time.Time) time.Time {
	return it.prev(t).Add(it.every)
}

// cronTicker wraps a parsed crontab schedule with its time zone set.
type cronTicker struct {
	s *cron.SpecSchedule
}

func (c cronTicker) next(t time.Time) time.Time { return c.s.Next(t) }

// prev finds the latest tick at or before t. robfig/cron only computes
// forward, so it searches: first it doubles a window back from t until the
// window holds a tick, then it bisects (in whole seconds, the crontab
// resolution) for the latest start x with next(x) <= t; next(x) is the tick.
// Both phases take at most 28 steps.
func (c cronTicker) prev(t time.Time) time.Time {
	hi := t.Truncate(time.Second) // next(hi) > t: the earliest candidate is hi+1s
	var lo time.Time
	found := false
	for w := time.Second; w <= maxLookBack; w *= 2 {
		x := hi.Add(-w)
		if n := c.s.Next(x); !n.IsZero() && !n.After(t) {
			lo, found = x, true
			break
		}
		hi = x // next(x) > t, so the answer starts before x
	}
	if !found {
		return time.Time{}
	}
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if n := c.s.Next(mid); !n.IsZero() && !n.After(t) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return c.s.Next(lo)
}

// hasZonePrefix reports whether spec starts with a time zone, as
// robfig/cron's parser recognises it.
func hasZonePrefix(spec string) bool {
	return strings.HasPrefix(spec, "CRON_TZ=") || strings.HasPrefix(spec, "TZ=")
}

// parseSpec parses a cron spec. loc is the zone for specs without a
// CRON_TZ= prefix. "@every d" becomes an epoch-aligned interval.
func parseSpec(spec string, loc *time.Location) (ticker, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("is empty: use a crontab expression such as \"*/5 * * * *\" (every 5 minutes), \"@hourly\" or \"@every 10s\"")
	}
	zoned := hasZonePrefix(spec)
	if zoned && !strings.Contains(spec, " ") {
		return nil, fmt.Errorf("%q has a time zone but no schedule: write e.g. \"CRON_TZ=Europe/Paris 0 9 * * *\"", spec)
	}
	s, err := specParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%q: %v: use 5 fields (minute hour day-of-month month day-of-week), "+
			"6 with a leading seconds field, or a descriptor such as @daily or @every 1m30s, "+
			"optionally after CRON_TZ=<IANA zone>", spec, err)
	}
	switch s := s.(type) {
	case *cron.SpecSchedule:
		cp := *s
		if !zoned {
			cp.Location = loc
		}
		return cronTicker{s: &cp}, nil
	case cron.ConstantDelaySchedule:
		return intervalTicker{every: s.Delay}, nil
	}
	return nil, fmt.Errorf("%q: unsupported schedule type %T", spec, s)
}
