package priority_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/priority"
)

// privateClient returns a client of srv for user (with password "pw"; ""
// for the default user), closed when the test ends.
func privateClient(t *testing.T, srv *redistest.Server, user string) *redis.Client {
	t.Helper()
	opt := &redis.Options{Addr: srv.Addr()}
	if user != "" {
		opt.Username, opt.Password = user, "pw"
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sameQueue returns an env for e's queue (the same name and keys) on
// another client.
func sameQueue(t *testing.T, e *env, rdb *redis.Client) *env {
	t.Helper()
	q, err := streamq.NewQueue(rdb, e.q.Name(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pq, err := priority.NewQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &env{rdb: rdb, q: q, pq: pq, p: e.p}
}

// TestWorker_Run_ScriptPermissionDeniedIsFatal: a command denied by an ACL
// inside a script is reported by Redis 7 as "ERR The user executing the
// script can't run this command" (Valkey 8: "ERR ACL failure in script"),
// not as NOPERM. Run must return it, as it
// returns NOPERM, instead of retrying forever.
func TestWorker_Run_ScriptPermissionDeniedIsFatal(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	ctx := context.Background()
	admin := privateClient(t, srv, "")
	if err := admin.Do(ctx, "ACL", "SETUSER", "nozadd", "on", ">pw", "~*", "+@all", "-zadd").Err(); err != nil {
		t.Fatal(err)
	}
	e := setupClient(t, admin, nil)
	e.push(t, 1, 2)
	w := sameQueue(t, e, privateClient(t, srv, "nozadd")).newWorker(t,
		streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }), priority.WorkerConfig{})

	errc := make(chan error, 1)
	redistest.Background(t, "Worker.Run", waitTimeout, func(ctx context.Context) error {
		errc <- w.Run(ctx)
		return nil
	})
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "can't run this command") && !strings.Contains(err.Error(), "has no permissions to run the 'zadd' command") {
			t.Fatalf("Run returned %v, want the permission error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s: it retries a permission error that retrying cannot fix")
	}
	if s := e.stats(t); s.Ready != 2 || s.Leased != 0 {
		t.Errorf("stats %s, want both jobs ready", stringify(s))
	}
}

// TestWorker_DrainsAtMaxmemory: a worker started while Redis is at
// maxmemory must lease and run the backlog that filled it. Redis 7 refuses a
// script's first write at OOM (the pop's is a ZADD into the lease set)
// unless the script is flagged allow-oom.
func TestWorker_DrainsAtMaxmemory(t *testing.T) {
	t.Parallel()
	const n = 100
	srv := redistest.StartServer(t)
	admin := privateClient(t, srv, "")
	e := setupClient(t, admin, nil)
	jobs := make([]priority.Job, n)
	for i := range jobs {
		jobs[i] = priority.Job{Priority: i % 3, Payload: []byte(strconv.Itoa(i) + strings.Repeat(".", 2000))}
	}
	if _, err := e.pq.PushBatch(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	redistest.AtMaxmemory(t, admin)
	var done atomic.Int64
	w := e.newWorker(t, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		done.Add(1)
		return nil
	}), priority.WorkerConfig{Concurrency: 8})
	stop := run(t, w)
	e.waitStats(t, priority.Stats{})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := done.Load(); got != n {
		t.Fatalf("%d jobs ran, want %d", got, n)
	}
}

// TestWorker_WarnsAboutEviction: a worker says when it starts that Redis
// may evict keys (and jobs with them).
func TestWorker_WarnsAboutEviction(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--maxmemory-policy", "volatile-lru")
	e := setupClient(t, privateClient(t, srv, ""), nil)
	var logs strings.Builder
	var mu sync.Mutex
	w := e.newWorker(t, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }),
		priority.WorkerConfig{Logger: slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil))})
	stop := run(t, w)
	redistest.WaitFor(t, waitTimeout, "the eviction warning", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "maxmemory_policy=volatile-lru")
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestQueue_Push_RejectsBadJobs: the stream queue's payload and header
// limits, and valid UTF-8 in headers, hold for pushes too; nothing of the
// refused chunk is pushed.
func TestQueue_Push_RejectsBadJobs(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	q, err := streamq.NewQueue(client, redistest.Name(t), &streamq.QueueConfig{MaxPayloadBytes: 4})
	if err != nil {
		t.Fatal(err)
	}
	pq, err := priority.NewQueue(q, &priority.QueueConfig{Hooks: []streamq.EnqueueHook{func(_ context.Context, h map[string]string) {
		if h["bad"] != "" {
			h["bad"] = "\xff"
		}
	}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := pq.Push(ctx, priority.Job{Payload: []byte("12345")}); !errors.Is(err, streamq.ErrTooLarge) {
		t.Errorf("Push of 5 bytes with a limit of 4: %v, want ErrTooLarge", err)
	}
	if _, err := pq.PushBatch(ctx, []priority.Job{{Payload: []byte("ok")}, {Headers: map[string]string{"bad": "x"}}}); !errors.Is(err, streamq.ErrInvalidHeader) {
		t.Errorf("Push with a hook's invalid UTF-8: %v, want ErrInvalidHeader", err)
	}
	if s, err := pq.Stats(ctx); err != nil || s.Ready != 0 {
		t.Errorf("stats %+v, %v: want nothing pushed", s, err)
	}
}

// TestWorker_PopsWithinMaxFetchBytes: a pop asks for fewer jobs after large
// ones, so no pop after the first (which cannot know) brings more than
// MaxFetchBytes of jobs into memory.
func TestWorker_PopsWithinMaxFetchBytes(t *testing.T) {
	t.Parallel()
	const (
		n      = 40
		size   = 256 << 10
		budget = 1 << 20
	)
	client := redistest.NewClient(t)
	e := setupClient(t, client, nil)
	// The bytes of job data every pop returns.
	ready := core.Of(e.q).Keys.Priority().Ready
	var mu sync.Mutex
	var pops []int
	client.AddHook(redistest.AfterEach(func(cmd redis.Cmder) {
		args := cmd.Args()
		c, ok := cmd.(*redis.Cmd)
		if !ok || len(args) < 5 || args[3] != ready || !strings.HasSuffix(args[4].(string), ":leases") {
			return
		}
		res, _ := c.Val().([]any)
		n := 0
		for i := 5; i < len(res); i += 3 {
			s, _ := res[i].(string)
			n += len(s)
		}
		mu.Lock()
		pops = append(pops, n)
		mu.Unlock()
	}))
	jobs := make([]priority.Job, n)
	for i := range jobs {
		jobs[i] = priority.Job{Payload: []byte(strings.Repeat(".", size))}
	}
	if _, err := e.pq.PushBatch(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	var done atomic.Int64
	w := e.newWorker(t, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		done.Add(1)
		return nil
	}), priority.WorkerConfig{Concurrency: 16, MaxFetchBytes: budget})
	stop := run(t, w)
	e.waitStats(t, priority.Stats{})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	first := true
	for i, s := range pops {
		if s > 0 && first {
			first = false
			continue
		}
		if s > budget {
			t.Errorf("pop %d brought %d bytes, MaxFetchBytes is %d (all pops: %v)", i, s, budget, pops)
			break
		}
	}
	if done.Load() != n {
		t.Errorf("%d jobs ran, want %d", done.Load(), n)
	}
}
