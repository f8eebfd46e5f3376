package rdb

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/wire"
)

func TestGenerated(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"1-2": true, "12": true, NewDelayedID(): true, "d-0123456789abcdef01234567": true,
		"job-1": false, "d-abc": false, "1-": false, "": false, "1-2-3": false,
	} {
		if got := Generated(id); got != want {
			t.Errorf("Generated(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestJobIDProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, id, want string // want: a part of the problem, "" for none
	}{
		{"plain", "invoice-42", ""},
		{"row key", "orders/42@v1", ""},
		{"outbox prefix", OutboxIDPrefix + "0123", "the outbox relay keeps"},
		{"longest", strings.Repeat("a", MaxJobIDLen), ""},
		{"empty", "", "is empty"},
		{"too long", strings.Repeat("a", MaxJobIDLen+1), "at most 200"},
		{"stream ID", "1700000000000-0", "form of a generated ID"},
		{"digits", "42", "form of a generated ID"},
		{"location", "s:1-0", "explicit location"},
		{"space", "a b", "holds ' '"},
		{"brace", "a{b}", "holds '{'"},
		{"leading dash", "-a", "start it with a letter or digit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := JobIDProblem(tc.id)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("JobIDProblem(%q) = %q, want %q", tc.id, got, tc.want)
			}
		})
	}
}

// enqueueOne enqueues a job with payload pl by p (its Job is set here).
func (e *env) enqueueOne(pl string, p EnqueueOneParams) (int, string) {
	e.t.Helper()
	p.Job = &wire.Job{Payload: []byte(pl), EnqMillis: 1}
	outcome, id, err := e.q.EnqueueOne(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("EnqueueOne(%s): %v", pl, err)
	}
	return outcome, id
}

// TestQueue_EnqueueOne_ID: a chosen ID is the job's ID in the stream and the
// delayed set (the jid field, the trail), a duplicate while the job lives
// (waiting, delayed, dead) and after it finished (its done marker, for the
// retention), and free again once neither is left.
func TestQueue_EnqueueOne_ID(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{DoneRetention: time.Hour})
	e.group()
	got, id := e.enqueueOne("a", EnqueueOneParams{ID: "job-a"})
	if got != Enqueued || id != "job-a" {
		t.Fatalf("EnqueueOne: %v %q, want Enqueued job-a", got, id)
	}
	entries := e.entries(e.k.Stream)
	if jids := e.column(e.k.Stream, "jid"); len(jids) != 1 || jids[0] != "job-a" {
		t.Fatalf("jid fields %v, want [job-a]", jids)
	}
	if loc := e.c.HGet(e.ctx, e.k.Trail, "job-a").Val(); loc != TrailStream+entries[0] {
		t.Fatalf("trail of job-a %q, want s:%s", loc, entries[0])
	}
	if got, id := e.enqueueOne("a again", EnqueueOneParams{ID: "job-a"}); got != Duplicate || id != "job-a" {
		t.Fatalf("the same ID while waiting: %v %q, want Duplicate", got, id)
	}
	if got, id := e.enqueueOne("a later", EnqueueOneParams{ID: "job-a", Due: time.Now().Add(time.Hour)}); got != Duplicate || id != "job-a" {
		t.Fatalf("the same ID, delayed: %v %q, want Duplicate", got, id)
	}
	if n := e.card(e.k.Stream) + e.card(e.k.Delayed); n != 1 {
		t.Fatalf("%d jobs stored, want 1", n)
	}

	// Finished: the trail is forgotten, the done marker keeps the ID taken.
	e.read("c", 10)
	if err := e.q.Ack(e.ctx, &AckParams{IDs: entries, JobIDs: []string{"job-a"}}); err != nil {
		t.Fatal(err)
	}
	if e.card(e.k.Trail) != 0 {
		t.Error("the trail still holds a finished job")
	}
	if ttl := e.c.PTTL(e.ctx, e.k.Done("job-a")).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("done marker TTL %v, want the retention (1h)", ttl)
	}
	if got, _ := e.enqueueOne("a after", EnqueueOneParams{ID: "job-a"}); got != Duplicate {
		t.Fatalf("the same ID after it finished: %v, want Duplicate", got)
	}
	e.c.Del(e.ctx, e.k.Done("job-a"))
	if got, _ := e.enqueueOne("a after retention", EnqueueOneParams{ID: "job-a"}); got != Enqueued {
		t.Fatalf("the same ID after the retention: %v, want Enqueued", got)
	}

	// Delayed: the trail points at its member; a location left behind by
	// a manual change does not keep the ID taken.
	got, id = e.enqueueOne("b", EnqueueOneParams{ID: "job-b", Due: time.Now().Add(time.Hour)})
	if got != Enqueued || id != "job-b" {
		t.Fatalf("delayed EnqueueOne: %v %q", got, id)
	}
	loc := e.c.HGet(e.ctx, e.k.Trail, "job-b").Val()
	member, ok := strings.CutPrefix(loc, TrailDelayed)
	if !ok || e.c.ZScore(e.ctx, e.k.Delayed, member).Err() != nil {
		t.Fatalf("trail of a delayed job %q is not its member", loc)
	}
	e.c.ZRem(e.ctx, e.k.Delayed, member)
	if got, _ := e.enqueueOne("b again", EnqueueOneParams{ID: "job-b"}); got != Enqueued {
		t.Fatalf("an ID whose trail points at nothing: %v, want Enqueued", got)
	}

	// Dead: a dead letter keeps the ID taken.
	dl := e.c.XAdd(e.ctx, &redis.XAddArgs{Stream: e.k.Dead, Values: []any{"dl_id", "x", "jid", "job-c"}}).Val()
	e.c.HSet(e.ctx, e.k.Trail, "job-c", TrailDead+dl)
	if got, _ := e.enqueueOne("c", EnqueueOneParams{ID: "job-c"}); got != Duplicate {
		t.Fatalf("the ID of a dead letter: %v, want Duplicate", got)
	}
}

// TestQueue_Ack_NoDoneMarkers: a queue with no done retention and jobs
// with generated IDs leave no done markers.
func TestQueue_Ack_NoDoneMarkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention time.Duration
		jid       string
	}{
		{"no retention", 0, "job-a"},
		{"generated ID", time.Hour, "1-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, Config{DoneRetention: tc.retention})
			e.group()
			ids := e.add("a")
			e.read("c", 1)
			if err := e.q.Ack(e.ctx, &AckParams{IDs: ids, JobIDs: []string{tc.jid}}); err != nil {
				t.Fatal(err)
			}
			if n := e.c.Exists(e.ctx, e.k.Done(tc.jid)).Val(); n != 0 {
				t.Error("a done marker was written")
			}
			if len(e.pending("")) != 0 {
				t.Error("the job is still pending")
			}
		})
	}
}

// TestQueue_EnqueueOne_ReSend: a call with a chosen ID sent again after a
// lost reply answers the first send's reply (not a duplicate of itself)
// and stores nothing more.
func TestQueue_EnqueueOne_ReSend(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	m := e.q.NewMemo()
	p := EnqueueOneParams{ID: "job-a", Memo: m}
	if got, _ := e.enqueueOne("a", p); got != Enqueued {
		t.Fatal(got)
	}
	before := e.snapshot()
	if got, id := e.enqueueOne("a", p); got != Enqueued || id != "job-a" {
		t.Fatalf("re-send: %v %q, want the first reply", got, id)
	}
	e.unchanged("a re-sent enqueue with an ID", before)
}

// TestQueue_EnqueueOne_Throttle: the first job of a window wins, also after
// it finished; the lock is never released by the job.
func TestQueue_EnqueueOne_Throttle(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	lock := Lock{Mode: LockThrottle, Key: "k", TTL: time.Hour}
	got, id := e.enqueueOne("a", EnqueueOneParams{Lock: lock})
	if got != Enqueued {
		t.Fatal(got)
	}
	ids := e.entries(e.k.Stream)
	if k := e.column(e.k.Stream, "key"); k[0] != "" {
		t.Errorf("a throttled job carries the key %q: its finish would release a lock", k[0])
	}
	e.read("c", 1)
	if err := e.q.Ack(e.ctx, &AckParams{IDs: ids}); err != nil {
		t.Fatal(err)
	}
	if got, id2 := e.enqueueOne("b", EnqueueOneParams{Lock: lock}); got != Duplicate || id2 != id {
		t.Fatalf("second job of the window: %v %q, want Duplicate %q", got, id2, id)
	}
	if ttl := e.c.PTTL(e.ctx, e.k.base+"throttle:k").Val(); ttl <= 59*time.Minute {
		t.Errorf("throttle lock TTL %v, want the window", ttl)
	}
	e.c.Del(e.ctx, e.k.base+"throttle:k") // the window ends
	if got, _ := e.enqueueOne("c", EnqueueOneParams{Lock: lock}); got != Enqueued {
		t.Fatalf("first job of the next window: %v", got)
	}
}

// TestQueue_EnqueueOne_Debounce: a later enqueue replaces the waiting job's
// fields and moves its start (server time); once the job left the delayed
// set, the next enqueue is a new job.
func TestQueue_EnqueueOne_Debounce(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	lock := Lock{Mode: LockDebounce, Key: "k", TTL: time.Minute}
	got, id := e.enqueueOne("a", EnqueueOneParams{Lock: lock})
	if got != Enqueued || !Generated(id) {
		t.Fatalf("first: %v %q", got, id)
	}
	first := e.c.ZScore(e.ctx, e.k.Delayed, id).Val()
	lock.TTL = 2 * time.Minute
	got, id2 := e.enqueueOne("b", EnqueueOneParams{Lock: lock})
	if got != Debounced || id2 != id {
		t.Fatalf("second: %v %q, want Debounced %q", got, id2, id)
	}
	if n := e.card(e.k.Delayed); n != 1 {
		t.Fatalf("%d delayed jobs, want 1", n)
	}
	if moved := e.c.ZScore(e.ctx, e.k.Delayed, id).Val() - first; moved < 59_000 || moved > 61_000 {
		t.Errorf("start moved by %v ms, want about 60,000", moved)
	}
	f, err := wire.Unpack(e.c.HGet(e.ctx, e.k.DelayedJobs, id).Val())
	if err != nil || f["payload"] != "b" || f["jid"] != id {
		t.Fatalf("delayed job's fields %v (%v), want payload b and jid %s", f, err, id)
	}
	// Due: promoted, so the next enqueue starts a new job.
	e.c.ZAdd(e.ctx, e.k.Delayed, redisZ(1, id))
	if n, _, err := e.q.Promote(e.ctx, PromoteParams{Limit: 10, Reason: "malformed"}); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	got, id3 := e.enqueueOne("c", EnqueueOneParams{Lock: lock})
	if got != Enqueued || id3 == id {
		t.Fatalf("after the job left the delayed set: %v %q, want a new job", got, id3)
	}
	if jids := e.column(e.k.Stream, "jid"); len(jids) != 1 || jids[0] != id {
		t.Errorf("promoted copy's jid %v, want %s", jids, id)
	}
}

// TestQueue_EnqueueOne_UniqueStates: a unique lock limited to states holds
// while its job is in one of them and passes to a new job once it is in
// none.
func TestQueue_EnqueueOne_UniqueStates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		states   string
		running  int // outcome for a second job while the first runs
		finished int // outcome once the first is acknowledged but its lock kept
	}{
		{"waiting", "w", Enqueued, Enqueued},
		{"waiting and running", "wr", Duplicate, Enqueued},
		{"all", "", Duplicate, Duplicate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, Config{})
			e.group()
			lock := Lock{Mode: LockUnique, Key: "k", TTL: time.Hour, States: tc.states}
			_, id := e.enqueueOne("a", EnqueueOneParams{Lock: lock})
			if got, held := e.enqueueOne("waiting", EnqueueOneParams{Lock: lock}); got != Duplicate || held != id {
				t.Fatalf("while waiting: %v %q, want Duplicate %q", got, held, id)
			}
			e.read("c", 1)
			m := e.q.NewMemo()
			got, _ := e.enqueueOne("running", EnqueueOneParams{Lock: lock, Memo: m})
			if got != tc.running {
				t.Fatalf("while running: %v, want %v", got, tc.running)
			}
			if got == Enqueued {
				return
			}
			e.c.XAck(e.ctx, e.k.Stream, "g", id) // finished; its lock is left (as if its release failed)
			if got, _ := e.enqueueOne("finished", EnqueueOneParams{Lock: lock}); got != tc.finished {
				t.Fatalf("after it finished: %v, want %v", got, tc.finished)
			}
		})
	}
}
