package inspect_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
)

// TestJobs_KindAndTags: listings show each job's kind and tags and filter
// by them, in the stream and in the delayed set.
func TestJobs_KindAndTags(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	a := e.enqueue(t, "a", streamq.WithKind("email.send"), streamq.Tags("tenant:1", "vip"))
	e.enqueue(t, "b", streamq.WithKind("email.send"), streamq.Tags("tenant:2"))
	e.enqueue(t, "c", streamq.WithKind("image.resize"), streamq.Tags("tenant:1"))
	e.enqueue(t, "plain")
	later := e.enqueue(t, "later", streamq.WithKind("email.send"), streamq.Tags("vip"), streamq.ProcessIn(time.Hour))

	list := func(o inspect.ListOptions) []string {
		t.Helper()
		p, err := e.iq.Jobs(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, j := range p.Jobs {
			got = append(got, string(j.Payload))
		}
		return got
	}
	for _, tc := range []struct {
		name string
		o    inspect.ListOptions
		want []string
	}{
		{"all", inspect.ListOptions{State: inspect.StateWaiting}, []string{"a", "b", "c", "plain"}},
		{"kind", inspect.ListOptions{State: inspect.StateWaiting, Kind: "email.send"}, []string{"a", "b"}},
		{"tag", inspect.ListOptions{State: inspect.StateWaiting, Tags: []string{"tenant:1"}}, []string{"a", "c"}},
		{"kind and tags", inspect.ListOptions{State: inspect.StateWaiting, Kind: "email.send", Tags: []string{"tenant:1", "vip"}}, []string{"a"}},
		{"no match", inspect.ListOptions{State: inspect.StateWaiting, Kind: "nope"}, nil},
		{"delayed by kind", inspect.ListOptions{State: inspect.StateDelayed, Kind: "email.send", Tags: []string{"vip"}}, []string{"later"}},
	} {
		if got := list(tc.o); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	j, err := e.iq.Job(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if j.Kind != "email.send" || !slices.Equal(j.Tags, []string{"tenant:1", "vip"}) {
		t.Errorf("job %s: kind %q, tags %v", a, j.Kind, j.Tags)
	}
	if j, err := e.iq.Job(ctx, later); err != nil || j.Kind != "email.send" {
		t.Errorf("delayed job: %+v, %v", j, err)
	}
}
