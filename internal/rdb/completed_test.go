package rdb

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/wire"
)

// completedCfg keeps completed jobs for an hour, at most max of them.
func completedCfg(max int64) Config {
	return Config{Completed: CompletedConfig{Retention: time.Hour, Max: max}}
}

// ackDone acknowledges the entries ids (held by consumer "c"), recording
// them as completed jobs "job-<entry>" that ran for ran, under flow
// control (the two-call path) when flow is true.
func (e *env) ackDone(ids []string, ran time.Duration, flow bool) {
	e.t.Helper()
	p := AckParams{IDs: ids}
	for _, id := range ids {
		p.Completed = append(p.Completed, CompletedJob{Entry: id, JobID: "job-" + id, Kind: "mail", Enq: "1700000000000", Ran: ran, Attempt: 2, Size: 3, Payload: "abc"})
	}
	if flow {
		p.Flow = "c"
	}
	if err := e.q.Ack(e.ctx, &p); err != nil {
		e.t.Fatal(err)
	}
}

// completedIDs returns the stable IDs of the completed set, oldest first.
func (e *env) completedIDs() []string {
	e.t.Helper()
	ids, err := e.c.ZRange(e.ctx, e.k.Completed(), 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func TestQueue_AckCompleted(t *testing.T) {
	t.Parallel()
	for _, flow := range []bool{false, true} {
		t.Run("flow="+strconv.FormatBool(flow), func(t *testing.T) {
			t.Parallel()
			e := setup(t, completedCfg(0))
			e.group()
			e.add("a", "b", "c")
			ids := e.read("c", 3)
			// The first is acknowledged already (another consumer's ack):
			// this call does not complete it, so it records nothing of it.
			if err := e.c.XAck(e.ctx, e.k.Stream, "g", ids[0]).Err(); err != nil {
				t.Fatal(err)
			}
			before := e.serverMillis()
			e.ackDone(ids, 1500*time.Millisecond, flow)
			after := e.serverMillis()
			if p := e.pending(""); len(p) != 0 {
				t.Fatalf("still pending: %v", p)
			}
			want := []string{"job-" + ids[1], "job-" + ids[2]}
			if got := e.completedIDs(); !slices.Equal(got, want) {
				t.Fatalf("completed %v, want %v", got, want)
			}
			if n := e.card(e.k.CompletedJobs()); n != 2 {
				t.Fatalf("%d records, want 2", n)
			}
			data, err := e.c.HGet(e.ctx, e.k.CompletedJobs(), want[0]).Result()
			if err != nil {
				t.Fatal(err)
			}
			r, err := wire.Unpack(data)
			if err != nil {
				t.Fatal(err)
			}
			fin, _ := strconv.ParseInt(r[CompletedFinished].(string), 10, 64)
			st, _ := strconv.ParseInt(r[CompletedStarted].(string), 10, 64)
			if fin < before || fin > after || fin-st != 1500 {
				t.Errorf("finished %d, started %d: want finished by the server's clock in [%d, %d], 1500 ms after the start", fin, st, before, after)
			}
			for f, v := range map[string]string{CompletedEntry: ids[1], CompletedKind: "mail", CompletedEnqueued: "1700000000000", CompletedAttempt: "2", CompletedSize: "3", CompletedPayload: "abc"} {
				if r[f] != v {
					t.Errorf("record field %s = %v, want %q", f, r[f], v)
				}
			}
			score, _ := e.c.ZScore(e.ctx, e.k.Completed(), want[0]).Result()
			if int64(score) != fin {
				t.Errorf("scored %v, want the finish time %d", score, fin)
			}
			for _, k := range []string{e.k.Completed(), e.k.CompletedJobs()} {
				if ttl := e.c.PTTL(e.ctx, k).Val(); ttl <= 0 || ttl > time.Hour {
					t.Errorf("%s has TTL %v, want up to the retention (1h)", k, ttl)
				}
			}
			// A re-sent call (its reply lost) records nothing again.
			snap := e.snapshot()
			e.ackDone(ids, time.Second, flow)
			e.unchanged("a re-sent acknowledgement", snap)
		})
	}
}

func TestQueue_AckCompletedTrimsByCount(t *testing.T) {
	t.Parallel()
	e := setup(t, completedCfg(3))
	e.group()
	e.add("1", "2", "3", "4", "5")
	ids := e.read("c", 5)
	for _, id := range ids {
		e.ackDone([]string{id}, 0, false)
	}
	var want []string
	for _, id := range ids[2:] {
		want = append(want, "job-"+id)
	}
	got := e.completedIDs()
	// Jobs acknowledged in the same millisecond sort by ID.
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("completed %v, want the newest three %v", got, want)
	}
	if n := e.card(e.k.CompletedJobs()); n != 3 {
		t.Fatalf("%d records, want 3", n)
	}
}

func TestQueue_AckCompletedTrimsByAge(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{Completed: CompletedConfig{Retention: 300 * time.Millisecond}})
	e.group()
	e.add("old", "new")
	ids := e.read("c", 2)
	e.ackDone(ids[:1], 0, false)
	done := e.serverMillis()
	// The keys would expire with the retention: keep them, so that only
	// the acknowledgement's trimming can remove the old record.
	for _, k := range []string{e.k.Completed(), e.k.CompletedJobs()} {
		if err := e.c.Persist(e.ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	redistest.WaitFor(t, 10*time.Second, "the server's clock passes the retention", func() bool {
		return e.serverMillis() > done+300
	})
	if got := e.completedIDs(); len(got) != 1 {
		t.Fatalf("completed %v before the second acknowledgement, want the first job", got)
	}
	e.ackDone(ids[1:], 0, false)
	if got := e.completedIDs(); !slices.Equal(got, []string{"job-" + ids[1]}) {
		t.Fatalf("completed %v, want only the new job", got)
	}
	if n := e.card(e.k.CompletedJobs()); n != 1 {
		t.Fatalf("%d records, want 1", n)
	}
}

// A queue that keeps no completed jobs acknowledges as before and writes no
// record, whatever the caller passes.
func TestQueue_AckCompletedOff(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	e.group()
	e.add("a")
	ids := e.read("c", 1)
	e.ackDone(ids, 0, false)
	if p := e.pending(""); len(p) != 0 {
		t.Fatalf("still pending: %v", p)
	}
	for _, k := range redistest.ScanKeys(t, e.c, e.k.Pattern()) {
		if k != e.k.Stream {
			t.Errorf("key %s written", k)
		}
	}
}

func TestQueue_NoteCompleted(t *testing.T) {
	t.Parallel()
	e := setup(t, completedCfg(7))
	if err := e.q.NoteCompleted(e.ctx); err != nil {
		t.Fatal(err)
	}
	cc, err := ReadCompletedConfig(e.ctx, e.c, e.k)
	if err != nil || cc != (CompletedConfig{Retention: time.Hour, Max: 7}) {
		t.Fatalf("ReadCompletedConfig = %+v, %v", cc, err)
	}
	off := New(e.c, Config{Prefix: e.q.prefix, Name: "q", Group: "g"})
	if err := off.NoteCompleted(e.ctx); err != nil {
		t.Fatal(err)
	}
	if cc, err := ReadCompletedConfig(e.ctx, e.c, e.k); err != nil || cc != (CompletedConfig{}) {
		t.Fatalf("after a consumer without retention: %+v, %v", cc, err)
	}
}
