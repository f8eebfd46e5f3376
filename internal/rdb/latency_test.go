package rdb

import (
	"testing"
	"time"
)

func TestParseLatencyField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, field string
		want        LatencyEntry
		ok          bool
	}{
		{"queue wait", LatencyField(LatencyWait, 12, "", false), LatencyEntry{Type: 'w', Bucket: 12}, true},
		{"kind run", LatencyField(LatencyRun, 3, "a:b", true), LatencyEntry{Type: 'r', Bucket: 3, Kind: "a:b", PerKind: true}, true},
		{"untyped kind", LatencyField(LatencyRun, 3, "", true), LatencyEntry{Type: 'r', Bucket: 3, PerKind: true}, true},
		{"successes", LatencyCountField(LatencyOK, "email"), LatencyEntry{Type: 'p', Kind: "email", PerKind: true}, true},
		{"untracked", LatencyUntracked, LatencyEntry{Type: 'x'}, true},
		{"bad bucket", "w:z", LatencyEntry{}, false},
		{"unknown", "q:1", LatencyEntry{}, false},
		{"short", "w", LatencyEntry{}, false},
	} {
		got, ok := ParseLatencyField(tc.field)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: ParseLatencyField(%q) = %+v, %v; want %+v, %v", tc.name, tc.field, got, ok, tc.want, tc.ok)
		}
	}
}

// TestQueue_ControlLatency: a control tick adds the histograms to the
// minute's latency hash, with the counters' expiry.
func TestQueue_ControlLatency(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	m := Minute(time.Now())
	lat := map[int64]map[string]int64{m: {"w:3": 2, "p:email": 1}}
	for range 2 {
		if _, _, err := e.q.Control(e.ctx, ControlParams{Latency: lat}); err != nil {
			t.Fatal(err)
		}
	}
	if v := e.c.HGetAll(e.ctx, e.k.Latency(m)).Val(); v["w:3"] != "4" || v["p:email"] != "2" {
		t.Errorf("latency hash %v, want w:3=4 p:email=2", v)
	}
	if ttl := e.c.TTL(e.ctx, e.k.Latency(m)).Val(); ttl <= 0 || ttl > StatsTTL*time.Second {
		t.Errorf("latency hash TTL %s, want at most %ds", ttl, StatsTTL)
	}
}
