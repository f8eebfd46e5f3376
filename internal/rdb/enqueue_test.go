package rdb

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

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

func TestQueue_EnqueueUnique(t *testing.T) {
	t.Parallel()
	for _, delayed := range []bool{false, true} {
		t.Run(fmt.Sprintf("delayed=%v", delayed), func(t *testing.T) {
			t.Parallel()
			e := setup(t, Config{})
			unique := func(payload, token string, m Memo) (bool, string, error) {
				j := &wire.Job{Payload: []byte(payload), EnqMillis: 1, Key: "k", KeyToken: token}
				p := &EnqueueUniqueParams{Job: j, LockTTL: time.Minute, Memo: m}
				if delayed {
					j.JobID, p.Due = NewDelayedID(), time.Now().Add(time.Hour)
				}
				return e.q.EnqueueUnique(e.ctx, p)
			}
			m := e.q.NewMemo()
			ok, id, err := unique("first", "t1", m)
			if err != nil || !ok || id == "" {
				t.Fatalf("EnqueueUnique: %v %q %v", ok, id, err)
			}
			if delayed && (e.card(e.k.Delayed) != 1 || e.card(e.k.Stream) != 0) || !delayed && e.card(e.k.Stream) != 1 {
				t.Fatalf("the job is not where it belongs: stream %d, delayed %d", e.card(e.k.Stream), e.card(e.k.Delayed))
			}
			if tok, _ := e.c.HGet(e.ctx, e.k.Unique("k"), "token").Result(); tok != "t1" {
				t.Errorf("lock token %q, want t1", tok)
			}
			// Another job with the key gets the holder's ID.
			ok2, id2, err := unique("second", "t2", Memo{})
			if err != nil || ok2 || id2 != id {
				t.Fatalf("duplicate: %v %q %v; want false and %q", ok2, id2, err, id)
			}
			// The first call is sent again after its job released the key:
			// its own reply, nothing enqueued.
			if err := e.c.Del(e.ctx, e.k.Unique("k")).Err(); err != nil {
				t.Fatal(err)
			}
			before := e.snapshot()
			ok3, id3, err := unique("first", "t1", m)
			if err != nil || !ok3 || id3 != id {
				t.Fatalf("re-send: %v %q %v; want true and %q", ok3, id3, err, id)
			}
			e.unchanged("a re-sent unique enqueue", before)
		})
	}
}

func TestQueue_EnqueueUnique_Full(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{MaxLen: 1})
	e.add("a")
	j := &wire.Job{Payload: []byte("b"), Key: "k", KeyToken: "t"}
	if _, _, err := e.q.EnqueueUnique(e.ctx, &EnqueueUniqueParams{Job: j, LockTTL: time.Minute}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("EnqueueUnique over the cap: %v, want ErrQueueFull", err)
	}
	if n, _ := e.c.Exists(e.ctx, e.k.Unique("k")).Result(); n != 0 {
		t.Error("a refused job took its lock")
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
