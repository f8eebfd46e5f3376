package rdb

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/wire"
)

// TestEnqueueParams_Argv checks the ARGV layouts of scriptEnqueue (see its header):
// one job with its fields; jobs that differ only by payload as one template
// and their payloads; other jobs each with its field count and fields.
func TestEnqueueParams_Argv(t *testing.T) {
	t.Parallel()
	job := func(payload string, headers map[string]string) *wire.Job {
		return &wire.Job{Payload: []byte(payload), Headers: headers, EnqMillis: 7}
	}
	str := func(args []any) string {
		out := ""
		for _, a := range args[enqueueHead-1:] { // the head but t is the caller's
			switch v := a.(type) {
			case []byte:
				out += fmt.Sprintf("%q ", v)
			default:
				out += fmt.Sprintf("%v ", v)
			}
		}
		return out
	}
	h := map[string]string{"k": "v"}
	for _, tc := range []struct {
		name string
		add  func(a *EnqueueParams)
		want string
	}{
		{"one job", func(a *EnqueueParams) { a.AddJob(job("p", nil)) },
			`0 6 v 1 payload "p" enq 7 `},
		{"template", func(a *EnqueueParams) {
			a.AddJob(job("p1", h))
			a.AddLike([]byte("p2"))
			a.AddLike([]byte("p3"))
		}, `8 v 1 payload  headers "{\"k\":\"v\"}" enq 7 4 "p1" "p2" "p3" `},
		{"own fields", func(a *EnqueueParams) {
			a.AddJob(job("p1", nil))
			a.AddLike([]byte("p2"))
			a.AddJob(job("p3", h))
			a.AddLike([]byte("p4"))
		}, `0 6 v 1 payload "p1" enq 7 6 v 1 payload "p2" enq 7 8 v 1 payload "p3" headers "{\"k\":\"v\"}" enq 7 6 v 1 payload "p4" enq 7 `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var a EnqueueParams
			tc.add(&a)
			if got := str(a.argv()); got != tc.want {
				t.Errorf("ARGV[%d:]\n got %s\nwant %s", enqueueHead, got, tc.want)
			}
		})
	}
}

// enqueue enqueues jobs with payloads ps in one call with memo m (zero: a
// fresh one).
func (e *env) enqueue(m Memo, ps ...string) ([]string, error) {
	e.t.Helper()
	p := EnqueueParams{IDs: make([]string, len(ps)), Memo: m}
	for i, pl := range ps {
		if i == 0 {
			p.AddJob(&wire.Job{Payload: []byte(pl), EnqMillis: 1})
		} else {
			p.AddLike([]byte(pl))
		}
	}
	err := e.q.Enqueue(e.ctx, &p)
	return p.IDs, err
}

func TestQueue_Enqueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		jobs []string
	}{
		{"one job", []string{"a"}},
		{"a batch", []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, Config{})
			m := e.q.NewMemo()
			ids, err := e.enqueue(m, tc.jobs...)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.entries(e.k.Stream); !slices.Equal(got, ids) {
				t.Fatalf("stream holds %v, Enqueue returned %v", got, ids)
			}
			if got := e.payloads(e.k.Stream); !slices.Equal(got, tc.jobs) {
				t.Fatalf("payloads %v, want %v", got, tc.jobs)
			}
			// The reply was lost and the call is sent again: the first
			// send's IDs, nothing added.
			again, err := e.enqueue(m, tc.jobs...)
			if err != nil || !slices.Equal(again, ids) {
				t.Fatalf("re-send returned %v, %v; want the first IDs %v", again, err, ids)
			}
			if got := e.entries(e.k.Stream); !slices.Equal(got, ids) {
				t.Errorf("after the re-send the stream holds %v, want %v", got, ids)
			}
			// A new call adds.
			if _, err := e.enqueue(Memo{}, "d"); err != nil || e.card(e.k.Stream) != int64(len(ids)+1) {
				t.Errorf("a new call: %v, stream of %d", err, e.card(e.k.Stream))
			}
		})
	}
}

func TestQueue_Enqueue_Cap(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{MaxLen: 3})
	e.group()
	if _, err := e.enqueue(Memo{}, "a", "b"); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	if ids, err := e.enqueue(Memo{}, "c", "d"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("enqueue over the cap: %v, %v; want ErrQueueFull", ids, err)
	}
	e.unchanged("a refused enqueue", before)
	// Acknowledged history makes room; unacknowledged jobs do not.
	done := e.read("c", 2)
	if err := e.c.XAck(e.ctx, e.k.Stream, "g", done...).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.enqueue(Memo{}, "c", "d", "e"); err != nil {
		t.Fatalf("enqueue into acknowledged history: %v", err)
	}
	if got := e.payloads(e.k.Stream); !slices.Equal(got, []string{"c", "d", "e"}) {
		t.Errorf("stream holds %v, want the acknowledged jobs trimmed", got)
	}
}

// TestQueue_Enqueue_CapBound: an enqueue at the cap deletes at most
// max(enqueue_trim_per_job (4) × its jobs, enqueue_trim_min (64))
// acknowledged entries per call, even when more are there behind an older
// pending entry (which XTRIM MINID cannot pass).
func TestQueue_Enqueue_CapBound(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{MaxLen: 30})
	e.group()
	e.add("long job")
	e.read("c", 1) // pending: the oldest entry
	e.fill(e.k.Stream, 1500)
	read := e.read("c", 2000)
	if err := e.c.XAck(e.ctx, e.k.Stream, "g", read...).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.enqueue(Memo{}, "new"); err != nil {
		t.Fatal(err)
	}
	want := int64(1 + 1500 - 64 + 1)
	if n := e.card(e.k.Stream); n != want {
		t.Errorf("stream holds %d entries after an enqueue of one job, want %d: 64 deleted", n, want)
	}
	jobs := make([]string, 20)
	for i := range jobs {
		jobs[i] = "batch"
	}
	if _, err := e.enqueue(Memo{}, jobs...); err != nil {
		t.Fatal(err)
	}
	want += 20 - 4*20
	if n := e.card(e.k.Stream); n != want {
		t.Errorf("stream holds %d entries after an enqueue of 20 jobs, want %d: 80 deleted", n, want)
	}
}

func TestQueue_EnqueueOne_Unique(t *testing.T) {
	t.Parallel()
	for _, delayed := range []bool{false, true} {
		t.Run(fmt.Sprintf("delayed=%v", delayed), func(t *testing.T) {
			t.Parallel()
			e := setup(t, Config{})
			var first *wire.Job
			unique := func(payload string, m Memo) (int, string, error) {
				j := &wire.Job{Payload: []byte(payload), EnqMillis: 1}
				if first == nil {
					first = j
				}
				p := &EnqueueOneParams{Job: j, Lock: Lock{Mode: LockUnique, Key: "k", TTL: time.Minute}, Memo: m}
				if delayed {
					p.Due = time.Now().Add(time.Hour)
				}
				return e.q.EnqueueOne(e.ctx, p)
			}
			m := e.q.NewMemo()
			got, id, err := unique("first", m)
			if err != nil || got != Enqueued || id == "" {
				t.Fatalf("EnqueueOne: %v %q %v", got, id, err)
			}
			if delayed && (e.card(e.k.Delayed) != 1 || e.card(e.k.Stream) != 0) || !delayed && e.card(e.k.Stream) != 1 {
				t.Fatalf("the job is not where it belongs: stream %d, delayed %d", e.card(e.k.Stream), e.card(e.k.Delayed))
			}
			if delayed && (first.JobID != id || !Generated(id)) {
				t.Errorf("delayed job's ID %q, its jid %q: want one generated ID", id, first.JobID)
			}
			if tok, _ := e.c.HGet(e.ctx, e.k.Unique("k"), "token").Result(); tok != first.KeyToken || tok == "" {
				t.Errorf("lock token %q, want the job's %q", tok, first.KeyToken)
			}
			// Another job with the key gets the holder's ID.
			got2, id2, err := unique("second", Memo{})
			if err != nil || got2 != Duplicate || id2 != id {
				t.Fatalf("duplicate: %v %q %v; want Duplicate and %q", got2, id2, err, id)
			}
			// The first call is sent again after its job released the key:
			// its own reply, nothing enqueued.
			if err := e.c.Del(e.ctx, e.k.Unique("k")).Err(); err != nil {
				t.Fatal(err)
			}
			before := e.snapshot()
			got3, id3, err := unique("first", m)
			if err != nil || got3 != Enqueued || id3 != id {
				t.Fatalf("re-send: %v %q %v; want Enqueued and %q", got3, id3, err, id)
			}
			e.unchanged("a re-sent unique enqueue", before)
		})
	}
}

func TestQueue_EnqueueOne_Full(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{MaxLen: 1})
	e.add("a")
	j := &wire.Job{Payload: []byte("b")}
	if _, _, err := e.q.EnqueueOne(e.ctx, &EnqueueOneParams{Job: j, Lock: Lock{Mode: LockUnique, Key: "k", TTL: time.Minute}}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("EnqueueOne over the cap: %v, want ErrQueueFull", err)
	}
	if _, _, err := e.q.EnqueueOne(e.ctx, &EnqueueOneParams{Job: j, ID: "job-1"}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("EnqueueOne with an ID over the cap: %v, want ErrQueueFull", err)
	}
	if n, _ := e.c.Exists(e.ctx, e.k.Unique("k")).Result(); n != 0 {
		t.Error("a refused job took its lock")
	}
	if n, _ := e.c.HLen(e.ctx, e.k.Trail).Result(); n != 0 {
		t.Error("a refused job took its ID")
	}
}

// TestQueue_Trim: Trim deletes acknowledged history and nothing else; one
// call of its script frees at most trim_nodes (10,000) entries, so a long
// history goes in several calls. A second Trim finds nothing to do.
func TestQueue_Trim(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.fill(e.k.Stream, 25_000)
	acked := e.read("c", 25_000)
	if err := e.c.XAck(e.ctx, e.k.Stream, "g", acked...).Err(); err != nil {
		t.Fatal(err)
	}
	waiting := e.add("waiting")
	res, err := scriptTrim.Run(e.ctx, e.c, []string{e.k.Stream}, "-").Slice()
	if err != nil || len(res) != 2 || res[0].(int64) == 0 || res[0].(int64) > 10_000 {
		t.Fatalf("one trim call: %v (%v), want 1 to 10,000 entries deleted", res, err)
	}
	n := res[0].(int64)
	total, err := e.q.Trim(e.ctx)
	if err != nil || n+total != 25_000 {
		t.Fatalf("Trim deleted %d more (%v), want %d", total, err, 25_000-n)
	}
	if got := e.entries(e.k.Stream); !slices.Equal(got, waiting) {
		t.Errorf("stream holds %d entries after Trim, want the waiting job alone", len(got))
	}
	if again, err := e.q.Trim(e.ctx); again != 0 || err != nil {
		t.Errorf("Trim again: %d, %v; want nothing", again, err)
	}
}

// TestQueue_Trim_BehindPending: the acknowledged history behind a pending
// job (a long job), which XTRIM MINID cannot reach, goes too, in bounded
// calls (each reads at most scan_budget entries); the pending job and the
// waiting one stay.
func TestQueue_Trim_BehindPending(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	long := e.add("long")
	e.read("slow", 1)
	e.fill(e.k.Stream, 5_000)
	acked := e.read("c", 5_000)
	if err := e.c.XAck(e.ctx, e.k.Stream, "g", acked...).Err(); err != nil {
		t.Fatal(err)
	}
	waiting := e.add("waiting")
	total, err := e.q.Trim(e.ctx)
	if err != nil || total != 5_000 {
		t.Fatalf("Trim deleted %d (%v), want the 5,000 acknowledged entries", total, err)
	}
	if got := e.entries(e.k.Stream); !slices.Equal(got, append(long, waiting...)) {
		t.Errorf("stream holds %v after Trim, want the pending job %s and the waiting job %s", got, long[0], waiting[0])
	}
	if got := e.pending("slow"); !slices.Equal(got, long) {
		t.Errorf("pending for slow: %v, want %v", got, long)
	}
}

func TestPlainJob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		job  wire.Job
		want bool
	}{
		{"plain", wire.Job{Payload: []byte("p"), EnqMillis: 1}, true},
		{"empty payload", wire.Job{EnqMillis: 1}, true},
		{"headers", wire.Job{Payload: []byte("p"), Headers: map[string]string{"k": "v"}}, false},
		{"retry attempt", wire.Job{Payload: []byte("p"), Attempt: 1}, false},
		{"unique key", wire.Job{Payload: []byte("p"), Key: "k", KeyToken: "t"}, false},
		{"kind (version 2)", wire.Job{Payload: []byte("p"), Opts: wire.Opts{Kind: "k"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := plainJob(tc.job.Args()); got != tc.want {
				t.Errorf("plainJob(%v) = %v, want %v", tc.job.Args(), got, tc.want)
			}
		})
	}
}

// scriptsRun returns a func that lists the hashes of the scripts that
// e's client ran (EVALSHA) since scriptsRun was called.
func (e *env) scriptsRun() func() []string {
	e.t.Helper()
	var mu sync.Mutex
	var shas []string
	e.c.AddHook(redistest.AfterEach(func(cmd redis.Cmder) {
		if a := cmd.Args(); len(a) > 1 && strings.EqualFold(fmt.Sprint(a[0]), "evalsha") {
			mu.Lock()
			shas = append(shas, fmt.Sprint(a[1]))
			mu.Unlock()
		}
	}))
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(shas)
	}
}

// TestQueue_Enqueue_Plain: one plain job goes through scriptEnqueuePlain,
// with a cap and without, and keeps every promise of scriptEnqueue: the
// entry's fields, the memo's TTL, a re-send that changes nothing.
func TestQueue_Enqueue_Plain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cap  int64
	}{
		{"no cap", -1},
		{"cap", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, Config{MaxLen: tc.cap})
			for _, s := range []*redis.Script{scriptEnqueuePlain, scriptEnqueue} {
				if err := s.Load(e.ctx, e.c).Err(); err != nil {
					t.Fatal(err)
				}
			}
			ran := e.scriptsRun()
			m := e.q.NewMemo()
			if m.TTL == 0 {
				t.Fatal("a fresh queue's first memo asks for no TTL")
			}
			ids, err := e.enqueue(m, "a")
			if err != nil {
				t.Fatal(err)
			}
			es, err := e.c.XRange(e.ctx, e.k.Stream, "-", "+").Result()
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"v": "1", "payload": "a", "enq": "1"}
			if len(es) != 1 || es[0].ID != ids[0] || fmt.Sprint(es[0].Values) != fmt.Sprint(want) {
				t.Fatalf("stream holds %v, want one entry %s with %v", es, ids[0], want)
			}
			if ttl := e.c.PTTL(e.ctx, m.Key).Val(); ttl <= 0 {
				t.Errorf("memo hash TTL %v after a call that asked for one", ttl)
			}
			again, err := e.enqueue(m, "a")
			if err != nil || !slices.Equal(again, ids) {
				t.Fatalf("re-send returned %v, %v; want the first ID %v", again, err, ids)
			}
			if got := e.entries(e.k.Stream); !slices.Equal(got, ids) {
				t.Errorf("after the re-send the stream holds %v, want %v", got, ids)
			}
			// A job with a header is not plain: the general script.
			p := EnqueueParams{IDs: make([]string, 1)}
			p.AddJob(&wire.Job{Payload: []byte("b"), Headers: map[string]string{"k": "v"}, EnqMillis: 1})
			if err := e.q.Enqueue(e.ctx, &p); err != nil {
				t.Fatal(err)
			}
			plain, general := scriptEnqueuePlain.Hash(), scriptEnqueue.Hash()
			if got, want := ran(), []string{plain, plain, general}; !slices.Equal(got, want) {
				t.Errorf("scripts run %v, want %v (plain, plain, general)", got, want)
			}
		})
	}
}

// TestQueue_Enqueue_PlainFull: a plain job over the cap is refused and
// changes nothing; a re-send of a call that ran is answered its ID even
// when the queue is full by then.
func TestQueue_Enqueue_PlainFull(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{MaxLen: 2})
	e.group()
	if _, err := e.enqueue(Memo{}, "a"); err != nil {
		t.Fatal(err)
	}
	m := e.q.NewMemo()
	ids, err := e.enqueue(m, "b")
	if err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	if got, err := e.enqueue(Memo{}, "c"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("enqueue over the cap: %v, %v; want ErrQueueFull", got, err)
	}
	e.unchanged("a refused enqueue", before)
	again, err := e.enqueue(m, "b")
	if err != nil || !slices.Equal(again, ids) {
		t.Fatalf("re-send into a full queue returned %v, %v; want the first ID %v", again, err, ids)
	}
	e.unchanged("a re-send into a full queue", before)
	// Acknowledged history makes room, as for scriptEnqueue.
	done := e.read("c", 2)
	if err := e.c.XAck(e.ctx, e.k.Stream, "g", done...).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.enqueue(Memo{}, "c"); err != nil {
		t.Fatalf("enqueue into acknowledged history: %v", err)
	}
	if got := e.payloads(e.k.Stream); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("stream holds %v, want [b c]: the oldest acknowledged entry trimmed", got)
	}
}
