package inspect_test

import (
	"path/filepath"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/outbox/sqlite"
	wbsqlite "github.com/streamq/streamq/writebehind/sqlite"
)

// TestOutboxBacklog: the backlog of an outbox table shows a committed
// row per queue, and a nil store is an error that says what to pass.
func TestOutboxBacklog(t *testing.T) {
	t.Parallel()
	if _, err := inspect.OutboxBacklog(t.Context(), nil); err == nil {
		t.Error("OutboxBacklog(nil): no error")
	}
	db, err := wbsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ob, err := sqlite.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	q, err := streamq.NewQueue(redistest.NewClient(t), redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Enqueue(t.Context(), tx, q, []byte("job")); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	b, err := inspect.OutboxBacklog(t.Context(), ob)
	if err != nil {
		t.Fatal(err)
	}
	if b.Rows != 1 || len(b.Queues) != 1 || b.Queues[0].Queue != q.Name() || b.Failing != 0 || b.Lag > b.Oldest {
		t.Errorf("backlog %+v, want one row of %s, not failing, lag at most the oldest age", b, q.Name())
	}
}
