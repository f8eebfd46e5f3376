package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/hist"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/redistest"
)

// TestCLI_QueueDelete refuses to delete a queue with a live consumer, then
// deletes it with --force, and its registry entry with it.
func TestCLI_QueueDelete(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	k := f.keys("orders")
	r := f.run("", "queue", "delete", "orders", "--yes")
	if r.code != exitFailure || !strings.Contains(r.stderr, "consumer worker-1") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("queue delete of a queue in use: exit code %d, stderr %q; want %d naming worker-1 and --force", r.code, r.stderr, exitFailure)
	}
	r = f.run("", "queue", "delete", "orders", "--force")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--yes") || !strings.Contains(r.stderr, "delete queue orders with its 6 jobs") {
		t.Errorf("queue delete without --yes: exit code %d, stderr %q; want %d, what it deletes and a hint at --yes", r.code, r.stderr, exitUsage)
	}
	if n := f.rdb.XLen(ctx, k.Dead).Val(); n != 1 {
		t.Fatalf("a refused delete changed the dead letters: %d", n)
	}
	golden(t, "queue_delete", f.ok("queue", "delete", "orders", "--force", "--yes", "--json"))
	if n := f.rdb.XLen(ctx, k.Dead).Val() + f.rdb.ZCard(ctx, k.Delayed).Val(); n != 0 {
		t.Errorf("after queue delete, %d dead letters and delayed jobs are left", n)
	}
	if f.rdb.HExists(ctx, f.prefix+":queues", "orders").Val() {
		t.Error("after queue delete, orders is still registered")
	}
	if out := f.ok("queues"); strings.Contains(out, "orders") {
		t.Errorf("queues lists the deleted queue:\n%s", out)
	}
	if r := f.run("", "queue", "delete", "nosuch", "--yes"); r.code != exitNotFound {
		t.Errorf("queue delete of an unknown queue: exit code %d, want %d", r.code, exitNotFound)
	}
	if r := f.run("", "queue", "delete", "reports", "--live-within", "0s", "--yes"); r.code != exitUsage {
		t.Errorf("--live-within 0s: exit code %d, want %d", r.code, exitUsage)
	}
}

// TestCLI_QueuesPrune removes the registry entries of queues without keys.
func TestCLI_QueuesPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.ok("enqueue", "orders", `{"order":1}`)
	e.rdb.HSet(ctx, e.prefix+":queues", "trial-1", "stream", "trial-2", "priority")
	golden(t, "queues_prune", e.ok("queues", "prune", "--json"))
	if got := e.rdb.HKeys(ctx, e.prefix+":queues").Val(); len(got) != 1 || got[0] != "orders" {
		t.Errorf("registry after prune: %v, want [orders]", got)
	}
	if out := e.ok("queues", "prune"); !strings.Contains(out, "0 ghost queues removed") {
		t.Errorf("second prune: %s", out)
	}
}

// TestCLI_BulkAll deletes every waiting job, runs every delayed job now and
// cancels every running job, with --all.
func TestCLI_BulkAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	k := e.keys("orders")
	for i := range 5 {
		e.ok("enqueue", "orders", fmt.Sprintf(`{"order":%d}`, i))
	}
	for i := range 3 {
		e.ok("enqueue", "orders", fmt.Sprintf(`{"later":%d}`, i), "--in", "1h")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"delete", "orders"}, "--all"},
		{[]string{"delete", "orders", "--all", "1-1"}, "leave out the IDs"},
		{[]string{"delete", "orders", "--all", "--state", "running"}, "waiting, delayed, retrying"},
		{[]string{"delete", "orders", "1-1", "--state", "waiting"}, "--state goes with --all"},
		{[]string{"run-now", "orders", "--all", "--state", "dead"}, "delayed, retrying"},
		{[]string{"delete", "orders", "--all"}, "delete 5 waiting jobs of queue orders needs --yes"},
	} {
		if r := e.run("", c.args...); r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("streamq %s: exit code %d, stderr %q; want %d and %q", strings.Join(c.args, " "), r.code, r.stderr, exitUsage, c.want)
		}
	}
	golden(t, "delete_all", e.ok("delete", "orders", "--all", "--yes", "--json"))
	if n := e.rdb.XLen(ctx, k.Stream).Val(); n != 0 {
		t.Errorf("after delete --all, %d entries in the stream, want 0", n)
	}
	golden(t, "run_now_all", e.ok("run-now", "orders", "--all", "--yes", "--json"))
	if n, m := e.rdb.ZCard(ctx, k.Delayed).Val(), e.rdb.XLen(ctx, k.Stream).Val(); n != 0 || m != 3 {
		t.Errorf("after run-now --all: %d delayed, %d in the stream; want 0 and 3", n, m)
	}
	// Two of them running, held by a consumer that never finishes them.
	q := mustQueue(t, e.rdb, e.prefix, "orders")
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.Group(), Consumer: "stuck", Streams: []string{k.Stream, ">"}, Count: 2, Block: -1})
	golden(t, "cancel_all", e.ok("cancel", "orders", "--all", "--yes", "--json"))
	if n := e.rdb.HLen(ctx, k.Cancel).Val(); n != 2 {
		t.Errorf("after cancel --all, %d cancel requests, want 2", n)
	}
	if out := e.ok("delete", "orders", "--all", "--state", "retrying", "--yes"); !strings.Contains(out, "deleted 0 retrying jobs of orders") {
		t.Errorf("delete --all of no retrying job: %s", out)
	}
}

// TestCLI_StatsHistory rolls the minute counters up and shows 2 hours per
// minute and 7 days per hour.
func TestCLI_StatsHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.ok("enqueue", "orders", "x")
	e.ok("enqueue", "reports", "y")
	k := e.keys("orders")
	m := time.Now().Unix()/60 - 100
	e.rdb.HSet(ctx, k.Stats(m), "processed", 40, "failed", 2)
	e.rdb.Expire(ctx, k.Stats(m), time.Hour)
	golden(t, "stats_rollup", e.ok("stats", "--rollup", "--json"))
	e.rdb.Del(ctx, k.Stats(m)) // expired: only the hour counter has it now
	var out struct {
		History struct {
			StepS  int64 `json:"step_s"`
			Points []struct{ Processed, Failed int64 }
		}
	}
	if err := json.Unmarshal([]byte(e.ok("stats", "orders", "--history", "7d", "--json")), &out); err != nil {
		t.Fatal(err)
	}
	var p, fl int64
	for _, pt := range out.History.Points {
		p, fl = p+pt.Processed, fl+pt.Failed
	}
	if out.History.StepS != 3600 || len(out.History.Points) != 168 || p != 40 || fl != 2 {
		t.Errorf("stats --history 7d: step %d s, %d points, %d processed, %d failed; want 3600, 168, 40, 2", out.History.StepS, len(out.History.Points), p, fl)
	}
	golden(t, "stats_history", e.ok("stats", "orders", "--history", "3m", "--minutes", "1", "--json"))
	if text := e.ok("stats", "orders", "--history", "3h"); !strings.Contains(text, "History per hour (UTC), 40 processed and 2 failed in all") {
		t.Errorf("stats --history 3h:\n%s", text)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stats"}, "--rollup"},
		{[]string{"stats", "orders", "--history", "8d"}, "--history"},
		{[]string{"stats", "orders", "--history", "soon"}, "1m to 7d"},
		{[]string{"stats", "orders", "--kind", "email"}, "--history"},
	} {
		if r := e.run("", c.args...); r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("streamq %s: exit code %d, stderr %q; want %d and %q", strings.Join(c.args, " "), r.code, r.stderr, exitUsage, c.want)
		}
	}
}

// TestCLI_StatsLatency shows the wait and run time percentiles of a queue
// and of one kind, from histograms written as the workers write them.
func TestCLI_StatsLatency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.ok("enqueue", "orders", "x")
	k := e.keys("orders")
	m := time.Now().Unix() / 60
	// email: 9 waits of 2 ms and runs of 40 ms, 1 of 1 s and 400 ms; sms: 1 run.
	w2, w1s := hist.Index(2*time.Millisecond), hist.Index(time.Second)
	r40, r400 := hist.Index(40*time.Millisecond), hist.Index(400*time.Millisecond)
	f := rdb.LatencyField
	// The minutes around now hold the same, so a minute turning while the
	// test runs changes no output.
	for i := m - 1; i <= m+1; i++ {
		e.rdb.HSet(ctx, k.Latency(i),
			f('w', w2, "", false), 10, f('w', w1s, "", false), 1, f('r', r40, "", false), 10, f('r', r400, "", false), 1,
			f('w', w2, "email", true), 9, f('w', w1s, "email", true), 1, f('r', r40, "email", true), 9, f('r', r400, "email", true), 1,
			f('w', w2, "sms", true), 1, f('r', r40, "sms", true), 1, "p:email", 9, "f:email", 1, "p:sms", 1)
		e.rdb.Expire(ctx, k.Latency(i), time.Hour)
	}
	golden(t, "stats_kind", e.ok("stats", "orders", "--history", "2m", "--kind", "email", "--json"))
	out := e.ok("stats", "orders", "--history", "2m")
	for _, want := range []string{"WAIT P50", "RUN P95", "1.98ms", "1.02s", "38.91ms", "409.6ms", `Kinds: "email", "sms"`} {
		if !strings.Contains(out, want) {
			t.Errorf("stats --history 2m lacks %q:\n%s", want, out)
		}
	}
	if out := e.ok("stats", "orders", "--history", "2m", "--kind", "sms"); !strings.Contains(out, `History of kind "sms" per minute (UTC), 2 processed and 0 failed`) {
		t.Errorf("stats --kind sms:\n%s", out)
	}
	if r := e.run("", "stats", "orders", "--history", "2m", "--kind", "fax"); r.code != exitUsage || !strings.Contains(r.stderr, `kinds that ran: "email", "sms"`) {
		t.Errorf("stats --kind fax: exit code %d, stderr %q", r.code, r.stderr)
	}
}

// TestCLI_Redis shows the test server.
func TestCLI_Redis(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The server's version is its own.
	golden(t, "redis", regexp.MustCompile(`"version": "[^"]*"`).ReplaceAllString(e.ok("redis", "--json"), `"version": "<version>"`))
	out := e.ok("redis")
	for _, w := range []string{"Server:       Redis 7", "Eviction:     noeviction", "Persistence:", redistest.Addr()} {
		if !strings.Contains(out, w) {
			t.Errorf("streamq redis lacks %q:\n%s", w, out)
		}
	}
}
