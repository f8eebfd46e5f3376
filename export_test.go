package streamq

import (
	"context"
	"time"

	"github.com/streamq/streamq/internal/rdb"
)

// Promote exposes [Queue.promote] to the tests of package streamq_test: it
// moves up to limit jobs due at now from q's delayed set into the stream, as
// one scheduler tick does at that time, and returns how many due jobs it
// handled.
func Promote(q *Queue, ctx context.Context, now time.Time, limit int) (int, error) {
	n, _, err := q.db.Promote(ctx, rdb.PromoteParams{Limit: limit, Reason: ReasonMalformed, At: now})
	return n, err
}

// SkewClock moves q's clock (the process's clock as q reads it) by d, as if
// its process ran on a machine whose clock is off by d. Call it before q is
// used.
func SkewClock(q *Queue, d time.Duration) { q.db.SetClock(skewedClock(d)) }

// skewedClock is the system clock moved by its duration.
type skewedClock time.Duration

func (c skewedClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// PartitionOf exposes the routing of keys to the tests of package
// streamq_test: the partition of key among n.
func PartitionOf(key string, n int) int { return rdb.PartitionOf(key, n) }

// StreamKeyOf returns the key of q's stream.
func StreamKeyOf(q *Queue) string { return q.keys.Stream }
