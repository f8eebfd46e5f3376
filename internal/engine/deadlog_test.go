package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// logLines decodes the JSON log lines in buf.
func logLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestMonitor_DeadLettered_Summarised(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	m := NewMonitor("q", slog.New(slog.NewJSONHandler(&buf, nil)), nil)
	now := time.Unix(1_000_000, 0)
	m.deadLog.now = func() time.Time { return now }

	// One bad batch: 20,000 dead letters in one window.
	for i := range 20_000 {
		reason := "max_deliveries"
		if i%4 == 0 {
			reason = "malformed"
		}
		m.DeadLettered(reason, "job_id", fmt.Sprint(i))
	}
	lines := logLines(t, &buf)
	if len(lines) != deadLogBurst {
		t.Fatalf("%d lines logged in the window, want the first %d one by one", len(lines), deadLogBurst)
	}
	for i, l := range lines {
		if l["msg"] != "streamq: job dead-lettered" || l["job_id"] != fmt.Sprint(i) || l["reason"] == nil {
			t.Fatalf("line %d = %v, want dead letter %d with its reason", i, l, i)
		}
	}

	// The next dead letter after the window first summarises the window.
	buf.Reset()
	now = now.Add(deadLogWindow)
	m.DeadLettered("handler_error", "job_id", "late")
	lines = logLines(t, &buf)
	if len(lines) != 2 {
		t.Fatalf("lines after the window = %v, want a summary and the new dead letter", lines)
	}
	sum := lines[0]
	skipped := 20_000 - deadLogBurst
	if sum["count"] != float64(skipped) {
		t.Fatalf("summary count = %v, want %d", sum["count"], skipped)
	}
	by, _ := sum["by_reason"].(map[string]any)
	// Dead letters 0..4 were logged (0 and 4 malformed); of the rest, every
	// fourth is malformed.
	wantMalformed := 5000 - 2
	if by["malformed"] != float64(wantMalformed) || by["max_deliveries"] != float64(skipped-wantMalformed) {
		t.Fatalf("summary by reason = %v, want malformed %d, max_deliveries %d", by, wantMalformed, skipped-wantMalformed)
	}
	if lines[1]["job_id"] != "late" {
		t.Fatalf("second line = %v, want the new dead letter logged one by one", lines[1])
	}

	// Counts left at the end of a run are flushed; a flush with nothing
	// counted writes nothing.
	buf.Reset()
	for range deadLogBurst + 3 {
		m.DeadLettered("timeout")
	}
	buf.Reset()
	m.FlushDeadLog()
	lines = logLines(t, &buf)
	if len(lines) != 1 || lines[0]["count"] != float64(4) {
		t.Fatalf("flush = %v, want one summary of 4 (5 + 3 dead letters, 4 logged before in this window)", lines)
	}
	buf.Reset()
	m.FlushDeadLog()
	if buf.Len() != 0 {
		t.Fatalf("second flush wrote %q, want nothing", buf.String())
	}
}
