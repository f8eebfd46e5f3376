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
	db := rdb.New(q.client, rdb.Config{Prefix: q.cfg.KeyPrefix, Name: q.name, Group: q.group,
		MaxLen: q.cfg.MaxLen, DeadLetterMaxLen: q.cfg.DeadLetterMaxLen, Clock: fixedClock(now)})
	n, _, err := db.Promote(ctx, rdb.PromoteParams{Limit: limit, Reason: ReasonMalformed})
	return n, err
}

// fixedClock is a clock that always says the same time.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }
