package workflow

import (
	"encoding/json"
	"testing"
)

// The edges and parents the builder stores read as json.Marshal writes
// them, whatever the node names hold (the fingerprint of a workflow
// depends on the bytes).
func TestJSONEdgesAndNames_AsEncodingJSON(t *testing.T) {
	t.Parallel()
	names := []string{"a", "kid-17", `quote"d`, `back\slash`, "<tag>&", "é", "日本", "line\u2028sep", "x\x01"}
	var es []edge
	var pairs [][2]string
	for i, n := range names {
		p := []Policy{CancelDependents, RunAnyway, Ignore}[i%3]
		es = append(es, edge{node: n, policy: p})
		pairs = append(pairs, [2]string{n, p.code()})
	}
	want, _ := json.Marshal(pairs)
	if got := jsonEdges(es); got != string(want) {
		t.Errorf("jsonEdges = %s, want %s", got, want)
	}
	want, _ = json.Marshal(names)
	if got := jsonNames(es); got != string(want) {
		t.Errorf("jsonNames = %s, want %s", got, want)
	}
}
