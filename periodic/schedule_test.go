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
