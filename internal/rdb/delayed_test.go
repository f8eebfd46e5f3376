package rdb

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamq/streamq/internal/wire"
)

func TestNewDelayedID_Unique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := NewDelayedID()
		if seen[id] || !Generated(id) || len(strings.SplitN(id, "-", 2)[1]) != 19 {
			t.Fatalf("ID %q repeated or malformed", id)
		}
		seen[id] = true
	}
}

func TestDueMillis(t *testing.T) {
	t.Parallel()
	at := time.UnixMilli(1000)
	if got := DueMillis(at); got != 1000 {
		t.Errorf("DueMillis(1000 ms) = %d", got)
	}
	if got := DueMillis(at.Add(time.Microsecond)); got != 1001 {
		t.Errorf("DueMillis(1000 ms + 1 µs) = %d, want 1001: never before its time", got)
	}
}

// schedule stores jobs with payloads ps due at due, in one call with memo
// m, and returns their IDs.
func (e *env) schedule(due time.Time, m Memo, ps ...string) []string {
	e.t.Helper()
	p := ScheduleParams{Due: due, Memo: m}
	ids := make([]string, len(ps))
	for i, pl := range ps {
		ids[i] = NewDelayedID()
		j := wire.Job{Payload: []byte(pl), JobID: ids[i]}
		p.Add(ids[i], j.Args())
	}
	if err := e.q.Schedule(e.ctx, &p); err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func TestQueue_Schedule(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	due := time.Now().Add(time.Hour)
	m := e.q.NewMemo()
	ids := e.schedule(due, m, "a", "b")
	for _, id := range ids {
		if score, err := e.c.ZScore(e.ctx, e.k.Delayed, id).Result(); err != nil || int64(score) != DueMillis(due) {
			t.Errorf("job %s due at %v (%v), want %d", id, score, err, DueMillis(due))
		}
	}
	if n := e.card(e.k.DelayedJobs); n != 2 {
		t.Errorf("%d jobs' data stored, want 2", n)
	}
	// The reply was lost and the call is sent again (with new delayed IDs,
	// as the client makes them again): nothing more is stored.
	before := e.snapshot()
	e.schedule(due, m, "a", "b")
	e.unchanged("a re-sent schedule", before)
}

// TestQueue_Promote moves due jobs only, by the server's clock: a queue
// whose clock is an hour ahead moves nothing due in half an hour; a call at
// a time an hour later (PromoteParams.At, as tests move calls) does.
func TestQueue_Promote(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	ids := e.schedule(time.Now().Add(30*time.Minute), Memo{}, "a", "b")
	n, dead, err := e.q.Promote(e.ctx, PromoteParams{Limit: 10, Reason: "malformed"})
	if err != nil || n != 0 || len(dead) != 0 {
		t.Fatalf("Promote before the jobs are due: %d, %v, %v", n, dead, err)
	}
	ahead := New(e.c, Config{Prefix: e.q.prefix, Name: "q", Group: "g", Clock: offsetClock(time.Hour)})
	n, dead, err = ahead.Promote(e.ctx, PromoteParams{Limit: 10, Reason: "malformed"})
	if err != nil || n != 0 || len(dead) != 0 {
		t.Fatalf("Promote by a queue whose clock is an hour ahead: %d, %v, %v; want nothing moved", n, dead, err)
	}
	later := PromoteParams{Limit: 10, Reason: "malformed", At: time.Now().Add(time.Hour)}
	n, dead, err = e.q.Promote(e.ctx, later)
	if err != nil || n != 2 || len(dead) != 0 {
		t.Fatalf("Promote an hour later: %d, %v, %v; want 2 moved", n, dead, err)
	}
	// Jobs due at the same time move in the order of their IDs.
	if got := e.payloads(e.k.Stream); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"a", "b"}) {
		t.Errorf("stream holds %v, want a and b", got)
	}
	if e.card(e.k.Delayed) != 0 || e.card(e.k.DelayedJobs) != 0 {
		t.Error("promoted jobs are still in the delayed set")
	}
	for _, id := range ids {
		if at, _ := e.c.HGet(e.ctx, e.k.Trail, id).Result(); !strings.HasPrefix(at, TrailStream) {
			t.Errorf("trail of %s is %q, want its entry", id, at)
		}
	}
	// A call sent again moves only what is still due: nothing.
	if n, _, err := e.q.Promote(e.ctx, later); n != 0 || err != nil {
		t.Errorf("Promote again: %d, %v; want nothing", n, err)
	}
	if e.card(e.k.Stream) != 2 {
		t.Errorf("stream holds %d jobs after a second Promote, want 2", e.card(e.k.Stream))
	}
}

// TestQueue_Schedule_In: a job delayed by a duration is due that long after
// the server's time, whatever the queue's clock says (an hour behind here).
func TestQueue_Schedule_In(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{Clock: offsetClock(-time.Hour)})
	p := ScheduleParams{In: 1500 * time.Microsecond} // rounded up to 2 ms
	id := NewDelayedID()
	p.Add(id, (&wire.Job{Payload: []byte("a"), JobID: id}).Args())
	before := e.serverMillis()
	if err := e.q.Schedule(e.ctx, &p); err != nil {
		t.Fatal(err)
	}
	after := e.serverMillis()
	score, err := e.c.ZScore(e.ctx, e.k.Delayed, id).Result()
	if err != nil || int64(score) < before+2 || int64(score) > after+2 {
		t.Errorf("due at %v (%v), want 2 ms after the server's time (%d..%d)", score, err, before+2, after+2)
	}
}

// TestQueue_Promote_Bound: a call moves at most Limit due jobs.
func TestQueue_Promote_Bound(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.schedule(time.Now().Add(-time.Second), Memo{}, "a", "b", "c", "d", "e")
	n, _, err := e.q.Promote(e.ctx, PromoteParams{Limit: 2, Reason: "malformed"})
	if err != nil || n != 2 {
		t.Fatalf("Promote with limit 2: %d, %v", n, err)
	}
	if e.card(e.k.Stream) != 2 || e.card(e.k.Delayed) != 3 {
		t.Errorf("stream %d, delayed %d; want 2 and 3", e.card(e.k.Stream), e.card(e.k.Delayed))
	}
}

// TestQueue_Promote_Corrupt dead-letters a job whose data cannot be an
// entry, and moves the others.
func TestQueue_Promote_Corrupt(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{DeadLetterMaxLen: 10}) // a capped dead-letter stream
	e.schedule(time.Now().Add(-time.Second), Memo{}, "good")
	if err := e.c.HSet(e.ctx, e.k.DelayedJobs, "bad", "not msgpack").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.ZAdd(e.ctx, e.k.Delayed, redis.Z{Score: 0, Member: "bad"}).Err(); err != nil {
		t.Fatal(err)
	}
	n, dead, err := e.q.Promote(e.ctx, PromoteParams{Limit: 10, Reason: "malformed"})
	if err != nil || n != 2 || !slices.Equal(dead, []string{"bad"}) {
		t.Fatalf("Promote: %d, %v, %v; want 2 handled, bad dead-lettered", n, dead, err)
	}
	es, _ := e.c.XRange(e.ctx, e.k.Dead, "-", "+").Result()
	if len(es) != 1 || es[0].Values["dl_reason"] != "malformed" || es[0].Values["data"] != "not msgpack" || es[0].Values["dl_queue"] != "q" {
		t.Errorf("dead letters %v", es)
	}
	if got := e.payloads(e.k.Stream); !slices.Equal(got, []string{"good"}) {
		t.Errorf("stream %v, want the good job", got)
	}
}

func TestQueue_DelayedKeyAndCancel(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	j := &wire.Job{Payload: []byte("p")}
	p := &EnqueueOneParams{Job: j, Lock: Lock{Mode: LockUnique, Key: "k", TTL: time.Hour}, Due: time.Now().Add(time.Hour)}
	if outcome, _, err := e.q.EnqueueOne(e.ctx, p); outcome != Enqueued || err != nil {
		t.Fatal(outcome, err)
	}
	// DelayedKey only reads: a second call answers the same.
	for range 2 {
		key, tok, found, err := e.q.DelayedKey(e.ctx, j.JobID)
		if err != nil || !found || key != "k" || tok != j.KeyToken || tok == "" {
			t.Fatalf("DelayedKey: %q %q %v %v", key, tok, found, err)
		}
	}
	if _, _, found, err := e.q.DelayedKey(e.ctx, "d-none"); found || err != nil {
		t.Errorf("DelayedKey of an unknown job: found %v, %v", found, err)
	}
	m := e.q.NewMemo()
	ok, err := e.q.Cancel(e.ctx, CancelParams{ID: j.JobID, Key: "k", Token: j.KeyToken, Memo: m})
	if err != nil || !ok {
		t.Fatalf("Cancel: %v, %v", ok, err)
	}
	if e.card(e.k.Delayed) != 0 || e.card(e.k.DelayedJobs) != 0 {
		t.Error("the cancelled job is still in the delayed set")
	}
	if n, _ := e.c.Exists(e.ctx, e.k.Unique("k")).Result(); n != 0 {
		t.Error("the cancelled job's lock is still held")
	}
	// Sent again after a lost reply: the first reply, not "not there".
	before := e.snapshot()
	if ok, err := e.q.Cancel(e.ctx, CancelParams{ID: j.JobID, Key: "k", Token: j.KeyToken, Memo: m}); !ok || err != nil {
		t.Errorf("re-sent Cancel: %v, %v; want true", ok, err)
	}
	e.unchanged("a re-sent cancel", before)
	// A new call finds nothing to cancel.
	if ok, err := e.q.Cancel(e.ctx, CancelParams{ID: j.JobID, Key: "k", Token: "tok"}); ok || err != nil {
		t.Errorf("Cancel of a gone job: %v, %v; want false", ok, err)
	}
}
