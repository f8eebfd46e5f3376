package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/rediscontainer"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/periodic"
	"github.com/streamq/streamq/priority"
	"github.com/streamq/streamq/writebehind"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from this run")

// binary is the streamq binary built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "streamq-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "streamq")
	build := exec.Command("go", "build", "-o", binary, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build streamq: %v\n%s", err, out)
		return 1
	}
	return redistest.Run(m, rediscontainer.Start)
}

// result is what one run of the binary did.
type result struct {
	stdout, stderr string
	code           int
}

// env is one test's Redis keys: a prefix of its own, so queue names can be
// fixed (and the golden files stable).
type env struct {
	t      *testing.T
	prefix string
	rdb    *redis.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, prefix: redistest.Name(t), rdb: redistest.NewClient(t)}
	redistest.DeleteKeysAtCleanup(t, e.rdb, e.prefix+":*")
	return e
}

// run runs the binary with args against the test's Redis and prefix, with
// stdin (not a terminal) and a bounded time.
func (e *env) run(stdin string, args ...string) result {
	e.t.Helper()
	return runIn(e.t, stdin, []string{"REDIS_URL=redis://" + redistest.Addr(), "STREAMQ_PREFIX=" + e.prefix}, args...)
}

// runIn runs the binary with args, the clean environment plus env, and
// stdin (not a terminal), in a bounded time.
func runIn(t *testing.T, stdin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("streamq %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// ok runs the binary and fails the test unless it exits 0.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	r := e.run("", args...)
	if r.code != 0 {
		e.t.Fatalf("streamq %s: exit code %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// cleanEnv is the environment without the variables streamq reads.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "REDIS_") || strings.HasPrefix(kv, "STREAMQ_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (e *env) keys(queue string) rdb.Keys { return rdb.NewKeys(e.prefix, queue) }

// fixture holds the IDs of the jobs seed made.
type fixture struct {
	*env
	running, retrying, dead string
	done                    string // finished with progress and a result
	waiting                 []string
	delayed                 string
	prio                    []string
}

// seed fills queue "orders" with jobs in every state a consumer can put them
// in (running, retrying, dead, done with a result, waiting, delayed) and a
// periodic schedule, priority queue "reports" with three jobs, and
// write-behind queue "cache" with two changes. The consumer "worker-1"
// (concurrency 1) holds the running job until the test ends.
func seed(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{env: newEnv(t)}
	ctx := context.Background()
	q, err := streamq.NewQueue(f.rdb, "orders", &streamq.QueueConfig{KeyPrefix: f.prefix})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	enq := func(payload string, opts ...streamq.EnqueueOption) string {
		t.Helper()
		id, err := p.Enqueue(ctx, []byte(payload), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	f.retrying = enq(`{"order":1,"do":"fail"}`)
	f.dead = enq(`{"order":2,"do":"die"}`)
	f.done = enq(`{"order":7,"do":"report"}`)
	f.running = enq(`{"order":3,"do":"block"}`)

	started := make(chan struct{})
	release := make(chan struct{})
	h := streamq.HandlerFunc(func(ctx context.Context, m *streamq.Message) error {
		switch {
		case bytes.Contains(m.Payload, []byte("fail")):
			return streamq.RetryAfter(time.Hour, errors.New("card declined"))
		case bytes.Contains(m.Payload, []byte("die")):
			return streamq.Permanent(errors.New("no such customer"))
		case bytes.Contains(m.Payload, []byte("report")):
			if err := streamq.SetProgress(ctx, 100, "all rows"); err != nil {
				return err
			}
			return streamq.SetResult(ctx, []byte(`{"rows":12}`))
		case bytes.Contains(m.Payload, []byte("block")):
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx) // cancelled: streamq.ErrCancelled
			}
		}
		return nil
	})
	c, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Name: "worker-1", Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "consumer worker-1", 30*time.Second, c.Run)
	t.Cleanup(func() { close(release) }) // runs before the consumer's stop
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking job did not start within 10s")
	}
	k := f.keys("orders")
	redistest.WaitFor(t, 10*time.Second, "one dead letter and one retry", func() bool {
		return f.rdb.XLen(ctx, k.Dead).Val() == 1 && f.rdb.ZCard(ctx, k.Delayed).Val() == 1
	})
	// A dead letter's entry ID and a stream entry ID made in the same
	// millisecond are equal, and a look-up by entry ID may find either: let
	// the server clock pass the dead letter's millisecond first.
	deadMS := strings.Split(f.rdb.XRange(ctx, k.Dead, "-", "+").Val()[0].ID, "-")[0]
	redistest.WaitFor(t, time.Second, "the Redis clock to pass the dead letter's millisecond", func() bool {
		now, err := f.rdb.Time(ctx).Result()
		return err == nil && strconv.FormatInt(now.UnixMilli(), 10) > deadMS
	})
	f.waiting = []string{
		enq(`{"order":4}`, streamq.WithHeader("tenant", "acme")),
		enq("plain text \xff payload", streamq.WithHeader("tenant", "globex")),
	}
	f.delayed = enq(`{"order":6}`, streamq.ProcessIn(time.Hour))

	// A periodic schedule that does not fire during a test (03:00 on 1 January).
	sched, err := periodic.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.Register("new-year-report", "0 3 1 1 *", []byte(`{"report":"year"}`)); err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "periodic scheduler", 10*time.Second, sched.Run)
	redistest.WaitFor(t, 10*time.Second, "the scheduler to record its schedule", func() bool {
		return f.rdb.HLen(ctx, k.Part(rdb.PartSchedules)).Val() == 1
	})

	pq, err := priority.NewQueue(mustQueue(t, f.rdb, f.prefix, "reports"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, pr := range []int{1, 5, 5} {
		id, err := pq.Push(ctx, priority.Job{Priority: pr, Payload: fmt.Appendf(nil, `{"report":%d}`, i)})
		if err != nil {
			t.Fatal(err)
		}
		f.prio = append(f.prio, id)
	}
	// Write-behind queue "cache" with two changes not yet persisted.
	w, err := writebehind.NewWriter(mustQueue(t, f.rdb, f.prefix, "cache"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"user:1", "user:2"} {
		if _, err := w.Set(ctx, key, []byte(`{"name":"Ada"}`)); err != nil {
			t.Fatal(err)
		}
	}

	// The runtime registers queues in P:queues and write-behind queues in
	// P:writebehind (issue 18); register them here too, so the fixture does
	// not depend on which part of the runtime writes them, or when.
	f.rdb.HSet(ctx, f.prefix+":queues", "orders", "stream", "reports", "priority", "cache", "stream")
	f.rdb.HSet(ctx, f.prefix+":writebehind", "cache", "1")

	// The retried and dead-lettered copies have entry IDs of their own;
	// the jobs keep the stable ID of their first copy, which the inspector
	// lists and finds them by.
	f.retrying = f.onlyID(inspect.StateRetrying)
	f.dead = f.onlyID(inspect.StateDead)
	return f
}

// onlyID returns the stable ID of the one job of "orders" in state s.
func (f *fixture) onlyID(s inspect.State) string {
	f.t.Helper()
	in, err := inspect.New(f.rdb, &inspect.Options{Prefix: f.prefix})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx := context.Background()
	q, err := in.Queue(ctx, "orders")
	if err != nil {
		f.t.Fatal(err)
	}
	page, err := q.Jobs(ctx, inspect.ListOptions{State: s})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(page.Jobs) != 1 {
		f.t.Fatalf("%d %s jobs in the fixture, want 1", len(page.Jobs), s)
	}
	return page.Jobs[0].ID
}

// with returns the fixture for subtest t (whose Fatal ends only t).
func (f *fixture) with(t *testing.T) *fixture {
	g := *f
	e := *f.env
	e.t = t
	g.env = &e
	return &g
}

func mustQueue(t *testing.T, c redis.UniversalClient, prefix, name string) *streamq.Queue {
	t.Helper()
	q, err := streamq.NewQueue(c, name, &streamq.QueueConfig{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// golden compares the normalised JSON output with testdata/<name>.json, or
// rewrites the file with -update.
func golden(t *testing.T, name, out string) {
	t.Helper()
	got := normalize(t, out)
	path := filepath.Join("testdata", name+".json")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the output (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

var (
	streamIDRe = regexp.MustCompile(`\b\d{10,}-\d+\b`)
	timeRe     = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`)
)

// volatile are the keys whose values change from run to run: IDs, times and
// durations.
var volatile = map[string]bool{
	"id": true, "entry_id": true, "cursor": true, "go": true,
	// streamq redis: the test server's own
	"addr": true, "rdb_schedule": true, "persistence": true,
	// streamq consumers: where the test runs
	"host": true,
}

// volatileNumbers are numbers that change from run to run (streamq redis).
var volatileNumbers = map[string]bool{
	"uptime_s": true, "used_memory": true, "peak_memory": true, "ops_per_sec": true, "clients": true,
	"blocked_clients": true, "rdb_changes": true, "evicted_keys": true, "deleted_keys": true,
	"pid": true,
}

// counters are the per-minute throughput counters.
var counters = map[string]bool{"processed": true, "failed": true, "processed_per_min": true, "failed_per_min": true}

// normalize re-encodes every JSON document of out (one, or JSON lines) with
// IDs, times and durations replaced by placeholders.
func normalize(t *testing.T, out string) string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var b strings.Builder
	for range 10_000 {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(scrub("", v)); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func scrub(key string, v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			x[k] = scrub(k, vv)
		}
		return x
	case []any:
		for i, vv := range x {
			x[i] = scrub(key, vv)
		}
		return x
	case string:
		switch {
		case x == "":
			return x
		case volatile[key] || key == "done":
			return "<" + key + ">"
		case timeRe.MatchString(x):
			return "<time>"
		}
		return streamIDRe.ReplaceAllString(x, "<id>")
	case json.Number:
		if strings.HasSuffix(key, "_ms") {
			return "<ms>" // 0 or not depends on the millisecond the test ran in
		}
		if volatileNumbers[key] {
			return "<" + key + ">"
		}
		if counters[key] {
			return "<n>" // per-minute counters: flushed in batches, split at minute boundaries
		}
		return x
	}
	return v
}
