package dashboard

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/inspect"
)

func TestPretty(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want, kind string
	}{
		{"json", `{"a":1,"b":[true]}`, "{\n  \"a\": 1,\n  \"b\": [\n    true\n  ]\n}", "JSON"},
		{"text", "hello\nworld", "hello\nworld", "text"},
		{"bytes", "\x00\xffab", `"\x00\xffab"`, "escaped bytes"},
		{"empty", "", "", "empty"},
		{"script stays text", "<script>alert(1)</script>", "<script>alert(1)</script>", "text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, kind := pretty([]byte(tt.in))
			if got != tt.want || kind != tt.kind {
				t.Errorf("pretty(%q) = %q, %q; want %q, %q", tt.in, got, kind, tt.want, tt.kind)
			}
		})
	}
	big := strings.Repeat("x", 300<<10)
	if got, kind := pretty([]byte(big)); len(got) != 256<<10 || !strings.Contains(kind, "first") {
		t.Errorf("a 300 KiB payload: %d bytes shown, kind %q; want the first 256 KiB, said so", len(got), kind)
	}
}

func TestEscapedBytesAndTruncate(t *testing.T) {
	t.Parallel()
	if got := escapedBytes([]byte("héllo wörld"), 3); got != "h…" && got != "hé" {
		t.Errorf("escapedBytes cut inside a rune: %q", got)
	}
	if got := escapedBytes([]byte{0x01, 'a'}, 10); got != `"\x01a"` {
		t.Errorf("escapedBytes(control) = %q", got)
	}
	if got := truncate("ééé", 3); got != "é…" {
		t.Errorf("truncate = %q, want a cut on a rune boundary", got)
	}
}

func TestThroughputChart(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	pts := []inspect.Point{{At: now, Processed: 10, Failed: 2}, {At: now.Add(time.Minute), Processed: 40, Failed: 0}}
	svg := string(throughputChart(pts, 200, 60))
	for _, want := range []string{`<svg class="chart"`, `class="processed"`, `class="failed"`, "50 processed, 2 failed", "40/min"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q:\n%s", want, svg)
		}
	}
	if strings.Contains(svg, "style=") || strings.Contains(svg, "<script") {
		t.Errorf("chart has inline style or script:\n%s", svg)
	}
	if empty := string(throughputChart(nil, 200, 60)); !strings.HasSuffix(empty, "</svg>") {
		t.Errorf("empty chart: %s", empty)
	}
	bars := string(levelBars([]inspect.Level{{Priority: 1, Count: 5}, {Priority: 9, Count: 0}}))
	if !strings.Contains(bars, "priority 9") || !strings.Contains(bars, `class="bar"`) {
		t.Errorf("bars: %s", bars)
	}
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Time{
		"":                       {},
		"2026-11-25T02:10":       time.Date(2026, 11, 25, 2, 10, 0, 0, time.UTC),
		"2026-11-25T02:10:05":    time.Date(2026, 11, 25, 2, 10, 5, 0, time.UTC),
		"2026-11-25":             time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC),
		"2026-11-25T03:10+01:00": time.Date(2026, 11, 25, 2, 10, 0, 0, time.UTC),
	} {
		got, err := parseTime(in)
		if err != nil && strings.Contains(in, "+") {
			// RFC 3339 needs seconds.
			got, err = parseTime(strings.Replace(in, "+", ":00+", 1))
		}
		if err != nil || !got.Equal(want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseTime("yesterday"); err == nil {
		t.Error("parseTime(yesterday) = nil error")
	}
}

func TestSameOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers map[string]string
		want    bool
	}{
		{"same origin", map[string]string{"Origin": "http://dash.local:8080"}, true},
		{"other origin", map[string]string{"Origin": "http://evil.example"}, false},
		{"other port", map[string]string{"Origin": "http://dash.local:9090"}, false},
		{"referer only", map[string]string{"Referer": "http://dash.local:8080/queues/x"}, true},
		{"other referer", map[string]string{"Referer": "https://evil.example/dash.local:8080"}, false},
		{"cross-site fetch", map[string]string{"Origin": "http://dash.local:8080", "Sec-Fetch-Site": "cross-site"}, false},
		{"same-site fetch", map[string]string{"Sec-Fetch-Site": "same-site"}, false},
		{"no browser headers", nil, true},
		{"null origin", map[string]string{"Origin": "null"}, false},
		{"null origin with a same-origin referer", map[string]string{"Origin": "null", "Referer": "http://dash.local:8080/queues/x"}, false},
		{"trusted origin behind a proxy", map[string]string{"Origin": "https://Jobs.Example.com"}, true},
		{"trusted origin's referer", map[string]string{"Referer": "https://jobs.example.com/admin/queues/x"}, true},
		{"trusted host on another scheme", map[string]string{"Origin": "http://jobs.example.com"}, false},
	}
	s := &server{trusted: []string{normalOrigin("https://jobs.example.com/")}}
	for _, tt := range tests {
		r := httptest.NewRequest("POST", "http://dash.local:8080/queues/x/pause", nil)
		for k, v := range tt.headers {
			r.Header.Set(k, v)
		}
		if got := s.sameOrigin(r); got != tt.want {
			t.Errorf("%s: sameOrigin = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestVisibleText(t *testing.T) {
	t.Parallel()
	in := "<p title=\"a\u202eb\">x\u202ey</p><input name=\"error\" value=\"a\u202eb\"><form data-confirm='Delete \u200b?'>\u00e9</form>"
	want := "<p title=\"a\\u202eb\">x\\u202ey</p><input name=\"error\" value=\"a\u202eb\"><form data-confirm='Delete \\u200b?'>\u00e9</form>"
	if got := string(visibleText([]byte(in))); got != want {
		t.Errorf("visibleText:\n got %q\nwant %q", got, want)
	}
	plain := []byte("<p>plain</p>")
	if got := visibleText(plain); &got[0] != &plain[0] {
		t.Error("visibleText copied a page that needs no change")
	}
}
