package rdb

import (
	"slices"
	"testing"
)

func TestPartitionJobID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		k         int
		id, want  string
		wantSplit bool
	}{
		{name: "stream entry", k: 3, id: "1700000000000-0", want: "p3~1700000000000-0", wantSplit: true},
		{name: "delayed", k: 0, id: "1700000000000-1000000000000000001", want: "p0~1700000000000-1000000000000000001", wantSplit: true},
		{name: "last partition", k: MaxPartitions - 1, id: "5-5", want: "p1023~5-5", wantSplit: true},
		{name: "chosen", k: 3, id: "invoice-42", want: "invoice-42"},
		{name: "chosen like a mark", k: 3, id: "p3:1-0", want: "p3:1-0"},
		{name: "empty", k: 3, id: "", want: ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := PartitionJobID(c.k, c.id)
			if got != c.want {
				t.Fatalf("PartitionJobID(%d, %q) = %q, want %q", c.k, c.id, got, c.want)
			}
			k, rest, ok := SplitPartitionJobID(got)
			if ok != c.wantSplit || (ok && (k != c.k || rest != c.id)) {
				t.Fatalf("SplitPartitionJobID(%q) = %d, %q, %v", got, k, rest, ok)
			}
			// No ID a producer may choose names a partition.
			if ok && JobIDProblem(got) == "" {
				t.Fatalf("JobIDProblem(%q) = \"\": a producer could choose it", got)
			}
		})
	}
	for _, bad := range []string{"p~1-0", "p01~1-0", "p1024~1-0", "p3~", "q3~1-0", "p-1~1-0", "p12345~1-0", "3~1-0"} {
		if k, rest, ok := SplitPartitionJobID(bad); ok {
			t.Errorf("SplitPartitionJobID(%q) = %d, %q, true; want false", bad, k, rest)
		}
	}
}

func TestPartitionsToAsk(t *testing.T) {
	t.Parallel()
	l := Layout{N: 4, Drain: 6}
	if bare, ks := PartitionsToAsk("p5~1-0", l); bare != "1-0" || !slices.Equal(ks, []int{5}) {
		t.Fatalf("a named partition: %q, %v; want 1-0, [5]", bare, ks)
	}
	bare, ks := PartitionsToAsk("invoice-42", l)
	if bare != "invoice-42" || len(ks) != 6 || ks[0] != PartitionOf("invoice-42", 4) {
		t.Fatalf("a chosen ID: %q, %v; want its hash's partition first of all 6", bare, ks)
	}
	if !slices.Equal(slices.Sorted(slices.Values(ks)), []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("partitions to ask %v, want each of 0..5 once", ks)
	}
}
