package periodic

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zone tests must not depend on the machine's zoneinfo
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestParseSpec_Next(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec string
		loc  *time.Location
		from string
		want []string // the following ticks, in order
	}{
		{
			name: "five fields every 15 minutes",
			spec: "*/15 * * * *",
			from: "2024-05-01T10:07:12.5Z",
			want: []string{"2024-05-01T10:15:00Z", "2024-05-01T10:30:00Z", "2024-05-01T10:45:00Z", "2024-05-01T11:00:00Z"},
		},
		{
			name: "five fields at a tick is strictly after",
			spec: "0 * * * *",
			from: "2024-05-01T10:00:00Z",
			want: []string{"2024-05-01T11:00:00Z", "2024-05-01T12:00:00Z"},
		},
		{
			name: "six fields with seconds",
			spec: "*/20 * * * * *",
			from: "2024-05-01T10:00:05Z",
			want: []string{"2024-05-01T10:00:20Z", "2024-05-01T10:00:40Z", "2024-05-01T10:01:00Z"},
		},
		{
			name: "six fields exact second",
			spec: "30 0 12 * * *",
			from: "2024-05-01T12:00:30Z",
			want: []string{"2024-05-02T12:00:30Z"},
		},
		{
			name: "weekdays only",
			spec: "0 9 * * 1-5",
			from: "2024-05-03T10:00:00Z", // a Friday
			want: []string{"2024-05-06T09:00:00Z", "2024-05-07T09:00:00Z"},
		},
		{
			name: "hourly descriptor",
			spec: "@hourly",
			from: "2024-05-01T10:59:59.999Z",
			want: []string{"2024-05-01T11:00:00Z", "2024-05-01T12:00:00Z"},
		},
		{
			name: "daily descriptor in Config zone",
			spec: "@daily",
			loc:  mustLoad(t, "Asia/Tokyo"), // UTC+9, no DST
			from: "2024-05-01T10:00:00Z",
			want: []string{"2024-05-01T15:00:00Z", "2024-05-02T15:00:00Z"},
		},
		{
			name: "every descriptor is epoch aligned",
			spec: "@every 10s",
			from: "2024-05-01T10:00:03.7Z",
			want: []string{"2024-05-01T10:00:10Z", "2024-05-01T10:00:20Z"},
		},
		{
			name: "every descriptor with minutes",
			spec: "@every 1m30s",
			from: "1970-01-01T00:02:00Z",
			want: []string{"1970-01-01T00:03:00Z", "1970-01-01T00:04:30Z"},
		},
		{
			name: "CRON_TZ prefix across a DST change",
			spec: "CRON_TZ=America/New_York 0 9 * * *",
			from: "2024-03-09T00:00:00Z", // DST starts 2024-03-10 in New York
			want: []string{"2024-03-09T14:00:00Z", "2024-03-10T13:00:00Z", "2024-03-11T13:00:00Z"},
		},
		{
			name: "TZ prefix wins over the default zone",
			spec: "TZ=Europe/Paris 0 0 1 1 *",
			loc:  mustLoad(t, "Asia/Tokyo"),
			from: "2024-06-01T00:00:00Z",
			want: []string{"2024-12-31T23:00:00Z", "2025-12-31T23:00:00Z"},
		},
		{
			name: "default zone is what the caller passes",
			spec: "0 0 * * *",
			loc:  time.UTC,
			from: "2024-06-01T12:00:00Z",
			want: []string{"2024-06-02T00:00:00Z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			loc := tt.loc
			if loc == nil {
				loc = time.UTC
			}
			tk, err := parseSpec(tt.spec, loc)
			if err != nil {
				t.Fatal(err)
			}
			at := utc(tt.from)
			for i, w := range tt.want {
				got := tk.next(at)
				if !got.Equal(utc(w)) {
					t.Fatalf("tick %d after %s = %s, want %s", i, at, got.UTC(), w)
				}
				at = got
			}
		})
	}
}

func TestParseSpec_Errors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, spec, hint string
	}{
		{"empty", "  ", "is empty"},
		{"too few fields", "* * *", "use 5 fields"},
		{"too many fields", "* * * * * * *", "use 5 fields"},
		{"out of range", "61 * * * *", "use 5 fields"},
		{"unknown descriptor", "@fortnightly", "use 5 fields"},
		{"bad duration", "@every soon", "use 5 fields"},
		{"unknown zone", "CRON_TZ=Mars/Olympus 0 9 * * *", "use 5 fields"},
		{"zone only", "CRON_TZ=UTC", "no schedule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseSpec(tt.spec, time.UTC)
			if err == nil || !strings.Contains(err.Error(), tt.hint) {
				t.Fatalf("parseSpec(%q) error = %v, want one containing %q", tt.spec, err, tt.hint)
			}
		})
	}
}

// TestTicker_Prev checks prev against a brute-force walk with next: prev(t)
// is the latest tick <= t, for many instants around ticks.
func TestTicker_Prev(t *testing.T) {
	t.Parallel()
	ny := mustLoad(t, "America/New_York")
	tests := []struct {
		name string
		tk   ticker
		from string // brute force starts here (a time before the first probe)
		span time.Duration
		step time.Duration
	}{
		{"every second", mustParse(t, "* * * * * *", time.UTC), "2024-05-01T00:00:00Z", 10 * time.Second, 130 * time.Millisecond},
		{"every 15 minutes", mustParse(t, "*/15 * * * *", time.UTC), "2024-05-01T00:00:00Z", 3 * time.Hour, 7*time.Minute + 300*time.Millisecond},
		{"weekdays 9am New York over DST", mustParse(t, "0 9 * * 1-5", ny), "2024-03-01T00:00:00Z", 20 * 24 * time.Hour, 5*time.Hour + 17*time.Minute},
		{"every 15 minutes Paris over fall back", mustParse(t, "CRON_TZ=Europe/Paris */15 * * * *", time.UTC), "2026-10-24T22:00:00Z", 5 * time.Hour, 4*time.Minute + 700*time.Millisecond},
		{"every 15 minutes Paris over spring forward", mustParse(t, "CRON_TZ=Europe/Paris */15 * * * *", time.UTC), "2026-03-28T23:00:00Z", 5 * time.Hour, 4*time.Minute + 700*time.Millisecond},
		{"02:30 New York over both changes", mustParse(t, "30 2 * * *", ny), "2026-03-06T00:00:00Z", 250 * 24 * time.Hour, 7*time.Hour + 13*time.Minute},
		{"yearly", mustParse(t, "@yearly", time.UTC), "2020-01-01T00:00:00Z", 3 * 365 * 24 * time.Hour, 41 * 24 * time.Hour},
		{"interval 7s", intervalTicker{every: 7 * time.Second}, "2024-05-01T00:00:00Z", time.Minute, 900 * time.Millisecond},
		{"interval 250ms", intervalTicker{every: 250 * time.Millisecond}, "2024-05-01T00:00:00Z", 3 * time.Second, 37 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := utc(tt.from)
			// Ticks by brute force over the span (plus the one before it).
			var ticks []time.Time
			for at := start; at.Before(start.Add(tt.span)); {
				at = tt.tk.next(at)
				ticks = append(ticks, at)
			}
			probes := 0
			for at := ticks[0]; at.Before(ticks[len(ticks)-1]); at = at.Add(tt.step) {
				want := ticks[0]
				for _, tick := range ticks {
					if tick.After(at) {
						break
					}
					want = tick
				}
				if got := tt.tk.prev(at); !got.Equal(want) {
					t.Fatalf("prev(%s) = %s, want %s", at.UTC(), got.UTC(), want.UTC())
				}
				probes++
			}
			// Exactly at a tick, prev is that tick.
			for _, tick := range ticks[:len(ticks)-1] {
				if got := tt.tk.prev(tick); !got.Equal(tick) {
					t.Fatalf("prev(%s) = %s, want the tick itself", tick.UTC(), got.UTC())
				}
			}
			if probes < 10 {
				t.Fatalf("only %d probes: widen the span", probes)
			}
		})
	}
}

func TestCronTicker_PrevNoTick(t *testing.T) {
	t.Parallel()
	// February 30 never exists: neither direction finds a tick.
	tk := mustParse(t, "0 0 30 2 *", time.UTC)
	now := utc("2024-05-01T00:00:00Z")
	if got := tk.prev(now); !got.IsZero() {
		t.Fatalf("prev = %s, want zero", got)
	}
	if got := tk.next(now); !got.IsZero() {
		t.Fatalf("next = %s, want zero", got)
	}
}

func TestIntervalTicker_EpochAligned(t *testing.T) {
	t.Parallel()
	it := intervalTicker{every: 7 * time.Second}
	// Two "processes" looking at different instants agree on the ticks.
	a := it.next(utc("2024-05-01T00:00:00.001Z"))
	b := it.next(utc("2024-05-01T00:00:02.9Z"))
	if !a.Equal(b) {
		t.Fatalf("next differs: %s vs %s", a, b)
	}
	if a.UnixMilli()%7000 != 0 {
		t.Fatalf("tick %s (%d ms) is not a multiple of 7s since the epoch", a, a.UnixMilli())
	}
	if got := it.prev(a); !got.Equal(a) {
		t.Fatalf("prev(tick) = %s, want %s", got, a)
	}
	if got := it.prev(a.Add(-time.Nanosecond)); !got.Equal(a.Add(-7 * time.Second)) {
		t.Fatalf("prev just before a tick = %s", got)
	}
}

func TestTickKeyTTL(t *testing.T) {
	t.Parallel()
	tick := utc("2024-05-01T10:00:00Z")
	if got := tickKeyTTL(intervalTicker{every: time.Second}, tick); got != 2*time.Second+time.Minute {
		t.Errorf("1s interval: ttl %s", got)
	}
	if got := tickKeyTTL(mustParse(t, "@hourly", time.UTC), tick); got != 2*time.Hour+time.Minute {
		t.Errorf("hourly: ttl %s", got)
	}
}

func mustParse(t *testing.T, spec string, loc *time.Location) ticker {
	t.Helper()
	tk, err := parseSpec(spec, loc)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// dstCase is a crontab schedule over a daylight saving change, with every
// tick in (from, to], written as local times with their UTC offsets.
type dstCase struct {
	name     string
	spec     string
	from, to string
	want     []string
}

// dstCases covers both changes of 2026 in zones that change at 02:00 or
// 03:00 (Paris, New York), by 30 minutes (Lord Howe), in the southern
// hemisphere (Sydney, Santiago) and at midnight (Santiago, Havana): one tick
// per matching local wall time; a skipped wall time runs at the first instant
// after it, a repeated one at its first occurrence.
var dstCases = []dstCase{
	{
		name: "Paris daily 02:00 spring forward runs at 03:00",
		spec: "CRON_TZ=Europe/Paris 0 2 * * *",
		from: "2026-03-28T00:00:00+01:00", to: "2026-03-31T00:00:00+02:00",
		want: []string{"2026-03-28T02:00:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"},
	},
	{
		name: "Paris daily 02:00 fall back runs once",
		spec: "CRON_TZ=Europe/Paris 0 2 * * *",
		from: "2026-10-24T00:00:00+02:00", to: "2026-10-27T00:00:00+01:00",
		want: []string{"2026-10-24T02:00:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-26T02:00:00+01:00"},
	},
	{
		name: "Paris 02:30 spring forward runs at the change, not an hour later",
		spec: "CRON_TZ=Europe/Paris 30 2 * * *",
		from: "2026-03-29T00:00:00+01:00", to: "2026-03-30T00:00:00+02:00",
		want: []string{"2026-03-29T03:00:00+02:00"},
	},
	{
		name: "Paris hourly spring forward: 23 runs, 02:00 and 03:00 are one",
		spec: "CRON_TZ=Europe/Paris 0 * * * *",
		from: "2026-03-28T23:30:00+01:00", to: "2026-03-29T05:00:00+02:00",
		want: []string{"2026-03-29T00:00:00+01:00", "2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00",
			"2026-03-29T04:00:00+02:00", "2026-03-29T05:00:00+02:00"},
	},
	{
		name: "Paris hourly fall back: 24 runs for 25 hours",
		spec: "CRON_TZ=Europe/Paris 0 * * * *",
		from: "2026-10-24T23:30:00+02:00", to: "2026-10-25T05:00:00+01:00",
		want: []string{"2026-10-25T00:00:00+02:00", "2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00",
			"2026-10-25T03:00:00+01:00", "2026-10-25T04:00:00+01:00", "2026-10-25T05:00:00+01:00"},
	},
	{
		name: "Paris every 15 minutes of hour 2 spring forward: one run at 03:00",
		spec: "CRON_TZ=Europe/Paris */15 2 * * *",
		from: "2026-03-29T00:00:00+01:00", to: "2026-03-30T02:20:00+02:00",
		want: []string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00", "2026-03-30T02:15:00+02:00"},
	},
	{
		name: "Paris every 15 minutes of hour 2 fall back: first pass only",
		spec: "CRON_TZ=Europe/Paris */15 2 * * *",
		from: "2026-10-25T00:00:00+02:00", to: "2026-10-26T00:00:00+01:00",
		want: []string{"2026-10-25T02:00:00+02:00", "2026-10-25T02:15:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-25T02:45:00+02:00"},
	},
	{
		name: "Paris seconds field fall back: first pass only",
		spec: "CRON_TZ=Europe/Paris */30 59 2 * * *",
		from: "2026-10-25T00:00:00+02:00", to: "2026-10-26T00:00:00+01:00",
		want: []string{"2026-10-25T02:59:00+02:00", "2026-10-25T02:59:30+02:00"},
	},
	{
		name: "Paris seconds field spring forward: one run at 03:00",
		spec: "CRON_TZ=Europe/Paris */30 59 2 * * *",
		from: "2026-03-29T00:00:00+01:00", to: "2026-03-30T00:00:00+02:00",
		want: []string{"2026-03-29T03:00:00+02:00"},
	},
	{
		name: "Paris interval is absolute: both 02:00 run",
		spec: "CRON_TZ=Europe/Paris @every 1h",
		from: "2026-10-25T00:30:00+02:00", to: "2026-10-25T03:00:00+01:00",
		want: []string{"2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"},
	},
	{
		name: "New York 01:30 fall back runs once",
		spec: "CRON_TZ=America/New_York 30 1 * * *",
		from: "2026-10-31T00:00:00-04:00", to: "2026-11-03T00:00:00-05:00",
		want: []string{"2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"},
	},
	{
		name: "New York 02:30 spring forward runs at 03:00",
		spec: "CRON_TZ=America/New_York 30 2 * * *",
		from: "2026-03-07T00:00:00-05:00", to: "2026-03-10T00:00:00-04:00",
		want: []string{"2026-03-07T02:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"},
	},
	{
		name: "Lord Howe 02:00 spring forward by 30 minutes runs at 02:30",
		spec: "CRON_TZ=Australia/Lord_Howe 0 2 * * *",
		from: "2026-10-03T00:00:00+10:30", to: "2026-10-06T00:00:00+11:00",
		want: []string{"2026-10-03T02:00:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00"},
	},
	{
		name: "Lord Howe 01:45 fall back by 30 minutes runs once",
		spec: "CRON_TZ=Australia/Lord_Howe 45 1 * * *",
		from: "2026-04-04T00:00:00+11:00", to: "2026-04-07T00:00:00+10:30",
		want: []string{"2026-04-04T01:45:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"},
	},
	{
		name: "Lord Howe every 30 minutes fall back",
		spec: "CRON_TZ=Australia/Lord_Howe */30 * * * *",
		from: "2026-04-05T00:15:00+11:00", to: "2026-04-05T03:00:00+10:30",
		want: []string{"2026-04-05T00:30:00+11:00", "2026-04-05T01:00:00+11:00", "2026-04-05T01:30:00+11:00",
			"2026-04-05T02:00:00+10:30", "2026-04-05T02:30:00+10:30", "2026-04-05T03:00:00+10:30"},
	},
	{
		name: "Sydney 02:30 spring forward in October runs at 03:00",
		spec: "CRON_TZ=Australia/Sydney 30 2 * * *",
		from: "2026-10-03T00:00:00+10:00", to: "2026-10-06T00:00:00+11:00",
		want: []string{"2026-10-03T02:30:00+10:00", "2026-10-04T03:00:00+11:00", "2026-10-05T02:30:00+11:00"},
	},
	{
		name: "Sydney 02:30 fall back in April runs once",
		spec: "CRON_TZ=Australia/Sydney 30 2 * * *",
		from: "2026-04-04T00:00:00+11:00", to: "2026-04-07T00:00:00+10:00",
		want: []string{"2026-04-04T02:30:00+11:00", "2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"},
	},
	{
		name: "Santiago midnight skipped in September runs at 01:00",
		spec: "CRON_TZ=America/Santiago @daily",
		from: "2026-09-04T12:00:00-04:00", to: "2026-09-07T12:00:00-03:00",
		want: []string{"2026-09-05T00:00:00-04:00", "2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"},
	},
	{
		name: "Santiago Sunday midnight skipped runs Sunday 01:00",
		spec: "CRON_TZ=America/Santiago 0 0 * * SUN",
		from: "2026-08-29T00:00:00-04:00", to: "2026-09-14T00:00:00-03:00",
		want: []string{"2026-08-30T00:00:00-04:00", "2026-09-06T01:00:00-03:00", "2026-09-13T00:00:00-03:00"},
	},
	{
		name: "Santiago 23:30 repeated in April runs once",
		spec: "CRON_TZ=America/Santiago 30 23 * * *",
		from: "2026-04-03T12:00:00-03:00", to: "2026-04-06T00:00:00-04:00",
		want: []string{"2026-04-03T23:30:00-03:00", "2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"},
	},
	{
		name: "Santiago midnight after the repeated hour",
		spec: "CRON_TZ=America/Santiago @daily",
		from: "2026-04-03T12:00:00-03:00", to: "2026-04-06T12:00:00-04:00",
		want: []string{"2026-04-04T00:00:00-03:00", "2026-04-05T00:00:00-04:00", "2026-04-06T00:00:00-04:00"},
	},
	{
		name: "Havana midnight skipped in March runs at 01:00",
		spec: "CRON_TZ=America/Havana 0 0 * * *",
		from: "2026-03-06T12:00:00-05:00", to: "2026-03-09T12:00:00-04:00",
		want: []string{"2026-03-07T00:00:00-05:00", "2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00"},
	},
	{
		name: "Havana 00:30 repeated in November runs once",
		spec: "CRON_TZ=America/Havana 30 0 * * *",
		from: "2026-10-30T12:00:00-04:00", to: "2026-11-02T12:00:00-05:00",
		want: []string{"2026-10-31T00:30:00-04:00", "2026-11-01T00:30:00-04:00", "2026-11-02T00:30:00-05:00"},
	},
}

// TestCronTicker_DaylightSaving lists the ticks of each dstCase with next,
// and checks that prev agrees with them.
func TestCronTicker_DaylightSaving(t *testing.T) {
	t.Parallel()
	for _, tt := range dstCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tk := mustParse(t, tt.spec, time.UTC)
			from, to := utc(tt.from), utc(tt.to)
			var got []time.Time
			for at := tk.next(from); !at.After(to); at = tk.next(at) {
				if at.IsZero() || len(got) > len(tt.want) {
					break
				}
				got = append(got, at)
			}
			want := make([]time.Time, len(tt.want))
			for i, w := range tt.want {
				want[i] = utc(w)
			}
			if !equalTimes(got, want) {
				t.Fatalf("ticks in (%s, %s]:\n got  %s\n want %s", tt.from, tt.to, formatIn(got, specZone(t, tt.spec)), tt.want)
			}
			for i, tick := range want {
				if p := tk.prev(tick); !p.Equal(tick) {
					t.Errorf("prev(%s) = %s, want the tick itself", tick, p)
				}
				if i > 0 {
					if p := tk.prev(tick.Add(-time.Second)); !p.Equal(want[i-1]) {
						t.Errorf("prev(%s - 1s) = %s, want %s", tick, p, want[i-1])
					}
				}
			}
		})
	}
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// specZone loads the zone of a "CRON_TZ=<zone> ..." spec.
func specZone(t *testing.T, spec string) *time.Location {
	t.Helper()
	zone, _, _ := strings.Cut(strings.TrimPrefix(spec, "CRON_TZ="), " ")
	return mustLoad(t, zone)
}

// formatIn writes ts in RFC 3339 in loc, for failure messages.
func formatIn(ts []time.Time, loc *time.Location) []string {
	out := make([]string, len(ts))
	for i, x := range ts {
		out[i] = x.In(loc).Format(time.RFC3339)
	}
	return out
}
