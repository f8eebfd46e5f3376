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

// maxLookBack bounds how far back [cronTicker.prev] searches for the latest tick:
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

// cronTicker ticks at the instants when the clocks of its zone show a wall
// time that the crontab spec matches: one tick per matching wall time, also
// on days when the clocks are changed (see wallInstant for what a skipped or
// repeated wall time becomes).
//
// robfig/cron's SpecSchedule.Next works on instants in the schedule's zone
// and gets daylight saving changes wrong (a daily 02:30 is skipped on the
// night the clocks go forward and runs twice on the night they go back), so
// cronTicker uses it only as a calendar: wall is the spec with its zone set to
// UTC, which has no transitions, and a wall time is represented as the UTC
// time with the same fields (02:30 local is 02:30 UTC).
type cronTicker struct {
	wall *cron.SpecSchedule // the spec with Location UTC: matches wall times
	loc  *time.Location     // the zone whose clocks the spec reads
}

// next returns the first tick strictly after t. The ticks are wallInstant of
// the matching wall times, which never decreases as the wall time grows, so
// the first matching wall time after t's own (or, when t is in the second
// pass of a repeated stretch, after that stretch) gives it.
func (c cronTicker) next(t time.Time) time.Time {
	w := wallTime(t.In(c.loc))
	if end, ok := repeatedUntil(t, c.loc); ok {
		w = end.Add(-time.Second) // the stretch's wall times had their ticks in its first pass
	}
	// One step is enough in a zone whose transitions are days apart; the
	// bound keeps a zone with odd history from looping.
	for range 4 {
		w = c.wall.Next(w)
		if w.IsZero() {
			return time.Time{}
		}
		if tick := wallInstant(w, c.loc); tick.After(t) {
			return tick.In(t.Location())
		}
	}
	return time.Time{}
}

// prev finds the latest tick at or before t. Ticks are computed forward only,
// so it searches: first it doubles a window back from t until the window
// holds a tick, then it bisects (in whole seconds, the crontab resolution)
// for the latest start x with next(x) <= t; next(x) is the tick. Both phases
// take at most 28 steps.
func (c cronTicker) prev(t time.Time) time.Time {
	hi := t.Truncate(time.Second) // next(hi) > t: the earliest candidate is hi+1s
	var lo time.Time
	found := false
	for w := time.Second; w <= maxLookBack; w *= 2 {
		x := hi.Add(-w)
		if n := c.next(x); !n.IsZero() && !n.After(t) {
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
		if n := c.next(mid); !n.IsZero() && !n.After(t) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return c.next(lo)
}

// wallTime returns the wall clock reading of t in its own location, as the
// UTC time with the same fields.
func wallTime(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// transitionWindow bounds how far from a wall time (as a UTC time) the
// instants showing it can be: more than any UTC offset, past or present.
const transitionWindow = 26 * time.Hour

// maxZonePeriods bounds the zone periods (spans with one UTC offset) that
// wallInstant looks at within transitionWindow either side of a wall time.
const maxZonePeriods = 16

// wallInstant returns the instant at which the clocks of loc show the wall
// time w (given as the UTC time with the same fields):
//   - the only such instant on an ordinary day;
//   - the earlier one when the clocks show w twice because they were set back
//     (01:30 on the night New York leaves daylight saving time is the
//     01:30 EDT, not the 01:30 EST an hour later);
//   - the first instant after w when the clocks never show w because they
//     were set forward over it: the instant of the change (02:30 on the night
//     Paris enters summer time becomes 03:00 CEST, the first instant after it).
func wallInstant(w time.Time, loc *time.Location) time.Time {
	n := w.Unix()
	at := w.Add(-transitionWindow).In(loc)
	for range maxZonePeriods {
		start, end := at.ZoneBounds()
		_, off := at.Zone()
		if u := time.Unix(n-int64(off), 0); !u.Before(start) && (end.IsZero() || u.Before(end)) {
			return u // the period shows w; periods are visited in time order, so this is the earlier
		}
		if !start.IsZero() && start.Unix()+int64(off) > n {
			return start // the clocks jumped from before w to after it: w was skipped
		}
		if end.IsZero() {
			break
		}
		at = end.In(loc)
	}
	// Not reached for real zones: both branches above end the loop.
	return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, loc)
}

// repeatedUntil reports whether t falls in the second pass of wall times
// that loc's clocks showed twice because they were set back, and if so
// returns the wall time (as a UTC time) at which the repeated stretch ends:
// the reading at which the clocks were set back. The ticks of the stretch
// were due in its first pass.
func repeatedUntil(t time.Time, loc *time.Location) (time.Time, bool) {
	lt := t.In(loc)
	start, _ := lt.ZoneBounds()
	if start.IsZero() {
		return time.Time{}, false
	}
	_, cur := lt.Zone()
	before := start.Add(-time.Nanosecond).In(loc)
	if _, prev := before.Zone(); prev <= cur {
		return time.Time{}, false // the clocks were not set back
	}
	end := wallTime(before).Add(time.Nanosecond) // the reading that was never shown
	if !wallTime(lt).Before(end) {
		return time.Time{}, false // past the repeated stretch
	}
	return end, true
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
		if zoned {
			loc = s.Location
		}
		cp := *s
		cp.Location = time.UTC // see cronTicker
		return cronTicker{wall: &cp, loc: loc}, nil
	case cron.ConstantDelaySchedule:
		return intervalTicker{every: s.Delay}, nil
	}
	return nil, fmt.Errorf("%q: unsupported schedule type %T", spec, s)
}
