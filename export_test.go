package streamq

import (
	"context"
	"time"
)

// Promote exposes [Queue.promote] to the tests of package streamq_test: it
// moves up to limit jobs due at now from q's delayed set into the stream, as
// one scheduler tick does, and returns how many due jobs it handled.
func Promote(q *Queue, ctx context.Context, now time.Time, limit int) (int, error) {
	n, _, err := q.promote(ctx, now, limit)
	return n, err
}
