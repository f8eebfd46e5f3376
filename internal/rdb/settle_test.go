package rdb

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamq/streamq/internal/wire"
)

// held returns a queue with one job read by consumer "c", and its ID.
func held(t *testing.T, cfg Config) (*env, string) {
	t.Helper()
	e := setup(t, cfg)
	e.group()
	e.add("job")
	ids := e.read("c", 1)
	if len(ids) != 1 {
		t.Fatalf("read %v", ids)
	}
	return e, ids[0]
}

// failures returns the failures counted in the current and the previous
// minute (the call may have been made in the previous one).
func (e *env) failures() int64 {
	var sum int64
	for m := Minute(time.Now().Add(-time.Minute)); m <= Minute(time.Now()); m++ {
		n, _ := e.c.HGet(e.ctx, e.k.Stats(m), "failed").Int64()
		sum += n
	}
	return sum
}

func TestQueue_Move(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		delay  time.Duration
		failed bool
	}{
		{"into the delayed set", time.Minute, true},
		{"back into the stream", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, id := held(t, Config{})
			m := e.q.NewMemo()
			p := MoveParams{Consumer: "c", ID: id, Delay: tc.delay, Settle: Settle{JobID: "jid", Failed: tc.failed}, Fields: job("again"), Memo: m}
			start := e.serverMillis()
			moved, err := e.q.Move(e.ctx, p)
			if err != nil || !moved {
				t.Fatalf("Move: %v, %v", moved, err)
			}
			if got := e.pending(""); len(got) != 0 {
				t.Errorf("still pending: %v", got)
			}
			at, _ := e.c.HGet(e.ctx, e.k.Trail, "jid").Result()
			if tc.delay > 0 {
				zs, _ := e.c.ZRangeWithScores(e.ctx, e.k.Delayed, 0, -1).Result()
				if len(zs) != 1 || at != TrailDelayed+zs[0].Member.(string) {
					t.Fatalf("delayed set %v, trail %q", zs, at)
				}
				if due := int64(zs[0].Score); due < start+tc.delay.Milliseconds() || due > e.serverMillis()+tc.delay.Milliseconds() {
					t.Errorf("due at %d, want %v after the call by the server's clock", due, tc.delay)
				}
				if e.card(e.k.Stream) != 0 {
					t.Errorf("the old entry is still in the stream")
				}
			} else {
				ids := e.entries(e.k.Stream)
				if len(ids) != 1 || ids[0] == id || at != TrailStream+ids[0] {
					t.Fatalf("stream %v (old %s), trail %q", ids, id, at)
				}
			}
			if want := map[bool]int64{true: 1}[tc.failed]; e.failures() != want {
				t.Errorf("%d failures counted, want %d", e.failures(), want)
			}
			// The reply was lost and the call is sent again: moved, once.
			before := e.snapshot()
			if moved, err := e.q.Move(e.ctx, p); !moved || err != nil {
				t.Errorf("re-sent Move: %v, %v; want the first reply", moved, err)
			}
			e.unchanged("a re-sent move", before)
		})
	}
}

// TestQueue_Move_NotHeld: a job another consumer holds now is left alone.
func TestQueue_Move_NotHeld(t *testing.T) {
	t.Parallel()
	e, id := held(t, Config{})
	before := e.snapshot()
	moved, err := e.q.Move(e.ctx, MoveParams{Consumer: "other", ID: id, Delay: time.Minute, Fields: job("x")})
	if err != nil || moved {
		t.Fatalf("Move by a consumer that does not hold the job: %v, %v", moved, err)
	}
	e.unchanged("a move of a job not held", before)
}

// TestQueue_Move_Clock: the due time of a move is the server's clock plus
// the delay, whatever the queue's clock says (an hour ahead here).
func TestQueue_Move_Clock(t *testing.T) {
	t.Parallel()
	e, id := held(t, Config{})
	e.q.SetClock(offsetClock(time.Hour))
	before := e.serverMillis()
	if moved, err := e.q.Move(e.ctx, MoveParams{Consumer: "c", ID: id, Delay: time.Second, Fields: job("x")}); !moved || err != nil {
		t.Fatal(moved, err)
	}
	after := e.serverMillis()
	zs, _ := e.c.ZRangeWithScores(e.ctx, e.k.Delayed, 0, -1).Result()
	if len(zs) != 1 || int64(zs[0].Score) < before+1000 || int64(zs[0].Score) > after+1000 {
		t.Errorf("due at %v, want a second after the server's time (%d..%d)", zs, before+1000, after+1000)
	}
}

func TestQueue_DeadLetter(t *testing.T) {
	t.Parallel()
	e, id := held(t, Config{DeadLetterMaxLen: 10}) // a capped dead-letter stream
	if err := e.c.HSet(e.ctx, e.k.Unique("k"), "token", "tok", "id", id).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.HSet(e.ctx, e.k.Cancel, "jid", 1).Err(); err != nil {
		t.Fatal(err)
	}
	m := e.q.NewMemo()
	p := DeadLetterParams{Consumer: "c", ID: id, Key: "k", Token: "tok", Settle: Settle{JobID: "jid"}, Fields: []any{"dl_reason", "permanent", "payload", "job"}, Memo: m}
	dl, err := e.q.DeadLetter(e.ctx, p)
	if err != nil || dl == "" {
		t.Fatalf("DeadLetter: %q, %v", dl, err)
	}
	if got := e.entries(e.k.Dead); !slices.Equal(got, []string{dl}) {
		t.Errorf("dead letters %v, want %s", got, dl)
	}
	if e.card(e.k.Stream) != 0 || len(e.pending("")) != 0 {
		t.Error("the job is still in the stream")
	}
	if at, _ := e.c.HGet(e.ctx, e.k.Trail, "jid").Result(); at != TrailDead+dl {
		t.Errorf("trail %q", at)
	}
	if e.failures() != 1 || e.card(e.k.Cancel) != 0 {
		t.Errorf("failures %d, cancel requests %d; want 1 and 0", e.failures(), e.card(e.k.Cancel))
	}
	if n, _ := e.c.Exists(e.ctx, e.k.Unique("k")).Result(); n != 0 {
		t.Error("the lock is still held")
	}
	before := e.snapshot()
	if again, err := e.q.DeadLetter(e.ctx, p); again != dl || err != nil {
		t.Errorf("re-sent DeadLetter: %q, %v; want %q", again, err, dl)
	}
	e.unchanged("a re-sent dead letter", before)
	p.Memo = Memo{}
	if again, err := e.q.DeadLetter(e.ctx, p); again != "" || err != nil {
		t.Errorf("DeadLetter of a job no longer held: %q, %v; want \"\"", again, err)
	}
}

func TestQueue_Requeue(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	j := wire.Job{Payload: []byte("p"), Attempt: 3, LastError: "boom"}
	j.Kind, j.UnknownKind = "new.kind", 4 // a kind no worker knew: requeued fresh, with its kind
	dl := wire.DeadLetterArgs(wire.DeadLetter{Queue: "q", ID: "1-1", Reason: "permanent", Error: "boom", Attempts: 3, Failed: time.Now()}, fieldMap(j.Args()), nil)
	id, err := e.c.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.Dead, Values: dl}).Result()
	if err != nil {
		t.Fatal(err)
	}
	m := e.q.NewMemo()
	ids, err := e.q.Requeue(e.ctx, RequeueParams{IDs: []string{id, "1-0"}, Memo: m})
	if err != nil || len(ids) != 2 || ids[0] == "" || ids[1] != "" {
		t.Fatalf("Requeue: %v, %v; want a new entry and \"\" for the unknown letter", ids, err)
	}
	es, _ := e.c.XRange(e.ctx, e.k.Stream, "-", "+").Result()
	if len(es) != 1 || es[0].Values["payload"] != "p" || es[0].Values["jid"] != "1-1" || es[0].Values["kind"] != "new.kind" {
		t.Fatalf("stream %v", es)
	}
	for f := range es[0].Values {
		if strings.HasPrefix(f, "dl_") || f == "attempt" || f == "err" || f == "uk" {
			t.Errorf("requeued job keeps field %s", f)
		}
	}
	if at, _ := e.c.HGet(e.ctx, e.k.Trail, "1-1").Result(); at != TrailStream+ids[0] {
		t.Errorf("trail %q", at)
	}
	if e.card(e.k.Dead) != 0 {
		t.Error("the dead letter is still there")
	}
	before := e.snapshot()
	if again, err := e.q.Requeue(e.ctx, RequeueParams{IDs: []string{id, "1-0"}, Memo: m}); !slices.Equal(again, ids) || err != nil {
		t.Errorf("re-sent Requeue: %v, %v; want %v", again, err, ids)
	}
	e.unchanged("a re-sent requeue", before)
}

func TestQueue_Ack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		jids, locks bool
	}{
		{"plain", false, false},
		{"moved jobs and locks", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, Config{})
			e.group()
			e.add("a", "b")
			ids := e.read("c", 2)
			p := &AckParams{IDs: ids}
			if tc.jids {
				p.JobIDs = []string{"jid"}
				e.c.HSet(e.ctx, e.k.Trail, "jid", TrailStream+ids[0], "other", "s:9-9")
			}
			if tc.locks {
				p.Keys, p.Tokens = []string{"k", "taken"}, []string{"tok", "old"}
				e.c.HSet(e.ctx, e.k.Unique("k"), "token", "tok")
				e.c.HSet(e.ctx, e.k.Unique("taken"), "token", "new") // taken by a newer job since
			}
			if err := e.q.Ack(e.ctx, p); err != nil {
				t.Fatal(err)
			}
			check := func(when string) {
				if got := e.pending(""); len(got) != 0 {
					t.Errorf("%s: still pending %v", when, got)
				}
				if tc.jids && (e.card(e.k.Trail) != 1) {
					t.Errorf("%s: trail holds %d entries, want the other job's only", when, e.card(e.k.Trail))
				}
				if tc.locks {
					if n, _ := e.c.Exists(e.ctx, e.k.Unique("k")).Result(); n != 0 {
						t.Errorf("%s: the lock is still held", when)
					}
					if tok, _ := e.c.HGet(e.ctx, e.k.Unique("taken"), "token").Result(); tok != "new" {
						t.Errorf("%s: the newer job's lock was released", when)
					}
				}
			}
			check("after Ack")
			// Sent again: the entries are acknowledged, the trail
			// forgotten, the lock released or another's: nothing changes.
			before := e.snapshot()
			if err := e.q.Ack(e.ctx, p); err != nil {
				t.Fatal(err)
			}
			check("after a re-sent Ack")
			e.unchanged("a re-sent ack", before)
		})
	}
}
