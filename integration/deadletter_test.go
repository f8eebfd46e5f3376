package integration

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
)

// TestDeadLetters_API dead-letters 250 jobs and then pages through them,
// gets one, requeues some by ID (keeping their headers), purges by ID and by
// age, requeues the rest, and purges everything.
func TestDeadLetters_API(t *testing.T) {
	t.Parallel()
	const n = 250
	rdb := redistest.NewClient(t)
	q, p := relQueue(t, rdb, nil)
	ctx := context.Background()
	dl := q.DeadLetters()

	var reject atomic.Bool
	reject.Store(true)
	cnt := newRelCounter()
	headers := make(chan map[string]string, n)
	c := relConsumer(t, q, func(ctx context.Context, m *streamq.Message) error {
		if reject.Load() {
			return streamq.Permanent(errors.New("rejected " + string(m.Payload)))
		}
		headers <- m.Headers
		cnt.add(m.Payload)
		return nil
	}, streamq.ConsumerConfig{Concurrency: 8})
	run := relRun(t, c)
	payloads := numbers(0, n)
	enqueueAll(t, p, payloads, streamq.WithHeader("tenant", "acme"))
	redistest.WaitFor(t, relWait, "every job dead-lettered", func() bool {
		l, err := dl.Len(ctx)
		return err == nil && l == n
	})

	// List pages through everything, oldest first, with no hidden cap.
	var all []streamq.DeadLetter
	var pages []int
	cursor := ""
	for range 10 {
		page, next, err := dl.List(ctx, cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		pages = append(pages, len(page))
		if next == "" {
			break
		}
		cursor = next
	}
	if !slices.Equal(pages, []int{100, 100, 50}) {
		t.Errorf("pages of %v, want [100 100 50]", pages)
	}
	seen := map[string]bool{}
	for i, d := range all {
		if i > 0 && !idLess(all[i-1].ID, d.ID) {
			t.Errorf("dead letters out of order: %s then %s", all[i-1].ID, d.ID)
		}
		seen[string(d.Payload)] = true
		if d.Reason != streamq.ReasonPermanent || d.Error != "permanent: rejected "+string(d.Payload) ||
			d.Attempts != 1 || d.Queue != q.Name() || d.Headers["tenant"] != "acme" || d.FailedAt.IsZero() {
			t.Errorf("dead letter %+v", d)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct payloads listed, want %d", len(seen), n)
	}
	if _, _, err := dl.List(ctx, "", 0); err == nil {
		t.Error("List with count 0 accepted")
	}

	// Get.
	got, err := dl.Get(ctx, all[7].ID)
	if err != nil || got.OriginalID != all[7].OriginalID || string(got.Payload) != string(all[7].Payload) {
		t.Errorf("Get(%s) = %+v, %v; want %+v", all[7].ID, got, err, all[7])
	}
	if _, err := dl.Get(ctx, "1-1"); !errors.Is(err, streamq.ErrNotFound) {
		t.Errorf("Get of a missing ID: %v, want ErrNotFound", err)
	}

	// Requeue by ID: the jobs run again with their headers; a missing ID
	// yields "".
	reject.Store(false)
	ids, err := dl.Requeue(ctx, all[0].ID, "1-1", all[1].ID)
	if err != nil || len(ids) != 3 || ids[0] == "" || ids[1] != "" || ids[2] == "" {
		t.Fatalf("Requeue = %q, %v; want two new IDs around an empty one", ids, err)
	}
	redistest.WaitFor(t, relWait, "the requeued jobs handled", func() bool { return cnt.total.Load() == 2 })
	for range 2 {
		if h := <-headers; h["tenant"] != "acme" {
			t.Errorf("requeued job lost its headers: %v", h)
		}
	}
	if l, _ := dl.Len(ctx); l != n-2 {
		t.Errorf("%d dead letters after requeueing 2, want %d", l, n-2)
	}

	// Purge by ID, then by age: everything dead-lettered before the
	// millisecond of the 100th letter.
	if k, err := dl.Purge(ctx, all[2].ID, all[3].ID, "1-1"); err != nil || k != 2 {
		t.Errorf("Purge = %d, %v; want 2", k, err)
	}
	boundary := idMillis(t, all[100].ID)
	wantAged := 0
	for _, d := range all[4:] {
		if idMillis(t, d.ID) < boundary {
			wantAged++
		}
	}
	k, err := dl.PurgeBefore(ctx, time.UnixMilli(boundary))
	if err != nil || k != int64(wantAged) {
		t.Errorf("PurgeBefore = %d, %v; want %d", k, err, wantAged)
	}
	left := n - 4 - wantAged

	// RequeueAll requeues every remaining letter once.
	requeued, err := dl.RequeueAll(ctx)
	if err != nil || requeued != left {
		t.Fatalf("RequeueAll = %d, %v; want %d", requeued, err, left)
	}
	redistest.WaitFor(t, relWait, "every requeued job handled", func() bool { return cnt.total.Load() == int64(2+left) })
	relSettled(t, q, 0, relWait)
	for _, d := range all[4+wantAged:] {
		if cnt.count(string(d.Payload)) != 1 {
			t.Errorf("job %s ran %d times after RequeueAll, want once", d.Payload, cnt.count(string(d.Payload)))
		}
	}

	// PurgeAll.
	reject.Store(true)
	enqueueAll(t, p, []string{"x", "y"})
	redistest.WaitFor(t, relWait, "two more dead letters", func() bool {
		l, err := dl.Len(ctx)
		return err == nil && l == 2
	})
	if err := dl.PurgeAll(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := dl.Len(ctx); err != nil || l != 0 {
		t.Errorf("Len after PurgeAll = %d, %v", l, err)
	}
	run.stop()
}

// idMillis returns the millisecond part of a stream entry ID.
func idMillis(t *testing.T, id string) int64 {
	t.Helper()
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		t.Fatalf("entry ID %q: %v", id, err)
	}
	return n
}

// idLess orders stream entry IDs.
func idLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	if len(am) != len(bm) || am != bm {
		return len(am) < len(bm) || (len(am) == len(bm) && am < bm)
	}
	return len(as) < len(bs) || (len(as) == len(bs) && as < bs)
}

// TestDeadLetters_RequeueStartsAfresh: a requeued job keeps its payload,
// headers and stable ID (jid: the dead letter's dl_id when it has no jid)
// but none of its earlier attempts' bookkeeping (attempt count, failure
// times, last error, crashed mark), so it gets every attempt again.
func TestDeadLetters_RequeueStartsAfresh(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	q, _ := relQueue(t, rdb, nil)
	ctx := context.Background()
	letter, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: core.Of(q).Keys.Dead, Values: []any{
		"dl_queue", q.Name(), "dl_id", "5-0", "dl_reason", streamq.ReasonMaxDeliveries, "dl_error", "boom",
		"dl_attempts", "3", "dl_first_failed", "1700000000000", "dl_failed", "1700000001000",
		"v", "1", "payload", "job", "headers", `{"tenant":"acme"}`, "enq", "1700000000000",
		"attempt", "2", "ff", "1700000000000", "err", "boom", "crashed", "1",
	}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := q.DeadLetters().Requeue(ctx, letter)
	if err != nil || len(ids) != 1 || ids[0] == "" {
		t.Fatalf("Requeue = %q, %v", ids, err)
	}
	e, err := rdb.XRange(ctx, core.Of(q).Keys.Stream, ids[0], ids[0]).Result()
	if err != nil || len(e) != 1 {
		t.Fatalf("XRANGE of the requeued job: %v, %v", e, err)
	}
	want := map[string]any{"v": "1", "payload": "job", "headers": `{"tenant":"acme"}`, "enq": "1700000000000", "jid": "5-0"}
	if !reflect.DeepEqual(e[0].Values, want) {
		t.Errorf("requeued entry %v, want %v", e[0].Values, want)
	}
}
