package streamqtest_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/streamqtest"
)

// enqueueSetup returns a queue of the test's own with a producer.
func enqueueSetup(t *testing.T) (*streamqtest.Redis, *streamq.Queue, *streamq.Producer) {
	t.Helper()
	r := streamqtest.NewRedis(t)
	q := r.NewQueue("emails", nil)
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r, q, p
}

func enqueue(t *testing.T, p *streamq.Producer, payload string, opts ...streamq.EnqueueOption) string {
	t.Helper()
	id, err := p.Enqueue(t.Context(), []byte(payload), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestRequireEnqueued(t *testing.T) {
	t.Parallel()
	_, q, p := enqueueSetup(t)
	ctx := t.Context()
	due := time.Now().Add(time.Hour)
	id1 := enqueue(t, p, "ada", streamq.WithHeader("kind", "welcome"))
	enqueue(t, p, "grace", streamq.WithHeaders(map[string]string{"kind": "welcome", "lang": "en"}))
	id3 := enqueue(t, p, "later", streamq.ProcessAt(due))
	enqueue(t, p, "once", streamq.Unique("invoice:7", time.Minute))

	jobs := streamqtest.RequireEnqueued(ctx, t, q,
		streamqtest.Want{DueAt: due},
		streamqtest.Want{Headers: map[string]string{"kind": "welcome"}},
		streamqtest.Want{Key: "invoice:7"},
		streamqtest.Want{Payload: []byte("grace"), Headers: map[string]string{"lang": "en"}},
	)
	if jobs[0].ID != id3 || !jobs[0].Scheduled || jobs[0].DueAt.Sub(due).Abs() > time.Millisecond {
		t.Errorf("want[0] matched %v, want %s due at %v", jobs[0], id3, due)
	}
	// The loose want[1] matches both welcome mails; the matching leaves it
	// the one the strict want[3] does not need.
	if jobs[1].ID != id1 || string(jobs[3].Payload) != "grace" {
		t.Errorf("want[1] matched %v, want[3] %v", jobs[1], jobs[3])
	}
	if jobs[2].Key != "invoice:7" || string(jobs[2].Payload) != "once" || jobs[2].EnqueuedAt.IsZero() {
		t.Errorf("want[2] matched %v", jobs[2])
	}

	all := streamqtest.RequireEnqueuedN(ctx, t, q, 4)
	var order []string
	for _, j := range all {
		order = append(order, string(j.Payload))
	}
	if strings.Join(order, ",") != "ada,grace,once,later" {
		t.Errorf("Enqueued order = %v, want the stream in order then the delayed set", order)
	}
	streamqtest.RequireEnqueued(ctx, t, q)
	streamqtest.RequireEnqueued(ctx, t, q, streamqtest.Want{Match: func(j streamqtest.EnqueuedJob) bool {
		return strings.HasPrefix(string(j.Payload), "gr")
	}})
}

func TestRequireEnqueued_Failure(t *testing.T) {
	t.Parallel()
	_, q, p := enqueueSetup(t)
	ctx := t.Context()
	enqueue(t, p, "ada", streamq.WithHeader("kind", "welcome"))
	enqueue(t, p, "later", streamq.ProcessIn(time.Hour))

	tests := []struct {
		name string
		want []streamqtest.Want
		msg  []string // the failure message must contain each
	}{
		{"payload", []streamqtest.Want{{Payload: []byte("grace")}},
			[]string{`no job matches want[0] {payload="grace"}`, "found 2:", `ready payload="ada" headers=map[kind:welcome]`, `scheduled at`, `payload="later"`}},
		{"header value", []streamqtest.Want{{Headers: map[string]string{"kind": "reminder"}}},
			[]string{"no job matches want[0]", "kind:reminder"}},
		{"due time", []streamqtest.Want{{DueAt: time.Now().Add(2 * time.Hour)}},
			[]string{"no job matches want[0] {scheduled at", "±1s"}},
		{"scheduled", []streamqtest.Want{{Payload: []byte("ada"), Scheduled: true}}, []string{"want[0]"}},
		{"key", []streamqtest.Want{{Key: "k"}}, []string{`key="k"`}},
		{"one job for two wants", []streamqtest.Want{{Payload: []byte("ada")}, {Headers: map[string]string{"kind": "welcome"}}},
			[]string{"no job matches want[1]", "each job matches one want at most"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := runFake(t, func(tb testing.TB) { streamqtest.RequireEnqueued(ctx, tb, q, tc.want...) })
			msg := f.message()
			for _, s := range tc.msg {
				if !strings.Contains(msg, s) {
					t.Errorf("failure message lacks %q:\n%s", s, msg)
				}
			}
		})
	}

	f := runFake(t, func(tb testing.TB) { streamqtest.RequireEnqueuedN(ctx, tb, q, 3) })
	if msg := f.message(); !strings.Contains(msg, "holds 2 jobs, want 3") || !strings.Contains(msg, `"ada"`) {
		t.Errorf("RequireEnqueuedN failure message:\n%s", msg)
	}
	streamqtest.RequireNotEnqueued(ctx, t, q, streamqtest.Want{Payload: []byte("grace")})
	f = runFake(t, func(tb testing.TB) {
		streamqtest.RequireNotEnqueued(ctx, tb, q, streamqtest.Want{Headers: map[string]string{"kind": "welcome"}})
	})
	if msg := f.message(); !strings.Contains(msg, "want no job matching {headers⊇map[kind:welcome]}, found 1:") || !strings.Contains(msg, `"ada"`) {
		t.Errorf("RequireNotEnqueued failure message:\n%s", msg)
	}
	empty := streamqtest.NewQueue(t, "empty", nil)
	f = runFake(t, func(tb testing.TB) { streamqtest.RequireEnqueued(ctx, tb, empty) })
	if msg := f.message(); !strings.Contains(msg, "holds no job") {
		t.Errorf("RequireEnqueued on an empty queue:\n%s", msg)
	}
	f = runFake(t, func(tb testing.TB) { streamqtest.RequireEnqueued(ctx, tb, empty, streamqtest.Want{}) })
	if msg := f.message(); !strings.Contains(msg, "found no job") {
		t.Errorf("RequireEnqueued with a want on an empty queue:\n%s", msg)
	}
}

// TestEnqueued_SkipsAcknowledged: jobs a consumer acknowledged are no longer
// listed, running ones are, marked pending.
func TestEnqueued_SkipsAcknowledged(t *testing.T) {
	t.Parallel()
	r, q, p := enqueueSetup(t)
	ctx := t.Context()
	if got := streamqtest.Enqueued(ctx, t, q); len(got) != 0 {
		t.Fatalf("a queue without keys lists %v", got)
	}
	for _, s := range []string{"a", "b", "c"} {
		enqueue(t, p, s)
	}
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	// A consumer reads two jobs and acknowledges the first.
	stream := r.KeyPrefix + ":{emails}:stream"
	read, err := r.Client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.Group(), Consumer: "c1", Streams: []string{stream, ">"}, Count: 2}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Client.XAck(ctx, stream, q.Group(), read[0].Messages[0].ID).Err(); err != nil {
		t.Fatal(err)
	}
	got := streamqtest.RequireEnqueuedN(ctx, t, q, 2)
	if string(got[0].Payload) != "b" || !got[0].Pending || string(got[1].Payload) != "c" || got[1].Pending {
		t.Errorf("Enqueued = %v, want b pending and c ready", got)
	}
}

func TestEnqueued_Malformed(t *testing.T) {
	t.Parallel()
	r, q, _ := enqueueSetup(t)
	ctx := t.Context()
	stream := r.KeyPrefix + ":{emails}:stream"
	if err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"v", "1", "attempt", "x", "payload", "p"}}).Err(); err != nil {
		t.Fatal(err)
	}
	got := streamqtest.RequireEnqueuedN(ctx, t, q, 1)
	if !errors.Is(got[0].Err, streamq.ErrMalformed) || !strings.Contains(got[0].String(), "malformed") {
		t.Errorf("malformed entry listed as %v", got[0])
	}
}

func TestEnqueuedJob_String(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 150)
	s := streamqtest.EnqueuedJob{ID: "1-0", Payload: []byte(long), Key: "k", Attempt: 2, Pending: true}.String()
	for _, want := range []string{"1-0 pending", `key="k"`, "attempt=2", "... (150 bytes)"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q lacks %q", s, want)
		}
	}
	if got := (streamqtest.Want{}).String(); got != "{any job}" {
		t.Errorf("Want{}.String() = %q", got)
	}
}
