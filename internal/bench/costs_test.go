package bench

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"

	"github.com/streamq/streamq/internal/redistest"
)

// The costs scenario runs every variant on a server of its own and reports
// the commands and Redis CPU per job, plain first as the reference.
func TestScenarioCosts(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs 12,000 jobs")
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
	for _, v := range []string{"plain", "delayed", "retried once", "unique", "typed (JSON args)", "priority (Push)"} {
		if got[v] <= 0 {
			t.Errorf("no figure for %q in:\n%s", v, out.String())
		}
	}
	// What each feature adds is real work: a retried job runs twice, a
	// delayed one is moved, a unique one takes and frees a lock.
	for _, v := range []string{"delayed", "retried once", "unique"} {
		if got[v] <= got["plain"] {
			t.Errorf("%s: %.2f commands per job, not more than plain's %.2f", v, got[v], got["plain"])
		}
	}
}
