package rdb

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// idle makes entries look idle for d (XCLAIM ... IDLE, to their owner).
func (e *env) idle(owner string, d time.Duration, ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		if err := e.c.Do(e.ctx, "XCLAIM", e.k.Stream, "g", owner, 0, id, "IDLE", d.Milliseconds(), "JUSTID").Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// deliveries returns the delivery counter of a pending entry.
func (e *env) deliveries(id string) int64 {
	e.t.Helper()
	ps, err := e.c.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: e.k.Stream, Group: "g", Start: id, End: id, Count: 1}).Result()
	if err != nil || len(ps) != 1 {
		e.t.Fatalf("XPENDING %s: %v, %v", id, ps, err)
	}
	return ps[0].RetryCount
}

func TestQueue_Touch(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.add("a", "b")
	ids := e.read("c", 2)
	e.idle("c", time.Hour, ids...)
	p := TouchParams{Consumer: "c", IDs: []string{ids[0], "9-9"}}
	// Sent twice (a lost reply): each send resets the idle time again and
	// answers the same.
	for range 2 {
		lost, err := e.q.Touch(e.ctx, p)
		if err != nil || !slices.Equal(lost, []string{"9-9"}) {
			t.Fatalf("Touch: %v, %v; want 9-9 lost", lost, err)
		}
		ps, _ := e.c.XPendingExt(e.ctx, &redis.XPendingExtArgs{Stream: e.k.Stream, Group: "g", Start: "-", End: "+", Count: 10}).Result()
		if len(ps) != 2 || ps[0].Idle > time.Minute || ps[1].Idle < time.Hour || ps[0].RetryCount != 1 {
			t.Fatalf("pending %+v: want the touched one fresh and uncharged, the other idle", ps)
		}
	}
}

func TestQueue_Charge(t *testing.T) {
	t.Parallel()
	e, id := held(t, Config{})
	for range 2 { // a re-sent call sets the same count
		if ok, err := e.q.Charge(e.ctx, ChargeParams{Consumer: "c", ID: id, Count: 3}); !ok || err != nil {
			t.Fatalf("Charge: %v, %v", ok, err)
		}
		if n := e.deliveries(id); n != 3 {
			t.Fatalf("delivery counter %d, want 3", n)
		}
	}
	if ok, err := e.q.Charge(e.ctx, ChargeParams{Consumer: "other", ID: id, Count: 5}); ok || err != nil || e.deliveries(id) != 3 {
		t.Errorf("Charge by a consumer that does not hold the entry: %v, %v, counter %d", ok, err, e.deliveries(id))
	}
}

// TestQueue_Reclaim takes over idle entries uncharged, reports deleted
// ones, takes at most Count per call, and answers a call sent again with
// its token what the first took.
func TestQueue_Reclaim(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.add("a", "b", "c", "d")
	ids := e.read("dead", 4)
	e.idle("dead", time.Hour, ids...)
	if err := e.c.XDel(e.ctx, e.k.Stream, ids[0]).Err(); err != nil {
		t.Fatal(err)
	}
	p := ReclaimParams{Consumer: "c", MinIdle: time.Minute, Cursor: "0-0", Count: 2, Token: "t1", MemoTTL: time.Minute}
	next, jobs, deleted, err := e.q.Reclaim(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deleted, ids[:1]) || len(jobs) != 1 || jobs[0].ID != ids[1] || jobs[0].Count != 1 || jobs[0].Fields["payload"] != "b" {
		t.Fatalf("Reclaim: jobs %+v, deleted %v; want %s taken, %s deleted", jobs, deleted, ids[1], ids[0])
	}
	if e.deliveries(ids[1]) != 1 {
		t.Error("the takeover was charged")
	}
	// The same call again: the same reply, nothing more taken.
	next2, jobs2, _, err := e.q.Reclaim(e.ctx, p)
	if err != nil || next2 != next || len(jobs2) != 1 || jobs2[0].ID != ids[1] {
		t.Fatalf("re-sent Reclaim: %q %+v %v; want %q and the same job", next2, jobs2, err, next)
	}
	if got := e.pending("c"); !slices.Equal(got, ids[1:2]) {
		t.Errorf("pending for c: %v, want %v", got, ids[1:2])
	}
	// The next call goes on from the cursor.
	p.Cursor, p.Token = next, "t2"
	_, jobs, _, err = e.q.Reclaim(e.ctx, p)
	if err != nil || len(jobs) != 2 || jobs[0].ID != ids[2] || jobs[1].ID != ids[3] {
		t.Fatalf("next Reclaim: %+v, %v", jobs, err)
	}
	// Entries idle for less than MinIdle stay.
	e.add("e")
	fresh := e.read("dead", 1)
	p.Cursor, p.Token = "0-0", "t3"
	_, jobs, _, err = e.q.Reclaim(e.ctx, p)
	if err != nil || len(jobs) != 0 || !slices.Equal(e.pending("dead"), fresh) {
		t.Errorf("Reclaim of a fresh entry: %+v, %v", jobs, err)
	}
}

// TestQueue_Adopt takes back entries pending for the consumer, with their
// counters reset; a call sent again takes back the same entries.
func TestQueue_Adopt(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.add("a", "b")
	mine := e.read("c", 1)
	theirs := e.read("other", 1)
	for range 2 {
		jobs, deleted, err := e.q.Adopt(e.ctx, AdoptParams{Consumer: "c", IDs: []string{mine[0], theirs[0]}})
		if err != nil || len(deleted) != 0 || len(jobs) != 1 || jobs[0].ID != mine[0] || jobs[0].Count != 0 || jobs[0].Fields["payload"] != "a" {
			t.Fatalf("Adopt: %+v, %v, %v", jobs, deleted, err)
		}
		if e.deliveries(mine[0]) != 0 || e.deliveries(theirs[0]) != 1 {
			t.Fatalf("counters %d and %d, want 0 and 1", e.deliveries(mine[0]), e.deliveries(theirs[0]))
		}
	}
}

// TestQueue_Prune deletes idle consumers without pending entries, never
// the caller; a call sent again finds them gone.
func TestQueue_Prune(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.add("a")
	e.read("busy", 1)
	for _, c := range []string{"gone", "self"} {
		if err := e.c.XGroupCreateConsumer(e.ctx, e.k.Stream, "g", c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := e.q.Prune(e.ctx, PruneParams{Idle: 0, Self: "self"})
	if err != nil || !slices.Equal(gone, []string{"gone"}) {
		t.Fatalf("Prune: %v, %v; want gone deleted", gone, err)
	}
	cs, _ := e.c.XInfoConsumers(e.ctx, e.k.Stream, "g").Result()
	if len(cs) != 2 {
		t.Errorf("consumers left: %+v, want busy and self", cs)
	}
	if gone, err := e.q.Prune(e.ctx, PruneParams{Idle: 0, Self: "self"}); len(gone) != 0 || err != nil {
		t.Errorf("Prune again: %v, %v", gone, err)
	}
	if gone, err := e.q.Prune(e.ctx, PruneParams{Idle: time.Hour}); len(gone) != 0 || err != nil {
		t.Errorf("Prune of consumers idle for less than an hour: %v, %v", gone, err)
	}
}

func TestParseClaimed(t *testing.T) {
	t.Parallel()
	reply := []any{
		"5-0",
		[]any{"3-0", "4-0"},
		"1-0", int64(2), []any{"v", "1", "payload", "a"},
		"2-0", int64(0), map[any]any{"v": "1", "payload": "b"},
	}
	next, jobs, deleted, err := parseClaimed(reply)
	if err != nil {
		t.Fatal(err)
	}
	if next != "5-0" || len(jobs) != 2 || jobs[0].Fields["payload"] != "a" || jobs[0].Count != 2 ||
		jobs[1].Fields["payload"] != "b" || jobs[1].ID != "2-0" {
		t.Errorf("next %q jobs %+v", next, jobs)
	}
	if strings.Join(deleted, ",") != "3-0,4-0" {
		t.Errorf("deleted = %v", deleted)
	}
	if _, _, _, err := parseClaimed([]any{"0-0"}); err == nil {
		t.Error("short reply accepted")
	}
}

// TestQueue_ClaimsWhilePaused: while the queue is paused, a takeover takes
// nothing and a take-back resets the counters of the consumer's entries
// (a consumer uncharges what it read during a pause) but hands none back;
// after the resume both work again.
func TestQueue_ClaimsWhilePaused(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.add("a", "b", "c")
	mine := e.read("c", 2)
	theirs := e.read("dead", 1)
	e.idle("dead", time.Hour, theirs...)
	if err := e.c.Set(e.ctx, e.k.Paused, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	rp := ReclaimParams{Consumer: "d", MinIdle: time.Minute, Cursor: "0-0", Count: 10, Token: "t", MemoTTL: time.Minute}
	if _, jobs, _, err := e.q.Reclaim(e.ctx, rp); !errors.Is(err, ErrPaused) || len(jobs) != 0 {
		t.Fatalf("Reclaim while paused: %v, %v; want ErrPaused", jobs, err)
	}
	e.unchanged("a takeover while paused", before)
	if jobs, _, err := e.q.Adopt(e.ctx, AdoptParams{Consumer: "c", IDs: mine}); !errors.Is(err, ErrPaused) || len(jobs) != 0 {
		t.Fatalf("Adopt while paused: %v, %v; want ErrPaused", jobs, err)
	}
	for _, id := range mine {
		if n := e.deliveries(id); n != 0 {
			t.Errorf("entry %s read during the pause has counter %d, want 0", id, n)
		}
	}
	if got := e.pending("c"); !slices.Equal(got, mine) {
		t.Errorf("pending for c: %v, want %v", got, mine)
	}
	if err := e.c.Del(e.ctx, e.k.Paused).Err(); err != nil {
		t.Fatal(err)
	}
	if jobs, _, err := e.q.Adopt(e.ctx, AdoptParams{Consumer: "c", IDs: mine}); err != nil || len(jobs) != 2 {
		t.Fatalf("Adopt after the resume: %v, %v; want both", jobs, err)
	}
	if _, jobs, _, err := e.q.Reclaim(e.ctx, rp); err != nil || len(jobs) != 1 || jobs[0].ID != theirs[0] {
		t.Fatalf("Reclaim after the resume: %v, %v; want %v", jobs, err, theirs)
	}
}
