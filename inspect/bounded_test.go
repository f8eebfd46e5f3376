package inspect_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

// fill adds n jobs to the stream of e with a Lua loop, in calls of 50,000
// entries each (so no call blocks Redis for long).
func fill(tb testing.TB, c redis.UniversalClient, stream string, n int) {
	tb.Helper()
	const chunk = 50_000
	fill := redis.NewScript(`
for i = 1, tonumber(ARGV[1]) do
  redis.call('XADD', KEYS[1], '*', 'v', '1', 'payload', 'job-' .. (ARGV[2] + i), 'enq', '0')
end
return 1`)
	for done := 0; done < n; done += chunk {
		if err := fill.Run(context.Background(), c, []string{stream}, min(chunk, n-done), done).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}

// entriesRead counts the stream entries and sorted-set members Redis
// returns to c: the work of a listing.
func entriesRead(c *redis.Client) *atomic.Int64 {
	var n atomic.Int64
	c.AddHook(redistest.AfterEach(func(cmd redis.Cmder) {
		switch v := cmd.(type) {
		case *redis.XMessageSliceCmd:
			n.Add(int64(len(v.Val())))
		case *redis.ZSliceCmd:
			n.Add(int64(len(v.Val())))
		}
	}))
	return &n
}

// A filtered listing on a queue of a million waiting jobs examines at most
// ScanLimit entries per call, and the cursor walks on from there. The
// million entries live on a server of the test's own: filling it would
// starve the other tests of the package's server.
func TestQueue_JobsBoundedOnMillion(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a stream of 1M entries; run without -short")
	}
	// A script that CPU starvation (a busy machine) keeps running past the
	// default 5 s would make Redis answer BUSY to the test's next call: the
	// bound checked here is of entries, not time.
	e := setupOn(t, redistest.NewIsolatedClient(t, "--busy-reply-threshold", "60000"), nil)
	ctx := context.Background()
	start := time.Now()
	fill(t, e.c, e.key("stream"), 1_000_000)
	t.Logf("1M entries added in %s", time.Since(start))
	read := entriesRead(e.c)
	cursor := ""
	for call := range 3 {
		read.Store(0)
		t0 := time.Now()
		p, err := e.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Grep: "no such payload", Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("call %d: scanned %d, read %d entries, %s", call, p.Scanned, read.Load(), time.Since(t0))
		if p.Scanned != inspect.DefaultScanLimit || read.Load() > inspect.DefaultScanLimit || len(p.Jobs) != 0 || p.Cursor == "" || p.Cursor == cursor {
			t.Fatalf("call %d: scanned %d, read %d, %d jobs, cursor %q (was %q)", call, p.Scanned, read.Load(), len(p.Jobs), p.Cursor, cursor)
		}
		cursor = p.Cursor
	}
	read.Store(0)
	p, err := e.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Grep: "job-999999", Cursor: cursor})
	if err != nil || p.Scanned > inspect.DefaultScanLimit || read.Load() > inspect.DefaultScanLimit {
		t.Fatalf("scanned %d, read %d: %v", p.Scanned, read.Load(), err)
	}
	read.Store(0)
	p, err = e.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Limit: 50})
	if err != nil || len(p.Jobs) != 50 || p.Scanned != 50 || read.Load() != 50 {
		t.Fatalf("unfiltered page: %d jobs, scanned %d, read %d: %v", len(p.Jobs), p.Scanned, read.Load(), err)
	}
	o, err := e.iq.Overview(ctx)
	if err != nil || o.Waiting != 1_000_000 {
		t.Fatalf("overview %+v, %v", o, err)
	}

	// The delayed set (a sorted set paged by rank): listing retrying jobs
	// among a million scheduled ones examines ScanLimit of them per call.
	fillDelayed(t, e.c, e.key("delayed"), e.key("delayed:jobs"), 1_000_000)
	cursor = ""
	for call := range 2 {
		read.Store(0)
		t0 := time.Now()
		p, err := e.iq.Jobs(ctx, inspect.ListOptions{State: inspect.StateRetrying, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("delayed call %d: scanned %d, read %d members, %s", call, p.Scanned, read.Load(), time.Since(t0))
		if p.Scanned != inspect.DefaultScanLimit || read.Load() > inspect.DefaultScanLimit || len(p.Jobs) != 0 || p.Cursor == "" || p.Cursor == cursor {
			t.Fatalf("delayed call %d: scanned %d, read %d, %d jobs, cursor %q", call, p.Scanned, read.Load(), len(p.Jobs), p.Cursor)
		}
		cursor = p.Cursor
	}
	if o, err := e.iq.Overview(ctx); err != nil || o.Delayed != 1_000_000 || o.Retrying != 0 || o.Estimated {
		t.Fatalf("overview %+v, %v", o, err)
	}
}

// fillDelayed adds n scheduled jobs to a delayed set and its job hash with
// a Lua loop, 50,000 per call.
func fillDelayed(tb testing.TB, c redis.UniversalClient, set, jobs string, n int) {
	tb.Helper()
	const chunk = 50_000
	fill := redis.NewScript(`
local due = 4102444800000 -- 2100
for i = 1, tonumber(ARGV[1]) do
  local id = 'd-' .. (ARGV[2] + i)
  redis.call('HSET', KEYS[2], id, cmsgpack.pack({'v', '1', 'payload', 'job', 'enq', '0'}))
  redis.call('ZADD', KEYS[1], due + ARGV[2] + i, id)
end
return 1`)
	for done := 0; done < n; done += chunk {
		if err := fill.Run(context.Background(), c, []string{set, jobs}, min(chunk, n-done), done).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkQueue_Jobs reports the time of one listing call on a stream of
// a million waiting jobs: a filtered call that examines ScanLimit (10,000)
// entries and finds nothing, and a page of 50 without filter.
func BenchmarkQueue_Jobs(b *testing.B) {
	c := redistest.NewClient(b)
	prefix := "iqb-" + redistest.Name(b)
	redistest.DeleteKeysAtCleanup(b, c, prefix+":*")
	ctx := context.Background()
	if err := c.XGroupCreateMkStream(ctx, prefix+":{jobs}:stream", "workers", "0").Err(); err != nil {
		b.Fatal(err)
	}
	register(b, c, prefix, "jobs", "stream")
	fill(b, c, prefix+":{jobs}:stream", 1_000_000)
	in, err := inspect.New(c, &inspect.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	q, err := in.Queue(ctx, "jobs")
	if err != nil {
		b.Fatal(err)
	}
	mid, err := q.Jobs(ctx, inspect.ListOptions{State: inspect.StateWaiting, Grep: "no such payload"})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		o    inspect.ListOptions
	}{
		{"filtered-scan-10000", inspect.ListOptions{State: inspect.StateWaiting, Grep: "no such payload"}},
		{"page-50", inspect.ListOptions{State: inspect.StateWaiting}},
		{"page-50-after-10000", inspect.ListOptions{State: inspect.StateWaiting, Cursor: mid.Cursor}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := q.Jobs(ctx, bc.o); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("overview", func(b *testing.B) {
		for b.Loop() {
			if _, err := q.Overview(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
