package rdb

import (
	"testing"
	"time"

	"github.com/streamq/streamq/internal/wire"
)

// The retry markers follow the jobs into and out of the delayed set:
// scheduled and moved retries are marked, fresh jobs are not, and every
// way out (delete, cancel, run now, promotion) forgets the mark.
func TestMarkers_Retrying(t *testing.T) {
	t.Parallel()
	e, id := held(t, Config{})
	if e.k.Retrying != e.k.Delayed+":retrying" || e.k.Cancelled != e.k.Dead+":cancelled" {
		t.Fatalf("marker keys %q %q: the scripts derive them from the delayed set's and dead-letter stream's", e.k.Retrying, e.k.Cancelled)
	}
	fresh := e.schedule(time.Now().Add(time.Hour), Memo{}, "fresh")
	var p ScheduleParams
	p.Due = time.Now().Add(time.Hour)
	p.Add("d-sched-retry", (&wire.Job{Payload: []byte("r"), Attempt: 1}).Args())
	if err := e.q.Schedule(e.ctx, &p); err != nil {
		t.Fatal(err)
	}
	moved := wire.Job{Payload: []byte("m"), Attempt: 2, JobID: "jid-m"}
	if ok, err := e.q.Move(e.ctx, MoveParams{Consumer: "c", ID: id, Delay: time.Hour, Settle: Settle{JobID: "jid-m", Failed: true}, Fields: moved.Args()}); !ok || err != nil {
		t.Fatalf("Move: %v, %v", ok, err)
	}
	if got := e.card(e.k.Retrying); got != 2 || e.card(e.k.Delayed) != 3 {
		t.Fatalf("%d of %d delayed jobs marked retrying, want 2 of 3", got, e.card(e.k.Delayed))
	}
	if ok, err := e.q.Cancel(e.ctx, CancelParams{ID: "d-sched-retry"}); !ok || err != nil {
		t.Fatalf("Cancel: %v, %v", ok, err)
	}
	if got := e.card(e.k.Retrying); got != 1 {
		t.Errorf("after a cancel %d marked, want 1", got)
	}
	if s, err := e.q.DeleteDelayed(e.ctx, DeleteParams{ID: fresh[0]}); s != "ok" || err != nil {
		t.Fatalf("DeleteDelayed: %q, %v", s, err)
	}
	if n, _, err := e.q.Promote(e.ctx, PromoteParams{Limit: 10, Reason: "malformed", At: time.Now().Add(2 * time.Hour)}); n != 1 || err != nil {
		t.Fatalf("Promote: %d, %v", n, err)
	}
	if e.card(e.k.Retrying) != 0 || e.card(e.k.Delayed) != 0 {
		t.Errorf("after the promotion %d marked, %d delayed; want none", e.card(e.k.Retrying), e.card(e.k.Delayed))
	}
	p = ScheduleParams{Due: time.Now().Add(time.Hour)}
	p.Add("d-run", (&wire.Job{Payload: []byte("r"), Attempt: 1}).Args())
	if err := e.q.Schedule(e.ctx, &p); err != nil {
		t.Fatal(err)
	}
	if sid, err := e.q.RunNow(e.ctx, RunNowParams{ID: "d-run", JobID: "jid-r"}); sid == "" || err != nil {
		t.Fatalf("RunNow: %q, %v", sid, err)
	}
	if got := e.card(e.k.Retrying); got != 0 {
		t.Errorf("after run-now %d marked, want 0", got)
	}
}

// The cancelled markers follow the dead letters: written with a cancelled
// dead letter, forgotten when it is purged, requeued, or trimmed away by
// the dead-letter cap.
func TestMarkers_Cancelled(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{DeadLetterMaxLen: 10})
	e.group()
	const n = 350 // several stream nodes of 100 entries: MAXLEN ~ trims whole nodes
	var letters []string
	for i := range n {
		e.add("job")
		ids := e.read("c", 1)
		reason := "permanent"
		if i%2 == 0 {
			reason = "cancelled"
		}
		dl, err := e.q.DeadLetter(e.ctx, DeadLetterParams{Consumer: "c", ID: ids[0], Fields: []any{"dl_reason", reason, "payload", "job"}})
		if err != nil || dl == "" {
			t.Fatalf("DeadLetter: %q, %v", dl, err)
		}
		letters = append(letters, dl)
	}
	kept := e.entries(e.k.Dead)
	if len(kept) >= n {
		t.Fatalf("the cap of 10 trimmed nothing of %d dead letters", n)
	}
	want := int64(0)
	for _, id := range kept {
		i := indexOf(letters, id)
		if i%2 == 0 {
			want++
		}
	}
	if got := e.card(e.k.Cancelled); got != want {
		t.Fatalf("%d cancelled markers for %d kept dead letters, want %d", got, len(kept), want)
	}
	// Letters of even index were cancelled: purge one, requeue another.
	if got, err := e.q.PurgeDead(e.ctx, []string{letters[n-2]}); got != 1 || err != nil {
		t.Fatalf("PurgeDead: %d, %v", got, err)
	}
	if _, err := e.q.Requeue(e.ctx, RequeueParams{IDs: []string{letters[n-4]}}); err != nil {
		t.Fatal(err)
	}
	if got := e.card(e.k.Cancelled); got != want-2 {
		t.Errorf("after a purge and a requeue %d markers, want %d", got, want-2)
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
