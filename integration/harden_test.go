package integration

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/wire"
)

// TestScripts_FailedMoveChangesNothing: every move script writes a job to
// its new place before it deletes it from the old one, so a write that
// fails (here: a foreign key of the wrong type where the job goes) aborts
// the script before anything is deleted, and the job stays where it was,
// unchanged.
func TestScripts_FailedMoveChangesNothing(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	q, p := relQueue(t, client, nil)
	ctx := context.Background()
	k := core.Of(q).Keys

	t.Run("stream retry into a broken delayed set", func(t *testing.T) {
		ids := enqueueAll(t, p, []string{"job"})
		if err := client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.Group(), Consumer: "c", Streams: []string{k.Stream, ">"}, Count: 1}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.Set(ctx, k.Delayed, "foreign", 0).Err(); err != nil {
			t.Fatal(err)
		}
		defer client.Del(ctx, k.Delayed)
		next := wire.Job{Payload: []byte("job"), Attempt: 1}
		if _, err := rdb.Move(ctx, client, k, q.Group(), "c", ids[0], time.Now().Add(time.Hour).UnixMilli(), "d-x", next.Args()); err == nil {
			t.Fatal("Move into a delayed set of the wrong type succeeded")
		}
		if e, err := client.XRange(ctx, k.Stream, ids[0], ids[0]).Result(); err != nil || len(e) != 1 {
			t.Fatalf("the job's entry after the failed move: %v, %v; want it kept", e, err)
		}
		if p, err := client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k.Stream, Group: q.Group(), Start: ids[0], End: ids[0], Count: 1}).Result(); err != nil || len(p) != 1 {
			t.Fatalf("the job's pending entry after the failed move: %v, %v; want it kept", p, err)
		}
	})

	t.Run("priority retry into a broken delayed set", func(t *testing.T) {
		pk := k.Priority()
		data := wire.Pack((&wire.Job{Payload: []byte("p")}).Args())
		ids, err := rdb.Push(ctx, client, pk, []any{"0", data})
		if err != nil {
			t.Fatal(err)
		}
		res, err := rdb.Pop(ctx, client, pk, "run", time.Minute.Milliseconds(), 1, "w:run.1:", nil)
		if err != nil || len(res.Jobs) != 1 {
			t.Fatalf("pop: %+v, %v", res, err)
		}
		lease := res.Jobs[0].Lease
		// Two crashed starts counted on this copy.
		if err := client.HSet(ctx, pk.Deliveries, ids[0], 2).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.Set(ctx, pk.Delayed, "foreign", 0).Err(); err != nil {
			t.Fatal(err)
		}
		retried := wire.Pack((&wire.Job{Payload: []byte("p"), Attempt: 3}).Args())
		if _, err := rdb.Retry(ctx, client, pk, lease, 1000, retried); err == nil {
			t.Fatal("Retry into a delayed set of the wrong type succeeded")
		}
		if got, err := client.HGet(ctx, pk.Jobs, ids[0]).Result(); err != nil || got != string(data) {
			t.Errorf("job data after the failed retry: %q, %v; want it unchanged", got, err)
		}
		if got, err := client.HGet(ctx, pk.Deliveries, ids[0]).Int(); err != nil || got != 2 {
			t.Errorf("delivery counter after the failed retry: %d, %v; want 2", got, err)
		}
		if err := client.ZScore(ctx, pk.Leases, lease).Err(); err != nil {
			t.Errorf("lease after the failed retry: %v; want it held", err)
		}
	})
}
