package rdb

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestQueue_Register(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	for range 2 { // one HSET: a re-send writes the same
		if err := e.q.Register(e.ctx, KindPriority); err != nil {
			t.Fatal(err)
		}
		if err := e.q.RegisterWriteBehind(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if kind, _ := e.c.HGet(e.ctx, Registry(e.q.prefix), "q").Result(); kind != KindPriority {
		t.Errorf("registry says %q", kind)
	}
	if v, _ := e.c.HGet(e.ctx, WriteBehindRegistry(e.q.prefix), "q").Result(); v != "1" {
		t.Errorf("write-behind registry says %q", v)
	}
}

// TestQueue_Control reads the pause flag and cancel requests, adds the
// processed counts, records a worker's heartbeat by the queue's clock and
// gives memo hashes without a TTL one.
func TestQueue_Control(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{Clock: offsetClock(time.Hour)})
	paused, cancel, err := e.q.Control(e.ctx, ControlParams{})
	if err != nil || paused || len(cancel) != 0 {
		t.Fatalf("Control of a fresh queue: %v, %v, %v", paused, cancel, err)
	}
	e.c.Set(e.ctx, e.k.Paused, "1", 0)
	e.c.HSet(e.ctx, e.k.Cancel, "jid", 1)
	m := e.q.NewMemo()
	e.c.HSet(e.ctx, m.Key, "tok", "x") // a memo hash made again without a TTL
	minute := Minute(e.q.Now())
	paused, cancel, err = e.q.Control(e.ctx, ControlParams{Processed: map[int64]int64{minute: 5}, Worker: "w1"})
	if err != nil || !paused || !slices.Equal(cancel, []string{"jid"}) {
		t.Fatalf("Control: %v, %v, %v", paused, cancel, err)
	}
	if n, _ := e.c.HGet(e.ctx, e.k.Stats(minute), "processed").Int64(); n != 5 {
		t.Errorf("processed %d, want 5", n)
	}
	if ttl := e.c.TTL(e.ctx, e.k.Stats(minute)).Val(); ttl <= 0 {
		t.Errorf("the counters have no TTL (%s)", ttl)
	}
	if ttl := e.c.PTTL(e.ctx, m.Key).Val(); ttl <= 0 {
		t.Errorf("the memo hash has no TTL (%s)", ttl)
	}
	score, err := e.c.ZScore(e.ctx, e.k.Workers, "w1").Result()
	if at := time.UnixMilli(int64(score)); err != nil || time.Until(at) < 59*time.Minute {
		t.Errorf("heartbeat at %v (%v), want the queue's clock, an hour ahead", at, err)
	}
	// A worker silent for WorkerForget is forgotten.
	e.c.ZAdd(e.ctx, e.k.Workers, redisZ(float64(e.q.Now().Add(-WorkerForget-time.Minute).UnixMilli()), "old"))
	if _, _, err := e.q.Control(e.ctx, ControlParams{Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	if ws := e.c.ZRange(e.ctx, e.k.Workers, 0, -1).Val(); !slices.Equal(ws, []string{"w1"}) {
		t.Errorf("workers %v, want w1 only", ws)
	}
	// The heartbeat record is written with the heartbeat, with a TTL, and
	// Leave removes both.
	if _, _, err := e.q.Control(e.ctx, ControlParams{Worker: "w1", Info: `{"role":"worker"}`}); err != nil {
		t.Fatal(err)
	}
	if v := e.c.Get(e.ctx, e.k.Heartbeat("w1")).Val(); v != `{"role":"worker"}` {
		t.Errorf("heartbeat record %q", v)
	}
	if ttl := e.c.TTL(e.ctx, e.k.Heartbeat("w1")).Val(); ttl <= 0 || ttl > WorkerForget {
		t.Errorf("heartbeat record TTL %s, want at most WorkerForget", ttl)
	}
	if err := e.q.Leave(e.ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	if n := e.c.Exists(e.ctx, e.k.Heartbeat("w1")).Val(); n != 0 || e.c.ZScore(e.ctx, e.k.Workers, "w1").Err() == nil {
		t.Error("Leave left the heartbeat")
	}
	// A re-sent call adds its counts again: they are statistics.
	if err := e.q.AddProcessed(e.ctx, map[int64]int64{minute: 2}, nil); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.c.HGet(e.ctx, e.k.Stats(minute), "processed").Int64(); n != 7 {
		t.Errorf("processed %d after AddProcessed, want 7", n)
	}
}

// TestQueue_DropCancels removes the requests of stream jobs that are not
// pending; a call sent again finds nothing more to remove.
func TestQueue_DropCancels(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	// Without a stream, every request goes.
	e.c.HSet(e.ctx, e.k.Cancel, "1-1", 1)
	if n, err := e.q.DropCancels(e.ctx, []string{"1-1"}); err != nil || n != 1 || e.card(e.k.Cancel) != 0 {
		t.Fatalf("DropCancels without a stream: %d, %v", n, err)
	}
	e.group()
	e.add("running", "done", "moved")
	read := e.read("c", 3)
	e.c.XAck(e.ctx, e.k.Stream, "g", read[1])
	e.c.HSet(e.ctx, e.k.Trail, "moved-jid", TrailDelayed+"d-x")
	e.c.HSet(e.ctx, e.k.Cancel, read[0], 1, read[1], 1, "moved-jid", 1)
	all := []string{read[0], read[1], "moved-jid"}
	n, err := e.q.DropCancels(e.ctx, all)
	if err != nil || n != 2 {
		t.Fatalf("DropCancels: %d, %v; want 2", n, err)
	}
	if left := e.c.HKeys(e.ctx, e.k.Cancel).Val(); !slices.Equal(left, read[:1]) {
		t.Errorf("requests left %v, want the running job's", left)
	}
	if n, err := e.q.DropCancels(e.ctx, all); err != nil || n != 0 {
		t.Errorf("DropCancels again: %d, %v", n, err)
	}
}

func TestPrioritySet_DropCancels(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.c.HSet(e.ctx, e.pk.Jobs, "1", "data")
	e.c.HSet(e.ctx, e.k.Cancel, "1", 1, "2", 1)
	for i, want := range []int{1, 0} { // a re-send removes nothing more
		if n, err := e.q.Priority().DropCancels(e.ctx, []string{"1", "2"}); err != nil || n != want {
			t.Fatalf("call %d: %d, %v; want %d", i, n, err, want)
		}
	}
	if left := e.c.HKeys(e.ctx, e.k.Cancel).Val(); !slices.Equal(left, []string{"1"}) {
		t.Errorf("requests left %v", left)
	}
}

// TestQueue_ProgressAndResult store by the queue's clock; a re-sent call
// stores the same again.
func TestQueue_ProgressAndResult(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{Clock: offsetClock(-time.Hour)})
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	for range 2 {
		if err := e.q.SetProgress(ctx, ProgressParams{JobID: "j", Percent: 40, Message: "half", Retention: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := e.q.SetResult(ctx, ResultParams{JobID: "j", Result: []byte("r"), Retention: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	var p Progress
	raw, _ := e.c.Get(ctx, e.k.Progress("j")).Bytes()
	if err := jsonUnmarshal(raw, &p); err != nil || p.Percent != 40 || p.Message != "half" || time.Since(time.UnixMilli(p.At)) < 59*time.Minute {
		t.Errorf("progress %+v (%v), want stamped an hour ago", p, err)
	}
	if r, _ := e.c.Get(ctx, e.k.Result("j")).Result(); r != "r" {
		t.Errorf("result %q", r)
	}
	if ttl := e.c.TTL(ctx, e.k.Result("j")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("result TTL %s", ttl)
	}
}
