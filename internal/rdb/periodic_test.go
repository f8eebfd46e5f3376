package rdb

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

// tick runs the tick script for tick of schedule "s".
func (e *env) tick(tick time.Time, catchUp bool) []any {
	e.t.Helper()
	res, err := e.q.Tick(e.ctx, TickParams{Schedule: "s", Tick: tick, TTL: time.Minute, CatchUp: catchUp, Fields: job("tick")})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// TestQueue_Tick enqueues a tick once however often it is sent (a re-send
// answers "dup" with the first send's entry), never an older tick after a
// newer one, and a catch-up only of a schedule that fired before.
func TestQueue_Tick(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	t0 := time.UnixMilli(1_000_000)
	if res := e.tick(t0, true); len(res) != 2 || res[1] != "new" {
		t.Fatalf("catch-up of a schedule that never fired: %v", res)
	}
	res := e.tick(t0, false)
	id, _ := res[1].(string)
	if res[0] != int64(1) || id == "" || e.card(e.k.Stream) != 1 {
		t.Fatalf("first tick: %v", res)
	}
	if res := e.tick(t0, false); res[0] != int64(0) || res[1] != "dup" || res[2] != id {
		t.Fatalf("tick sent again: %v; want dup %s", res, id)
	}
	if res := e.tick(t0.Add(time.Minute), true); res[0] != int64(1) {
		t.Fatalf("catch-up of a later tick: %v", res)
	}
	if res := e.tick(t0.Add(-time.Minute), false); res[0] != int64(0) || res[1] != "stale" {
		t.Fatalf("an older tick: %v; want stale", res)
	}
	if n := e.card(e.k.Stream); n != 2 {
		t.Errorf("stream holds %d jobs, want 2", n)
	}
}

// TestQueue_Tick_Early: a tick later than the server's clock (a scheduler
// whose clock runs ahead) is refused with the server's time and writes
// nothing, so it can neither run early nor make earlier ticks stale.
func TestQueue_Tick_Early(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	before := e.serverMillis()
	res := e.tick(time.Now().Add(30*time.Second), false)
	if len(res) != 3 || res[0] != int64(0) || res[1] != "early" {
		t.Fatalf("a tick 30 s ahead: %v; want early", res)
	}
	if srv, _ := res[2].(string); srv < strconv.FormatInt(before, 10) || len(srv) != len(strconv.FormatInt(before, 10)) {
		t.Errorf("early reply carries server time %q, want at least %d", srv, before)
	}
	if n, _ := e.c.Exists(e.ctx, e.k.Stream, e.k.Part(PartLastTick+"s")).Result(); n != 0 {
		t.Error("an early tick wrote something")
	}
	if res := e.tick(time.Now().Add(-time.Second), false); res[0] != int64(1) {
		t.Errorf("the tick before it, on time: %v; want enqueued", res)
	}
}

func TestQueue_Tick_Full(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{MaxLen: 1})
	e.add("a")
	if _, err := e.q.Tick(e.ctx, TickParams{Schedule: "s", Tick: time.UnixMilli(1), TTL: time.Minute, Fields: job("t")}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("tick over the cap: %v, want ErrQueueFull", err)
	}
	if n, _ := e.c.Exists(e.ctx, e.k.Part(PartLastTick+"s")).Result(); n != 0 {
		t.Error("a refused tick was recorded as fired")
	}
}
