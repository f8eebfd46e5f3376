package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/wire"
	"github.com/streamq/streamq/priority"
)

// kind returns the registered kind of queue name.
func (e *env) kind(name string) string {
	return e.rdb.HGet(context.Background(), e.prefix+":queues", name).Val()
}

// TestCLI_PriorityKeepsKind checks that neither enqueue --priority on a
// stream queue nor the stream side of the documented priority setup
// starting again (Setup, producers) flips a queue's registered kind.
func TestCLI_PriorityKeepsKind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.ok("enqueue", "orders", `{"order":1}`)
	r := e.run("", "enqueue", "orders", `{"order":2}`, "--priority", "5")
	if r.code != exitUsage || !strings.Contains(r.stderr, "stream queue") || !strings.Contains(r.stderr, "streamq-priority=N") {
		t.Errorf("enqueue --priority on a stream queue: exit code %d, stderr %q; want %d saying why", r.code, r.stderr, exitUsage)
	}
	if got := e.kind("orders"); got != "stream" {
		t.Errorf("after enqueue --priority, orders is registered as %q, want stream", got)
	}
	// A new queue pushed with --priority is a priority queue.
	e.ok("enqueue", "reports", `{"report":1}`, "--priority", "7")
	if got := e.kind("reports"); got != "priority" {
		t.Errorf("reports is registered as %q, want priority", got)
	}

	// The documented setup: producers enqueue on the stream, a consumer
	// runs priority.Forward, a priority.Worker runs the jobs.
	q := mustQueue(t, e.rdb, e.prefix, "mail")
	pq, err := priority.NewQueue(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := priority.NewWorker(pq, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }), &priority.WorkerConfig{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	run := redistest.Background(t, "priority worker", 10*time.Second, w.Run)
	redistest.WaitFor(t, 10*time.Second, "the worker to register mail", func() bool { return e.kind("mail") == "priority" })
	if err := run.Stop(); err != nil {
		t.Fatal(err)
	}
	// A restart: the forwarding consumer's Setup and a producer start
	// before the worker.
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, []byte("invoice"), priority.WithPriority(5)); err != nil {
		t.Fatal(err)
	}
	e.ok("enqueue", "mail", "receipt", "--header", "streamq-priority=3")
	if got := e.kind("mail"); got != "priority" {
		t.Errorf("after a restart of the stream side, mail is registered as %q, want priority", got)
	}
	var qs struct{ Queues []struct{ Name, Kind string } }
	if err := json.Unmarshal([]byte(e.ok("queues", "--json")), &qs); err != nil {
		t.Fatal(err)
	}
	for _, x := range qs.Queues {
		if want := map[string]string{"orders": "stream", "reports": "priority", "mail": "priority"}[x.Name]; x.Kind != want {
			t.Errorf("queues lists %s as %s, want %s", x.Name, x.Kind, want)
		}
	}
}

// addDeadLetters writes n dead letters of queue with reason, in pipelines.
func (e *env) addDeadLetters(t *testing.T, queue, reason string, n int) {
	t.Helper()
	ctx := context.Background()
	key := e.keys(queue).Dead
	raw := map[string]any{}
	job := wire.Job{Payload: []byte(`{"dead":true}`), EnqMillis: time.Now().UnixMilli()}
	args := job.Args()
	for i := 0; i+1 < len(args); i += 2 {
		raw[args[i].(string)] = args[i+1]
	}
	for done := 0; done < n; {
		pipe := e.rdb.Pipeline()
		for range min(1000, n-done) {
			d := wire.DeadLetter{Queue: queue, ID: "1-1", Reason: reason, Error: "boom", Attempts: 1, Failed: time.Now()}
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: wire.DeadLetterArgs(d, raw, nil)})
			done++
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCLI_DeadBulkCountsAll checks that dead purge and requeue confirm and
// report against every dead letter, beyond the 10,000 one listing examines.
func TestCLI_DeadBulkCountsAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if err := mustQueue(t, e.rdb, e.prefix, "orders").Setup(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 10_250
	e.addDeadLetters(t, "orders", "permanent", n)
	e.addDeadLetters(t, "orders", "max_deliveries", 50)
	r := e.run("", "dead", "purge", "orders", "--all")
	if r.code != exitUsage || !strings.Contains(r.stderr, "purge 10300 dead letters of queue orders (all)") {
		t.Errorf("purge --all without --yes: exit code %d, stderr %q; want it to name all 10300", r.code, r.stderr)
	}
	r = e.run("", "dead", "requeue", "orders", "--reason", "permanent")
	if r.code != exitUsage || !strings.Contains(r.stderr, fmt.Sprintf("requeue %d dead letters", n)) {
		t.Errorf("requeue by reason without --yes: exit code %d, stderr %q; want it to name all %d", r.code, r.stderr, n)
	}
	var out bulkJSON
	if err := json.Unmarshal([]byte(e.ok("dead", "purge", "orders", "--reason", "max_deliveries", "--yes", "--json")), &out); err != nil || out.Matched != 50 || out.Done != 50 {
		t.Errorf("purge by reason: %+v, %v; want 50 matched and done", out, err)
	}
	if err := json.Unmarshal([]byte(e.ok("dead", "purge", "orders", "--all", "--yes", "--json")), &out); err != nil || out.Matched != n || out.Done != n {
		t.Errorf("purge --all: %+v, %v; want %d matched and done", out, err, n)
	}
	if got := e.rdb.XLen(ctx, e.keys("orders").Dead).Val(); got != 0 {
		t.Errorf("%d dead letters left, want 0", got)
	}
}

// TestCLI_NextPage runs the "more:" lines through a shell: the cursor of
// delayed jobs (with a space) is quoted, and the filters are kept.
func TestCLI_NextPage(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	p, err := streamq.NewProducer(mustQueue(t, f.rdb, f.prefix, "orders"), nil)
	if err != nil {
		t.Fatal(err)
	}
	later, err := p.Enqueue(ctx, []byte(`{"order":9}`), streamq.ProcessIn(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f.addDeadLetters(t, "orders", "permanent", 3)
	more := regexp.MustCompile(`(?m)^more: (streamq .*)$`)
	follow := func(args ...string) (line, out string) {
		t.Helper()
		m := more.FindStringSubmatch(f.ok(args...))
		if m == nil {
			t.Fatalf("streamq %s prints no more: line", strings.Join(args, " "))
		}
		sh := exec.Command("sh", "-c", strings.Replace(m[1], "streamq", binary, 1))
		sh.Env = append(cleanEnv(), "REDIS_URL=redis://"+redistest.Addr(), "STREAMQ_PREFIX="+f.prefix)
		b, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("the next-page command %q failed: %v\n%s", m[1], err, b)
		}
		return m[1], string(b)
	}
	line, out := follow("jobs", "orders", "--state", "delayed", "--limit", "1")
	if !strings.Contains(line, "--limit 1 --cursor '") || !strings.Contains(out, later) {
		t.Errorf("delayed jobs: next page %q printed\n%s\nwant a quoted cursor, the limit, and the second delayed job %s", line, out, later)
	}
	line, out = follow("dead", "ls", "orders", "--reason", "permanent", "--error", "boom", "--since", "24h", "--limit", "2")
	for _, want := range []string{"--reason permanent", "--error boom", "--since 20", "--limit 2", "--cursor "} {
		if !strings.Contains(line, want) {
			t.Errorf("dead ls: next page %q lacks %q", line, want)
		}
	}
	if strings.Count(out, "boom") != 1 || strings.Contains(out, "no such customer") || strings.Contains(out, "more:") {
		t.Errorf("dead ls, next page: want the third matching letter only, and no further page:\n%s", out)
	}
	_, out = follow("jobs", "orders", "--header", "tenant=acme", "--limit", "1", "--grep", "order")
	if !strings.Contains(out, "no waiting jobs on this page") {
		t.Errorf("jobs --header --grep, next page: the filters were dropped:\n%s", out)
	}
}

// TestCLI_EnqueueJSONLines enqueues JSON lines from stdin and a file, in
// batches, and refuses input with a line that is not JSON.
func TestCLI_EnqueueJSONLines(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	k := e.keys("orders")
	r := e.run("{\"order\":1}\n\n{\"order\":2}\n  [3, \"three\"]\n", "enqueue", "orders", "--jsonl", "-", "--header", "tenant=acme", "--json")
	if r.code != 0 {
		t.Fatalf("enqueue --jsonl -: exit code %d: %s", r.code, r.stderr)
	}
	golden(t, "enqueue_jsonl", r.stdout)
	msgs := e.rdb.XRange(ctx, k.Stream, "-", "+").Val()
	if len(msgs) != 3 || msgs[2].Values["payload"] != `[3, "three"]` || !strings.Contains(fmt.Sprint(msgs[0].Values["headers"]), "acme") {
		t.Fatalf("stream after --jsonl: %v", msgs)
	}
	// A bad line stops everything before anything is sent.
	r = e.run("{\"order\":4}\nnot json\n", "enqueue", "orders", "--jsonl", "-")
	if r.code != exitUsage || !strings.Contains(r.stderr, "line 2 of stdin is not JSON") || !strings.Contains(r.stderr, "nothing was enqueued") {
		t.Errorf("a bad line: exit code %d, stderr %q", r.code, r.stderr)
	}
	if n := e.rdb.XLen(ctx, k.Stream).Val(); n != 3 {
		t.Errorf("after a refused input the stream holds %d jobs, want 3", n)
	}
	// 2,500 jobs from a file: three batches, every ID printed.
	path := t.TempDir() + "/jobs.jsonl"
	var b strings.Builder
	for i := range 2500 {
		fmt.Fprintf(&b, "{\"n\":%d}\n", i)
	}
	if err := writeFile(path, b.String()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out := e.ok("enqueue", "orders", "--jsonl", path, "--in", "1h")
	if ids := strings.Fields(out); len(ids) != 2500 {
		t.Errorf("%d IDs printed, want 2500", len(ids))
	}
	if n := e.rdb.ZCard(ctx, k.Delayed).Val(); n != 2500 {
		t.Errorf("%d delayed jobs after --jsonl --in 1h, want 2500 (in %v)", n, time.Since(start))
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"enqueue", "orders", "x", "--jsonl", path}, "leave out the payload"},
		{[]string{"enqueue", "orders", "--jsonl", path, "--unique", "k", "--ttl", "1m"}, "--unique"},
		{[]string{"enqueue", "orders", "--jsonl", "/no/such/file"}, "no such file"},
	} {
		if r := e.run("", c.args...); r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("streamq %s: exit code %d, stderr %q; want %d and %q", strings.Join(c.args, " "), r.code, r.stderr, exitUsage, c.want)
		}
	}
}

// TestCLI_InvisibleCharacters checks that right-to-left overrides and
// zero-width characters in payloads, headers, errors and names are shown
// escaped in tables and job views.
func TestCLI_InvisibleCharacters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	const rlo, zwsp = "\u202E", "\u200B"
	id := strings.TrimSpace(e.ok("enqueue", "orders", "invoice "+rlo+"gpj.exe", "--header", "file=a"+zwsp+"b"))
	e.rdb.HSet(ctx, e.prefix+":queues", "ops"+rlo+"txt", "stream")
	e.addDeadLetters(t, "orders", "permanent", 1)
	e.rdb.XAdd(ctx, &redis.XAddArgs{Stream: e.keys("orders").Dead, Values: []any{"dl_queue", "orders", "dl_id", "1-1", "dl_reason", "permanent",
		"dl_error", "bad " + rlo + "txt.exe", "dl_attempts", "1", "dl_failed", strconv.FormatInt(time.Now().UnixMilli(), 10), "v", "1", "payload", "x"}})
	for _, args := range [][]string{{"job", "orders", id}, {"jobs", "orders"}, {"queues"}, {"dead", "ls", "orders"}} {
		out := e.ok(args...)
		if strings.Contains(out, rlo) || strings.Contains(out, zwsp) {
			t.Errorf("streamq %s shows an invisible character raw:\n%s", strings.Join(args, " "), out)
		}
		if !strings.Contains(out, `\u202e`) {
			t.Errorf("streamq %s does not show the override escaped:\n%s", strings.Join(args, " "), out)
		}
	}
	if out := e.ok("job", "orders", id); !strings.Contains(out, `file: a\u200bb`) {
		t.Errorf("the header is not shown escaped:\n%s", out)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
