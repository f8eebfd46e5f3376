package rdb

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/wire"
)

// enqueueIDs sends one scriptEnqueueIDs call under memo m for jobs "id" or
// "id@later" (due in an hour); the payload of each is its ID.
func (e *env) enqueueIDs(m Memo, jobs ...string) (*EnqueueIDsParams, error) {
	e.t.Helper()
	p := &EnqueueIDsParams{Memo: m}
	for _, j := range jobs {
		id, later := strings.CutSuffix(j, "@later")
		due := "0"
		if later {
			due = DueArg(time.Time{}, time.Hour)
		}
		p.Add(e.q, id, &wire.Job{Payload: []byte(id), EnqMillis: 1}, due)
	}
	return p, e.q.EnqueueIDs(e.ctx, p)
}

// TestQueue_EnqueueIDs: jobs with chosen IDs go into the stream or the
// delayed set, each with its ID (jid field, trail); a second call with the
// same IDs writes nothing and reports them taken, as does a second job of
// one call with the ID of an earlier one and an ID whose job finished (its
// done marker); a re-send of a call answers the first send's reply.
func TestQueue_EnqueueIDs(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{DoneRetention: time.Hour})
	e.group()
	m := e.q.NewMemo()
	p, err := e.enqueueIDs(m, "job-a", "job-b@later", "job-a")
	if err != nil {
		t.Fatal(err)
	}
	if p.Added != 2 || !slices.Equal(p.Taken, []bool{false, false, true}) {
		t.Fatalf("added %d, taken %v; want 2, [false false true]", p.Added, p.Taken)
	}
	if jids := e.column(e.k.Stream, "jid"); len(jids) != 1 || jids[0] != "job-a" {
		t.Fatalf("jid fields of the stream %v, want [job-a]", jids)
	}
	if loc := e.c.HGet(e.ctx, e.k.Trail, "job-a").Val(); loc != TrailStream+e.entries(e.k.Stream)[0] {
		t.Errorf("trail of job-a %q, want its entry", loc)
	}
	member, ok := strings.CutPrefix(e.c.HGet(e.ctx, e.k.Trail, "job-b").Val(), TrailDelayed)
	if !ok || e.c.ZScore(e.ctx, e.k.Delayed, member).Err() != nil {
		t.Fatalf("trail of the delayed job-b %q is not its member", member)
	}
	if due := e.c.ZScore(e.ctx, e.k.Delayed, member).Val(); due < float64(time.Now().Add(59*time.Minute).UnixMilli()) {
		t.Errorf("job-b due at %v, want in an hour", due)
	}

	before := e.snapshot()
	resent, err := e.enqueueIDs(m, "job-a", "job-b@later", "job-a")
	if err != nil || resent.Added != 2 || !slices.Equal(resent.Taken, p.Taken) {
		t.Fatalf("re-send: added %d, taken %v, %v; want the first reply", resent.Added, resent.Taken, err)
	}
	e.unchanged("a re-send", before)
	again, err := e.enqueueIDs(Memo{}, "job-b", "job-a@later", "job-c")
	if err != nil || again.Added != 1 || !slices.Equal(again.Taken, []bool{true, true, false}) {
		t.Fatalf("second call: added %d, taken %v, %v; want 1, [true true false]", again.Added, again.Taken, err)
	}

	// Finished: the done marker keeps the ID taken.
	entries := e.read("c", 10)
	if err := e.q.Ack(e.ctx, &AckParams{IDs: entries, JobIDs: []string{"job-a", "job-c"}}); err != nil {
		t.Fatal(err)
	}
	if e.c.HExists(e.ctx, e.k.Trail, "job-a").Val() {
		t.Fatal("the trail still holds a finished job")
	}
	if after, err := e.enqueueIDs(Memo{}, "job-a", "job-d"); err != nil || !slices.Equal(after.Taken, []bool{true, false}) {
		t.Fatalf("after the finish: taken %v, %v; want [true false]", after.Taken, err)
	}
}

// TestQueue_EnqueueIDs_Full: new due jobs that do not fit under the cap are
// refused and nothing is written; jobs whose IDs are taken and delayed
// jobs do not count.
func TestQueue_EnqueueIDs_Full(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{MaxLen: 2})
	if _, err := e.enqueueIDs(Memo{}, "job-a"); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	if _, err := e.enqueueIDs(Memo{}, "job-a", "job-b", "job-c"); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("two new jobs over a cap of 2 with 1 in the stream: %v, want ErrQueueFull", err)
	}
	e.unchanged("a refused call", before)
	p, err := e.enqueueIDs(Memo{}, "job-a", "job-b", "job-c@later")
	if err != nil || p.Added != 2 || e.card(e.k.Stream) != 2 {
		t.Fatalf("a taken, a new and a delayed job under a cap of 2: added %d, stream %d, %v; want 2 and 2", p.Added, e.card(e.k.Stream), err)
	}
}
