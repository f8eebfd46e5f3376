package engine

// FetchBudget bounds the bytes of jobs one fetch brings into memory. A
// backend cannot ask Redis for entries by size (XREADGROUP and a pop take a
// count), so it asks for fewer entries after large ones: at most
// max(1, Max / s) entries, where s estimates the size of the entries to come
// by the largest one of recent fetches: after each fetch it is the larger of
// that fetch's largest entry and seven eighths of the last estimate, so a
// large entry is forgotten over about 20 fetches of small ones. Before the
// first fetch nothing is known, so it asks for as many as the engine wants.
// A backend uses it from its fetch loop only. A nil budget bounds nothing.
type FetchBudget struct {
	max int64 // bytes; 0 or less: no bound
	est int64
}

// NewFetchBudget returns a budget of maxBytes (0 or less: none).
func NewFetchBudget(maxBytes int64) *FetchBudget {
	return &FetchBudget{max: maxBytes, est: 1}
}

// Count returns how many entries a fetch may ask for: at most n, at least 1.
func (b *FetchBudget) Count(n int) int {
	if b == nil || b.max <= 0 || n <= 1 {
		return n
	}
	return int(max(1, min(int64(n), b.max/b.est)))
}

// Observe takes the size of the largest entry of a fetch that returned some.
func (b *FetchBudget) Observe(largest int64) {
	if b != nil {
		b.est = max(largest, b.est-b.est/8, 1)
	}
}

// FieldsSize is the size of a job's fields: the bytes of every name and
// string value.
func FieldsSize(fields map[string]any) int64 {
	var n int64
	for k, v := range fields {
		n += int64(len(k))
		switch s := v.(type) {
		case string:
			n += int64(len(s))
		case []byte:
			n += int64(len(s))
		}
	}
	return n
}
