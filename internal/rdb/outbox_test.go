package rdb

import (
	"errors"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/wire"
)

// outbox sends one scriptOutbox call for rows (row ID -> payload), those
// named in delayed due in an hour.
func (e *env) outbox(rows []string, delayed map[string]bool) (*OutboxParams, error) {
	e.t.Helper()
	p := &OutboxParams{MarkTTL: time.Minute}
	for _, r := range rows {
		j := &wire.Job{Payload: []byte("p-" + r), EnqMillis: 1}
		var due time.Time
		if delayed[r] {
			j.JobID, due = NewDelayedID(), time.Now().Add(time.Hour)
		}
		p.Add(e.k, r, j, due)
	}
	return p, e.q.Outbox(e.ctx, p)
}

// TestQueue_Outbox: the jobs of rows go into the stream or the delayed
// set, each with its mark (the job's ID, with the TTL); a second call for
// the same rows (a relay that did not remove them, or a re-send) adds
// nothing and returns the same IDs; a row without a mark in a call of
// marked ones is enqueued.
func TestQueue_Outbox(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{})
	p, err := e.outbox([]string{"a", "b"}, map[string]bool{"b": true})
	if err != nil {
		t.Fatal(err)
	}
	if p.Added != 2 || e.card(e.k.Stream) != 1 || e.card(e.k.Delayed) != 1 {
		t.Fatalf("added %d; stream %d, delayed %d; want 2, 1 and 1", p.Added, e.card(e.k.Stream), e.card(e.k.Delayed))
	}
	for i, r := range []string{"a", "b"} {
		if id, _ := e.c.Get(e.ctx, e.k.OutboxMark(r)).Result(); id == "" || id != p.IDs[i] {
			t.Errorf("mark of %s holds %q, want the job ID %q", r, id, p.IDs[i])
		}
		if ttl := e.c.PTTL(e.ctx, e.k.OutboxMark(r)).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("mark of %s has TTL %s, want up to 1m", r, ttl)
		}
	}
	before := e.snapshot(e.k.OutboxMark("a"), e.k.OutboxMark("b"))
	again, err := e.outbox([]string{"a", "b"}, map[string]bool{"b": true})
	if err != nil {
		t.Fatal(err)
	}
	if again.Added != 0 || again.IDs[0] != p.IDs[0] || again.IDs[1] != p.IDs[1] {
		t.Errorf("second call: added %d, IDs %v; want 0 and %v", again.Added, again.IDs, p.IDs)
	}
	after := e.snapshot(e.k.OutboxMark("a"), e.k.OutboxMark("b"))
	for k, v := range before {
		if after[k] != v {
			t.Errorf("the second call changed %s", k)
		}
	}
	mixed, err := e.outbox([]string{"a", "c"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mixed.Added != 1 || mixed.IDs[0] != p.IDs[0] || e.card(e.k.Stream) != 2 {
		t.Errorf("call with a marked and a new row: added %d, IDs %v, stream %d; want 1, a's ID first, 2", mixed.Added, mixed.IDs, e.card(e.k.Stream))
	}
}

// TestQueue_Outbox_Full: new due jobs that do not fit under the cap are
// refused, nothing written, marks neither; marked ones do not count.
func TestQueue_Outbox_Full(t *testing.T) {
	t.Parallel()
	e := setup(t, Config{MaxLen: 2})
	if _, err := e.outbox([]string{"a"}, nil); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot()
	if _, err := e.outbox([]string{"a", "b", "c"}, nil); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("two new jobs over a cap of 2 with 1 in the stream: %v, want ErrQueueFull", err)
	}
	e.unchanged("a refused call", before)
	p, err := e.outbox([]string{"a", "b"}, nil)
	if err != nil || p.Added != 1 {
		t.Fatalf("one new job and a marked one under a cap of 2: added %d, %v; want 1", p.Added, err)
	}
}
