package inspect_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/streamq/streamq/inspect"
)

func payloads(p *inspect.Page) []string {
	out := make([]string, len(p.Jobs))
	for i, j := range p.Jobs {
		out[i] = string(j.Payload)
	}
	return out
}

func TestQueue_JobsInEveryState(t *testing.T) {
	t.Parallel()
	f := setupStates(t)
	ctx := context.Background()
	tests := []struct {
		state inspect.State
		want  []string
	}{
		{inspect.StateWaiting, []string{"alpha-1", "beta-2", "alpha-3"}},
		{inspect.StateRunning, []string{"running"}},
		{inspect.StateDelayed, []string{"later"}},
		{inspect.StateRetrying, []string{"retry"}},
		{inspect.StateDead, []string{"dead"}},
		{inspect.StateCancelled, []string{"stopped"}},
		{inspect.StateDone, []string{}},
	}
	for _, tt := range tests {
		p, err := f.iq.Jobs(ctx, inspect.ListOptions{State: tt.state})
		if err != nil {
			t.Fatalf("%s: %v", tt.state, err)
		}
		if got := payloads(p); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.state, got, tt.want)
		}
		if p.Cursor != "" {
			t.Errorf("%s: cursor %q after the last page", tt.state, p.Cursor)
		}
		for _, j := range p.Jobs {
			if j.State != tt.state || j.Queue != f.name {
				t.Errorf("%s: job %+v", tt.state, j)
			}
			id := j.EntryID
			if j.State == inspect.StateDead || j.State == inspect.StateCancelled {
				id = "x:" + id // dead-letter IDs may equal stream IDs
			}
			got, err := f.iq.Job(ctx, id)
			if err != nil {
				t.Errorf("Job(%s): %v", j.EntryID, err)
				continue
			}
			if got.State != tt.state || string(got.Payload) != string(j.Payload) {
				t.Errorf("Job(%s) = %s %q, want %s %q", j.EntryID, got.State, got.Payload, tt.state, j.Payload)
			}
		}
	}
	run, _ := f.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateRunning})
	if j := run.Jobs[0]; j.Owner != "ghost" || j.Attempt != 1 || j.ID != f.running {
		t.Errorf("running job %+v: want owner ghost, attempt 1, ID %s", j, f.running)
	}
	retry, _ := f.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateRetrying})
	if j := retry.Jobs[0]; j.Attempt != 1 || j.LastError == "" || time.Until(j.DueAt) < 50*time.Minute {
		t.Errorf("retrying job %+v: want attempt 1, an error, due in an hour", j)
	}
	dead, _ := f.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateDead})
	if j := dead.Jobs[0]; j.Reason != "permanent" || j.ID != f.dead || j.DeadAt.IsZero() || j.LastError == "" {
		t.Errorf("dead job %+v: want reason permanent, ID %s", j, f.dead)
	}
	done, err := f.iq.Job(ctx, f.done)
	if err != nil || done.State != inspect.StateDone {
		t.Errorf("Job(done) = %+v, %v", done, err)
	}
}

func TestQueue_Overview(t *testing.T) {
	t.Parallel()
	f := setupStates(t)
	o, err := f.iq.Overview(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := inspect.Overview{Name: f.name, Kind: inspect.KindStream, Waiting: 3, Running: 1, Delayed: 1, Retrying: 1, Dead: 1, Cancelled: 1, Consumers: o.Consumers}
	want.Length, want.OldestWaiting = o.Length, o.OldestWaiting
	if *o != want {
		t.Errorf("overview %+v, want %+v", *o, want)
	}
	// The ghost holds a job but sends no heartbeat: it is not alive.
	if o.Consumers != 0 || o.OldestWaiting <= 0 || o.Length < 4 {
		t.Errorf("consumers %d, oldest waiting %s, length %d", o.Consumers, o.OldestWaiting, o.Length)
	}
}

func TestQueue_JobsFilters(t *testing.T) {
	t.Parallel()
	f := setupStates(t)
	ctx := context.Background()
	p, err := f.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Header: map[string]string{"team": "alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := payloads(p); !slices.Equal(got, []string{"alpha-1", "alpha-3"}) {
		t.Errorf("header filter: %q", got)
	}
	p, _ = f.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Grep: "-2"})
	if got := payloads(p); !slices.Equal(got, []string{"beta-2"}) {
		t.Errorf("grep: %q", got)
	}
	// Paging: one job per page, each page continues after the previous one.
	var got []string
	cursor := ""
	for range 10 {
		p, err := f.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Limit: 1, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, payloads(p)...)
		if cursor = p.Cursor; cursor == "" {
			break
		}
	}
	if !slices.Equal(got, []string{"alpha-1", "beta-2", "alpha-3"}) {
		t.Errorf("paged: %q", got)
	}
	if _, err := f.iq.Jobs(ctx, inspect.ListOptions{State: "sleeping"}); err == nil {
		t.Error("unknown state accepted")
	}
	if _, err := f.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Limit: 5000}); err == nil {
		t.Error("limit 5000 accepted")
	}
}

func TestInspector_Queues(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	register(t, e.c, e.prefix, "emails", "priority")
	if err := e.c.HSet(ctx, e.prefix+":writebehind", "emails", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.iq.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	qs, err := e.in.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []inspect.QueueInfo{
		{Name: "emails", Kind: inspect.KindPriority, WriteBehind: true},
		{Name: "jobs", Kind: inspect.KindStream, Paused: true},
	}
	if !slices.Equal(qs, want) {
		t.Errorf("queues %+v, want %+v", qs, want)
	}
	if err := e.iq.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if qs, _ := e.in.Queues(ctx); qs[1].Paused {
		t.Error("still paused after Resume")
	}
	_, err = e.in.Queue(ctx, "job")
	var nf *inspect.NotFoundError
	if !errors.Is(err, inspect.ErrQueueNotFound) || !errors.As(err, &nf) || !slices.Equal(nf.Similar, []string{"jobs"}) {
		t.Errorf("Queue(job) = %v, want not found with similar [jobs]", err)
	}
	if _, err := inspect.New(nil, nil); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := inspect.New(e.c, &inspect.Options{ScanLimit: -1}); err == nil {
		t.Error("negative ScanLimit accepted")
	}
}

func TestQueue_Job_NotFound(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	for _, id := range []string{"1-1", "nope", "d-123"} {
		_, err := e.iq.Job(context.Background(), id)
		if !errors.Is(err, inspect.ErrJobNotFound) {
			t.Errorf("Job(%s) = %v, want ErrJobNotFound", id, err)
		}
	}
}
