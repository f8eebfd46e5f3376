package engine

import "testing"

func TestFetchBudget(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	b := NewFetchBudget(32 * mib)
	if got := b.Count(16); got != 16 {
		t.Fatalf("first fetch: count %d, want 16 (nothing known yet)", got)
	}
	b.Observe(16 * mib)
	if got := b.Count(16); got != 2 {
		t.Fatalf("after a 16 MiB entry: count %d, want 2", got)
	}
	// Small entries: the count grows back to n over some fetches.
	fetches := 0
	for b.Count(16) < 16 {
		b.Observe(100)
		if fetches++; fetches > 40 {
			t.Fatalf("count %d after 40 fetches of small entries", b.Count(16))
		}
	}
	// One large entry: the next fetch asks for few.
	b.Observe(8 * mib)
	if got := b.Count(16); got != 4 {
		t.Errorf("after an 8 MiB entry: count %d, want 4", got)
	}
	// Never below 1, never above n.
	b.Observe(64 * mib)
	if got := b.Count(16); got != 1 {
		t.Errorf("after a 64 MiB entry: count %d, want 1", got)
	}
	if got := NewFetchBudget(0).Count(16); got != 16 {
		t.Errorf("without a budget: count %d, want 16", got)
	}
	var none *FetchBudget
	none.Observe(64 * mib)
	if got := none.Count(16); got != 16 {
		t.Errorf("nil budget: count %d, want 16", got)
	}
	if got := NewFetchBudget(32 * mib).Count(3); got != 3 {
		t.Errorf("count %d, want at most n = 3", got)
	}
	if got := FieldsSize(map[string]any{"v": "1", "payload": []byte("abc"), "n": int64(5)}); got != 1+1+7+3+1 {
		t.Errorf("FieldsSize = %d", got)
	}
}
