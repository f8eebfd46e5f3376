package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/hist"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

func TestLatency_Record(t *testing.T) {
	t.Parallel()
	var l latency
	at := time.Unix(1_700_000_000, 0)
	m := rdb.Minute(at)
	l.record(at, "a", 10*time.Millisecond, time.Second, true)
	l.record(at, "a", -1, time.Second, false)
	l.record(at.Add(time.Minute), "", 0, time.Millisecond, true)
	got := l.take()
	w, r := hist.Index(10*time.Millisecond), hist.Index(time.Second)
	want := map[int64]map[string]int64{
		m: {
			rdb.LatencyField(rdb.LatencyWait, w, "", false): 1, rdb.LatencyField(rdb.LatencyRun, r, "", false): 2,
			rdb.LatencyField(rdb.LatencyWait, w, "a", true): 1, rdb.LatencyField(rdb.LatencyRun, r, "a", true): 2,
			"p:a": 1, "f:a": 1,
		},
		m + 1: {
			rdb.LatencyField(rdb.LatencyWait, 0, "", false): 1, rdb.LatencyField(rdb.LatencyRun, hist.Index(time.Millisecond), "", false): 1,
			rdb.LatencyField(rdb.LatencyWait, 0, "", true): 1, rdb.LatencyField(rdb.LatencyRun, hist.Index(time.Millisecond), "", true): 1,
			"p:": 1,
		},
	}
	if len(got) != len(want) {
		t.Fatalf("take = %v, want %v", got, want)
	}
	for mm, fields := range want {
		if len(got[mm]) != len(fields) {
			t.Errorf("minute %d: %v, want %v", mm, got[mm], fields)
		}
		for f, n := range fields {
			if got[mm][f] != n {
				t.Errorf("minute %d field %q = %d, want %d", mm, f, got[mm][f], n)
			}
		}
	}
	if again := l.take(); again != nil {
		t.Errorf("second take = %v, want nil", again)
	}
	// Counts given back come out again; those of expired minutes do not.
	l.put(map[int64]map[string]int64{m: {"x": 2}, m - 200: {"x": 1}}, at)
	if got := l.take(); len(got) != 1 || got[m]["x"] != 2 {
		t.Errorf("take after put = %v", got)
	}
}

// TestLatency_KindCap: kinds over MaxLatencyKinds in a minute count in the
// queue's histograms and as untracked; the next minute starts afresh.
func TestLatency_KindCap(t *testing.T) {
	t.Parallel()
	var l latency
	at := time.Unix(1_700_000_000, 0)
	for i := range rdb.MaxLatencyKinds + 5 {
		l.record(at, "k"+strconv.Itoa(i), time.Millisecond, time.Millisecond, true)
	}
	l.record(at.Add(3*time.Minute), "late", time.Millisecond, time.Millisecond, true) // the same slot, a new minute
	got := l.take()
	m := rdb.Minute(at)
	if n := got[m][rdb.LatencyUntracked]; n != 5 {
		t.Errorf("untracked = %d, want 5", n)
	}
	if n := got[m][rdb.LatencyField(rdb.LatencyRun, hist.Index(time.Millisecond), "", false)]; n != int64(rdb.MaxLatencyKinds+5) {
		t.Errorf("queue's runs = %d, want %d", n, rdb.MaxLatencyKinds+5)
	}
	if got[m]["p:k31"] != 1 || got[m]["p:k32"] != 0 {
		t.Errorf("kinds k31 and k32: %d, %d; want 1, 0", got[m]["p:k31"], got[m]["p:k32"])
	}
	if got[m+3]["p:late"] != 1 {
		t.Errorf("the next minute of the slot: %v", got[m+3])
	}
}

// TestLatency_RecordAllocs: recording allocates nothing once a minute's
// kind is known.
func TestLatency_RecordAllocs(t *testing.T) {
	var l latency
	at := time.Now()
	kind := string([]byte("email"))
	l.record(at, kind, time.Millisecond, time.Millisecond, true)
	d := &Delivery{Key: "1700000000000-1", Fields: map[string]any{}}
	wj := &wire.Job{Opts: wire.Opts{Kind: kind}}
	r := &run[struct{}]{lat: &l}
	if n := testing.AllocsPerRun(1000, func() { r.recordRun(d, wj, at, true) }); n != 0 {
		t.Errorf("recordRun: %v allocations, want 0", n)
	}
}

func TestReadyMillis(t *testing.T) {
	t.Parallel()
	wj := &wire.Job{EnqMillis: 5}
	for _, tc := range []struct {
		name string
		d    Delivery
		want int64
	}{
		{"stream entry", Delivery{Key: "1700000000123-4", Fields: map[string]any{}}, 1700000000123},
		{"packed", Delivery{Key: "1700000000123-4"}, 5},
		{"not an entry ID", Delivery{Key: "lease:x", Fields: map[string]any{}}, 5},
	} {
		if got := readyMillis(&tc.d, wj); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// BenchmarkLatency_Record is the recording's cost per job, from parallel
// handlers (the engine's BenchmarkEngine_RunLatency measures it in place).
func BenchmarkLatency_Record(b *testing.B) {
	var l latency
	r := &run[struct{}]{lat: &l}
	d := &Delivery{Key: "1700000000000-1", Fields: map[string]any{}}
	wj := &wire.Job{Opts: wire.Opts{Kind: "email"}}
	start := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.recordRun(d, wj, start, true)
		}
	})
}

// BenchmarkLatency_RecordSerial is BenchmarkLatency_Record from one
// goroutine: the recording without contention.
func BenchmarkLatency_RecordSerial(b *testing.B) {
	var l latency
	r := &run[struct{}]{lat: &l}
	d := &Delivery{Key: "1700000000000-1", Fields: map[string]any{}}
	wj := &wire.Job{Opts: wire.Opts{Kind: "email"}}
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		r.recordRun(d, wj, start, true)
	}
}
