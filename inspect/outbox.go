package inspect

import (
	"context"
	"errors"

	"github.com/streamq/streamq/outbox"
)

// OutboxBacklog reads what waits in an SQL outbox table (package outbox):
// per queue the rows waiting, the age of the oldest, the relays' lag (how
// long the oldest due row that has not failed has waited) and the rows
// that failed, with an error. store is the table, from outbox/postgres.New
// or outbox/sqlite.New; the call reads the database only, in one query,
// and works whether or not a relay runs.
func OutboxBacklog(ctx context.Context, store outbox.Store) (*outbox.Backlog, error) {
	if store == nil {
		return nil, errors.New("streamq: outbox backlog: store is nil: pass the outbox table (outbox/postgres.New or outbox/sqlite.New)")
	}
	return store.Backlog(ctx)
}
