package rdb

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamq/streamq/internal/wire"
)

// TestQueue_DeleteWaiting deletes a job no consumer was given, and only
// such a job; a call sent again finds it gone.
func TestQueue_DeleteWaiting(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	ids := e.add("running", "done")
	e.read("c", 2)
	e.c.XAck(e.ctx, e.k.Stream, "g", ids[1])
	j := wire.Job{Payload: []byte("waiting"), Key: "k", KeyToken: "tok"}
	waiting, _ := e.c.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.Stream, Values: j.Args()}).Result()
	e.c.HSet(e.ctx, e.k.Unique("k"), "token", "tok")
	e.c.HSet(e.ctx, e.k.Trail, "jid", TrailStream+waiting)
	for _, tc := range []struct{ id, want string }{
		{ids[0], ReplyRunning}, {ids[1], ReplyDone}, {waiting, "ok"}, {waiting, ReplyGone},
	} {
		got, err := e.q.DeleteWaiting(e.ctx, DeleteParams{ID: tc.id, JobID: "jid", Key: "k"})
		if err != nil || got != tc.want {
			t.Errorf("DeleteWaiting(%s): %q, %v; want %q", tc.id, got, err, tc.want)
		}
	}
	if got := e.entries(e.k.Stream); !slices.Equal(got, ids) {
		t.Errorf("stream %v, want %v", got, ids)
	}
	if e.card(e.k.Trail) != 0 || e.card(e.k.Unique("k")) != 0 {
		t.Error("the deleted job's trail or lock is left")
	}
}

func TestQueue_DeleteDelayed(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	ids := e.schedule(time.Now().Add(time.Hour), Memo{}, "a")
	e.c.HSet(e.ctx, e.k.Unique("k"), "token", "tok")
	for _, want := range []string{"ok", ReplyGone} { // sent again: gone
		if got, err := e.q.DeleteDelayed(e.ctx, DeleteParams{ID: ids[0], JobID: ids[0], Key: "k", Token: "tok"}); got != want || err != nil {
			t.Errorf("DeleteDelayed: %q, %v; want %q", got, err, want)
		}
	}
	if e.card(e.k.Delayed) != 0 || e.card(e.k.DelayedJobs) != 0 || e.card(e.k.Unique("k")) != 0 {
		t.Error("the job, its data or its lock is left")
	}
}

// TestQueue_PurgeDead deletes at most MaxControlBatch letters per call.
func TestQueue_PurgeDead(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	var ids []string
	for i := range MaxControlBatch + 1 {
		id, _ := e.c.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.Dead, Values: []any{"jid", fmt.Sprint(i), "dl_reason", "x"}}).Result()
		e.c.HSet(e.ctx, e.k.Trail, fmt.Sprint(i), TrailDead+id)
		ids = append(ids, id)
	}
	if _, err := e.q.PurgeDead(e.ctx, ids); err == nil {
		t.Errorf("PurgeDead of %d letters in one call succeeded", len(ids))
	}
	// The script itself stops at the batch.
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	if n, err := scriptPurgeDead.plain.Run(e.ctx, e.c, []string{e.k.Dead, e.k.Trail}, args...).Int(); n != MaxControlBatch || err != nil {
		t.Fatalf("script with %d letters: %d, %v; want %d", len(ids), n, err, MaxControlBatch)
	}
	for _, want := range []int{1, 0} { // sent again: nothing left to delete
		if n, err := e.q.PurgeDead(e.ctx, ids[MaxControlBatch:]); n != want || err != nil {
			t.Errorf("PurgeDead: %d, %v; want %d", n, err, want)
		}
	}
	if e.card(e.k.Dead) != 0 || e.card(e.k.Trail) != 0 {
		t.Error("dead letters or their trail left")
	}
}

func TestQueue_RunNow(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	ids := e.schedule(time.Now().Add(time.Hour), Memo{}, "a")
	id, err := e.q.RunNow(e.ctx, RunNowParams{ID: ids[0], JobID: ids[0]})
	if err != nil || id == "" || !slices.Equal(e.entries(e.k.Stream), []string{id}) {
		t.Fatalf("RunNow: %q, %v", id, err)
	}
	if at, _ := e.c.HGet(e.ctx, e.k.Trail, ids[0]).Result(); at != TrailStream+id {
		t.Errorf("trail %q", at)
	}
	// Sent again: the job is gone from the delayed set, nothing is added.
	if again, err := e.q.RunNow(e.ctx, RunNowParams{ID: ids[0], JobID: ids[0]}); again != "" || err != nil || e.card(e.k.Stream) != 1 {
		t.Errorf("RunNow again: %q, %v", again, err)
	}
}

// TestQueue_RequestCancel records a request for a running job only,
// stamped by the queue's clock; a re-sent call records it again.
func TestQueue_RequestCancel(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{Clock: offsetClock(time.Hour)})
	e.group()
	ids := e.add("running", "waiting")
	e.read("c", 1)
	for range 2 {
		if got, err := e.q.RequestCancel(e.ctx, RequestCancelParams{ID: ids[0], JobID: "jid"}); got != "ok" || err != nil {
			t.Fatalf("RequestCancel: %q, %v", got, err)
		}
	}
	at, _ := e.c.HGet(e.ctx, e.k.Cancel, "jid").Int64()
	if time.Until(time.UnixMilli(at)) < 59*time.Minute {
		t.Errorf("request stamped %v, want the queue's clock", time.UnixMilli(at))
	}
	if got, _ := e.q.RequestCancel(e.ctx, RequestCancelParams{ID: ids[1], JobID: "other"}); got != ReplyWaiting || e.card(e.k.Cancel) != 1 {
		t.Errorf("RequestCancel of a waiting job: %q", got)
	}
}
