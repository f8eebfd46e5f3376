package bench

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/streamq/streamq/internal/redistest"
)

// The costs scenario runs every variant on a server of its own and reports
// the commands and Redis CPU per job, plain first as the reference. The
// server has no replica, so the replicated variant says it was skipped.
func TestScenarioCosts(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs 18,000 jobs")
	}
	c := redistest.NewIsolatedClient(t)
	var out, errOut bytes.Buffer
	if code := Main([]string{"-addr", redistest.AddrOf(t, c), "-scenarios", "costs", "-runs", "1", "-max-time", "2m"}, &out, &errOut, nil); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut.String(), out.String())
	}
	line := regexp.MustCompile(`(?m)^costs/(\S+(?: \S+)*?)\s+[\d.,]+ redis cpu µs/job.*commands executed/job ([\d.]+) vs plain ([\d.]+)`)
	got := map[string]float64{}
	for _, m := range line.FindAllStringSubmatch(out.String(), -1) {
		n, _ := strconv.ParseFloat(m[2], 64)
		got[m[1]] = n
	}
	for _, v := range []string{"plain", "delayed", "retried once", "unique", "typed (JSON args)", "priority (Push)",
		"flow: per-key cap 1, 100 keys", "flow: global cap 4", "flow: rate 100000/s per key",
		"partitioned (4 partitions)", "workflow (1, 98 after it, 1 after all)", "outbox (SQLite relay)"} {
		if got[v] <= 0 {
			t.Errorf("no figure for %q in:\n%s", v, out.String())
		}
	}
	if !strings.Contains(out.String(), "costs/replicated (MinReplicas 1) skipped: the server has no replica") {
		t.Errorf("the replicated variant was not reported as skipped:\n%s", out.String())
	}
	// What each feature adds is real work: a retried job runs twice, a
	// delayed one is moved, a unique one takes and frees a lock.
	// (An outbox job can cost fewer: the relay enqueues rows in batches;
	// so can a workflow job: its records and releases are batched scripts
	// that read and write a hash field per job with one command per call.)
	for _, v := range []string{"delayed", "retried once", "unique", "flow: per-key cap 1, 100 keys", "flow: global cap 4", "flow: rate 100000/s per key"} {
		if got[v] <= got["plain"] {
			t.Errorf("%s: %.2f commands per job, not more than plain's %.2f", v, got[v], got["plain"])
		}
	}
}
