package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/redistest"
)

// TestCLI_ReadOnly runs every reading subcommand against one fixture with
// jobs in every state and checks --json against the golden files.
func TestCLI_ReadOnly(t *testing.T) {
	t.Parallel()
	f := seed(t)
	goldens := []struct {
		name string
		args []string
	}{
		{"queues", []string{"queues", "--json"}},
		{"stats_orders", []string{"stats", "orders", "--minutes", "2", "--json"}},
		{"stats_reports", []string{"stats", "reports", "--minutes", "2", "--json"}},
		{"stats_cache", []string{"stats", "cache", "--minutes", "2", "--json"}},
		{"jobs_waiting", []string{"jobs", "orders", "--state", "waiting", "--json"}},
		{"jobs_running", []string{"jobs", "orders", "--state", "running", "--json"}},
		{"jobs_delayed", []string{"jobs", "orders", "--state", "delayed", "--json"}},
		{"jobs_retrying", []string{"jobs", "orders", "--state", "retrying", "--json"}},
		{"jobs_dead", []string{"jobs", "orders", "--state", "dead", "--json"}},
		{"jobs_priority", []string{"jobs", "reports", "--state", "waiting", "--json"}},
		{"jobs_header", []string{"jobs", "orders", "--header", "tenant=acme", "--json"}},
		{"jobs_grep", []string{"jobs", "orders", "--grep", "plain", "--json"}},
		{"job_retrying", []string{"job", "orders", f.retrying, "--json"}},
		{"job_running", []string{"job", "orders", f.running, "--json"}},
		{"job_done", []string{"job", "orders", f.done, "--json"}},
		{"job_waiting_binary", []string{"job", "orders", f.waiting[1], "--json"}},
		{"dead_ls", []string{"dead", "ls", "orders", "--json"}},
		{"dead_ls_filtered", []string{"dead", "ls", "orders", "--reason", "malformed", "--json"}},
		{"dead_show", []string{"dead", "show", "orders", f.dead, "--json"}},
		{"consumers", []string{"consumers", "orders", "--json"}},
		{"schedules", []string{"schedules", "--json"}},
		{"schedules_orders", []string{"schedules", "orders", "--json"}},
		{"watch", []string{"watch", "--count", "2", "--interval", "100ms", "--json"}},
		{"version", []string{"version", "--json"}},
	}
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			golden(t, g.name, f.with(t).ok(g.args...))
		})
	}
	t.Run("tables", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			args []string
			want []string
		}{
			{[]string{"queues"}, []string{"QUEUE", "orders", "stream", "reports", "priority"}},
			{[]string{"stats", "orders"}, []string{"Queue:", "orders", "waiting 2", "Throughput per minute"}},
			{[]string{"stats", "cache"}, []string{"stream+writebehind", "Write-behind:    2 unpersisted"}},
			{[]string{"jobs", "orders", "--state", "dead"}, []string{"dead", "no such customer", `{"order":2,"do":"die"}`}},
			{[]string{"jobs", "orders", "--limit", "1"}, []string{f.waiting[0], "more: streamq jobs orders --state waiting --limit 1 --cursor "}},
			{[]string{"job", "orders", f.waiting[0]}, []string{"tenant: acme", `"order": 4`}},
			{[]string{"job", "orders", f.waiting[1]}, []string{`plain text \xff payload`}},
			{[]string{"job", "orders", f.retrying}, []string{"retrying", "card declined"}},
			{[]string{"job", "orders", f.done}, []string{"done", "Progress:    100% all rows", `"rows": 12`}},
			{[]string{"consumers", "orders"}, []string{"NAME", "worker-1"}},
			{[]string{"jobs", "reports"}, []string{"PRIORITY", `{"report":1}`}},
			{[]string{"schedules", "orders"}, []string{"new-year-report", "0 3 1 1 *"}},
			{[]string{"watch", "orders", "--count", "1"}, []string{"orders running waiting=2"}},
			{[]string{"version"}, []string{"streamq 0.1.0"}},
		} {
			out := f.with(t).ok(c.args...)
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("streamq %s: output lacks %q:\n%s", strings.Join(c.args, " "), w, out)
				}
			}
		}
	})
}

// TestCLI_PauseResume checks the paused key in Redis.
func TestCLI_PauseResume(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	paused := f.keys("orders").Part("paused")
	golden(t, "pause", f.ok("pause", "orders", "--json"))
	if n := f.rdb.Exists(ctx, paused).Val(); n != 1 {
		t.Fatalf("after pause, EXISTS %s = %d, want 1", paused, n)
	}
	if out := f.ok("queues"); !strings.Contains(out, "paused") {
		t.Errorf("queues does not show orders paused:\n%s", out)
	}
	f.ok("resume", "orders")
	if n := f.rdb.Exists(ctx, paused).Val(); n != 0 {
		t.Fatalf("after resume, EXISTS %s = %d, want 0", paused, n)
	}
}

// TestCLI_Delete deletes one and many jobs, and refuses a running one and a
// bulk delete without --yes.
func TestCLI_Delete(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	stream := f.keys("orders").Stream
	inStream := func(id string) bool { return len(f.rdb.XRange(ctx, stream, id, id).Val()) == 1 }

	golden(t, "delete", f.ok("delete", "orders", f.waiting[0], "--json"))
	if inStream(f.waiting[0]) {
		t.Errorf("deleted job %s is still in the stream", f.waiting[0])
	}
	if r := f.run("", "job", "orders", f.waiting[0]); r.code != exitNotFound {
		t.Errorf("job of a deleted job: exit code %d, want %d; stdout: %s, stderr: %s", r.code, exitNotFound, r.stdout, r.stderr)
	}

	r := f.run("", "delete", "orders", f.running, "--json")
	if r.code != exitFailure || !strings.Contains(r.stdout, `"wrong_state"`) {
		t.Errorf("delete of a running job: exit code %d, stdout %s, want %d and wrong_state", r.code, r.stdout, exitFailure)
	}

	r = f.run("", "delete", "orders", f.waiting[1], f.delayed)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("bulk delete without --yes: exit code %d, stderr %q, want %d and a hint at --yes", r.code, r.stderr, exitUsage)
	}
	if !inStream(f.waiting[1]) {
		t.Fatalf("a refused delete deleted %s", f.waiting[1])
	}
	f.ok("delete", "orders", f.waiting[1], f.delayed, "--yes")
	if inStream(f.waiting[1]) {
		t.Errorf("%s is still in the stream after delete --yes", f.waiting[1])
	}
	if r := f.run("", "delete", "orders", "1-1"); r.code != exitNotFound {
		t.Errorf("delete of an unknown job: exit code %d, want %d", r.code, exitNotFound)
	}
}

// TestCLI_RunNow makes a delayed job due.
func TestCLI_RunNow(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	before := time.Now()
	f.ok("run-now", "orders", f.delayed)
	k := f.keys("orders")
	score, err := f.rdb.ZScore(ctx, k.Delayed, f.delayed).Result()
	if err == nil && score > float64(before.Add(time.Minute).UnixMilli()) {
		t.Errorf("after run-now the delayed job is due at %v, want now", time.UnixMilli(int64(score)))
	}
	if r := f.run("", "run-now", "orders", f.waiting[0], "--json"); r.code != exitFailure || !strings.Contains(r.stdout, "wrong_state") {
		t.Errorf("run-now of a waiting job: exit code %d, stdout %s; want %d, wrong_state", r.code, r.stdout, exitFailure)
	}
}

// TestCLI_Cancel cancels the running job: the consumer cancels its handler
// and dead-letters it as cancelled.
func TestCLI_Cancel(t *testing.T) {
	t.Parallel()
	f := seed(t)
	// Before the cancel: once the running job ends, the consumer runs the
	// waiting ones.
	if r := f.run("", "cancel", "orders", f.waiting[0], "--json"); r.code != exitFailure || !strings.Contains(r.stdout, "wrong_state") {
		t.Errorf("cancel of a waiting job: exit code %d, stdout %s; want %d, wrong_state", r.code, r.stdout, exitFailure)
	}
	golden(t, "cancel", f.ok("cancel", "orders", f.running, "--json"))
	redistest.WaitFor(t, 10*time.Second, "the cancelled job to be dead-lettered as cancelled", func() bool {
		var j struct{ State string }
		r := f.run("", "job", "orders", f.running, "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &j) == nil && j.State == "cancelled"
	})
	golden(t, "job_cancelled", f.ok("job", "orders", f.running, "--json"))
	golden(t, "dead_ls_cancelled", f.ok("dead", "ls", "orders", "--cancelled", "--json"))
}

// TestCLI_DeadRequeue refuses a bulk requeue without --yes, then requeues.
func TestCLI_DeadRequeue(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	k := f.keys("orders")
	r := f.run("y\n", "dead", "requeue", "orders", "--all")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("requeue --all without --yes: exit code %d, stderr %q; want %d and a hint at --yes", r.code, r.stderr, exitUsage)
	}
	if n := f.rdb.XLen(ctx, k.Dead).Val(); n != 1 {
		t.Fatalf("a refused requeue changed the dead letters: %d, want 1", n)
	}
	golden(t, "dead_requeue", f.ok("dead", "requeue", "orders", "--all", "--yes", "--json"))
	if n := f.rdb.XLen(ctx, k.Dead).Val(); n != 0 {
		t.Errorf("after requeue --all, %d dead letters, want 0", n)
	}
	var page struct {
		Jobs []struct{ Payload struct{ Data string } }
	}
	if err := json.Unmarshal([]byte(f.ok("jobs", "orders", "--json")), &page); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, j := range page.Jobs {
		found = found || strings.Contains(j.Payload.Data, `"order":2`)
	}
	if !found {
		t.Errorf("the requeued job (order 2) is not waiting: %+v", page.Jobs)
	}
}

// TestCLI_DeadPurge purges by filter and by ID.
func TestCLI_DeadPurge(t *testing.T) {
	t.Parallel()
	f := seed(t)
	ctx := context.Background()
	k := f.keys("orders")
	if r := f.run("", "dead", "purge", "orders"); r.code != exitUsage {
		t.Errorf("purge without IDs, filter or --all: exit code %d, want %d", r.code, exitUsage)
	}
	golden(t, "dead_purge_nomatch", f.ok("dead", "purge", "orders", "--error", "no such text", "--yes", "--json"))
	if n := f.rdb.XLen(ctx, k.Dead).Val(); n != 1 {
		t.Fatalf("a purge that matched nothing left %d dead letters, want 1", n)
	}
	golden(t, "dead_purge", f.ok("dead", "purge", "orders", f.dead, "--json"))
	if n := f.rdb.XLen(ctx, k.Dead).Val(); n != 0 {
		t.Errorf("after purge, %d dead letters, want 0", n)
	}
	if r := f.run("", "dead", "purge", "orders", f.dead); r.code != exitNotFound {
		t.Errorf("purge of a purged job: exit code %d, want %d", r.code, exitNotFound)
	}
}

// TestCLI_Enqueue enqueues stream, delayed, unique and priority jobs.
func TestCLI_Enqueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	k := e.keys("orders")
	golden(t, "enqueue", e.ok("enqueue", "orders", `{"order":1}`, "--header", "tenant=acme", "--json"))
	if r := e.run(`{"order":2}`, "enqueue", "orders", "-"); r.code != 0 {
		t.Fatalf("enqueue from stdin: exit code %d: %s", r.code, r.stderr)
	}
	msgs := e.rdb.XRange(ctx, k.Stream, "-", "+").Val()
	if len(msgs) != 2 {
		t.Fatalf("stream holds %d entries, want 2", len(msgs))
	}
	if p := msgs[1].Values["payload"]; p != `{"order":2}` {
		t.Errorf("payload from stdin = %q", p)
	}
	if h, _ := msgs[0].Values["headers"].(string); !strings.Contains(h, `"tenant":"acme"`) {
		t.Errorf("headers = %q, want tenant=acme", h)
	}
	e.ok("enqueue", "orders", "later", "--in", "5m")
	if n := e.rdb.ZCard(ctx, k.Delayed).Val(); n != 1 {
		t.Errorf("after enqueue --in, %d delayed jobs, want 1", n)
	}
	first := strings.TrimSpace(e.ok("enqueue", "orders", "once", "--unique", "u1", "--ttl", "1m"))
	r := e.run("", "enqueue", "orders", "once", "--unique", "u1", "--ttl", "1m", "--json")
	if r.code != exitFailure || !strings.Contains(r.stdout, `"duplicate": true`) || !strings.Contains(r.stdout, first) {
		t.Errorf("second unique enqueue: exit code %d, stdout %s; want %d, duplicate of %s", r.code, r.stdout, exitFailure, first)
	}
	e.ok("enqueue", "reports", `{"report":1}`, "--priority", "7")
	if n := e.rdb.ZCard(ctx, e.keys("reports").Part("priority")).Val(); n != 1 {
		t.Errorf("after enqueue --priority, %d jobs in the priority set, want 1", n)
	}
}

// TestCLI_ConsumersPrune removes an idle consumer without pending jobs.
func TestCLI_ConsumersPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	q := mustQueue(t, e.rdb, e.prefix, "orders")
	if err := q.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	e.rdb.HSet(ctx, e.prefix+":queues", "orders", "stream")
	k := e.keys("orders")
	e.rdb.XGroupCreateConsumer(ctx, k.Stream, q.Group(), "stale")
	redistest.WaitFor(t, 5*time.Second, "consumer idle for 1.1s", func() bool {
		cs := e.rdb.XInfoConsumers(ctx, k.Stream, q.Group()).Val()
		return len(cs) == 1 && cs[0].Idle > 1100*time.Millisecond
	})
	golden(t, "consumers_prune", e.ok("consumers", "prune", "orders", "--idle", "1s", "--json"))
	if cs := e.rdb.XInfoConsumers(ctx, k.Stream, q.Group()).Val(); len(cs) != 0 {
		t.Errorf("after prune, consumers %v, want none", cs)
	}
}

// TestCLI_ExitCodes checks the codes of bad input.
func TestCLI_ExitCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if err := mustQueue(t, e.rdb, e.prefix, "orders").Setup(ctx); err != nil {
		t.Fatal(err)
	}
	e.rdb.HSet(ctx, e.prefix+":queues", "orders", "stream", "orders-eu", "stream")
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"bogus"}, exitUsage, "unknown command"},
		{[]string{"dead", "lsx", "orders"}, exitUsage, "use ls, show, requeue or purge"},
		{[]string{"queues", "--bogus"}, exitUsage, "unknown flag"},
		{[]string{"queues", "extra"}, exitUsage, "takes none"},
		{[]string{"jobs"}, exitUsage, "<queue>"},
		{[]string{"jobs", "orders", "--state", "sleeping"}, exitUsage, "--state"},
		{[]string{"jobs", "orders", "--state", "done"}, exitUsage, "finished jobs are listed as completed"},
		{[]string{"jobs", "orders", "--cursor", "zzz"}, exitUsage, "cursor"},
		{[]string{"jobs", "orders", "--state", "delayed", "--cursor", "zzz"}, exitUsage, "previous page"},
		{[]string{"dead", "ls", "orders", "--reason", "bogus"}, exitUsage, "max_deliveries, permanent, malformed, cancelled"},
		{[]string{"dead", "purge", "orders", "--reason", "bogus", "--yes"}, exitUsage, "use one of"},
		{[]string{"jobs", "orders", "--limit", "0"}, exitUsage, "--limit"},
		{[]string{"jobs", "orders", "--header", "novalue"}, exitUsage, "key=value"},
		{[]string{"dead", "ls", "orders", "--since", "yesterday"}, exitUsage, "--since"},
		{[]string{"dead", "requeue", "orders"}, exitUsage, "--all"},
		{[]string{"dead", "purge", "orders", "--all", "--reason", "x"}, exitUsage, "--all"},
		{[]string{"stats", "orders", "--minutes", "500"}, exitUsage, "--minutes"},
		{[]string{"watch", "--interval", "1ms"}, exitUsage, "--interval"},
		{[]string{"enqueue", "orders", "x", "--in", "1m", "--at", "2030-01-01T00:00:00Z"}, exitUsage, "not both"},
		{[]string{"enqueue", "orders", "x", "--unique", "k"}, exitUsage, "--ttl"},
		{[]string{"enqueue", "orders", "x", "--priority", "1", "--in", "1m"}, exitUsage, "--priority"},
		{[]string{"--url", "http://x", "queues"}, exitUsage, "redis://"},
		{[]string{"--url", "redis://127.0.0.1:1", "--cluster", "127.0.0.1:2", "queues"}, exitUsage, "one of"},
		{[]string{"stats", "ordrs"}, exitNotFound, "orders"},
		{[]string{"job", "orders", "1-1"}, exitNotFound, "not found"},
	} {
		r := e.run("", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.stderr) {
			t.Errorf("streamq %s: exit code %d, stderr %q; want %d and %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.stderr)
		}
	}
}

// TestCLI_Unreachable says where it tried and how to start a Redis.
func TestCLI_Unreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	e := newEnv(t)
	r := e.run("", "--url", "redis://"+addr, "queues")
	if r.code != exitFailure || !strings.Contains(r.stderr, addr) || !strings.Contains(r.stderr, "redis-server") {
		t.Errorf("unreachable Redis: exit code %d, stderr %q; want %d, the address and how to start one", r.code, r.stderr, exitFailure)
	}
}

// TestCLI_Connection reaches Redis through REDIS_ADDR and a unix socket.
func TestCLI_Connection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sock := t.TempDir() + "/redis.sock"
	srv := redistest.StartServer(t, "--unixsocket", sock, "--unixsocketperm", "700")
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	c.HSet(ctx, e.prefix+":queues", "viaunix", "stream")
	if out := e.ok("--url", "unix://"+sock, "queues"); !strings.Contains(out, "viaunix") {
		t.Errorf("queues over unix://: %s", out)
	}
	cmdEnv := e.run("", "--url", "redis://"+srv.Addr(), "version")
	if cmdEnv.code != 0 {
		t.Errorf("version: %d %s", cmdEnv.code, cmdEnv.stderr)
	}
}

// TestCLI_Help checks that every subcommand has help with an example.
func TestCLI_Help(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []string{"queues", "stats", "watch", "jobs", "job", "pause", "resume", "cancel", "delete",
		"run-now", "dead", "dead ls", "dead show", "dead requeue", "dead purge", "consumers", "consumers prune",
		"schedules", "enqueue", "version", "dashboard", "queue", "queue delete", "queues prune", "redis", "dash"} {
		out := e.ok(append(strings.Fields(c), "-h")...)
		if !strings.Contains(out, "Examples:") || !strings.Contains(out, "streamq "+c) {
			t.Errorf("streamq %s -h has no example:\n%s", c, out)
		}
	}
	if out := e.ok("run-now", "-h"); !strings.Contains(out, "end of the jobs already waiting") || strings.Contains(out, "front") {
		t.Errorf("run-now -h does not say where the jobs go:\n%s", out)
	}
	if out := e.run("", "bench", "-h"); out.code != 0 || !strings.Contains(out.stderr, "-scenarios") {
		t.Errorf("streamq bench -h: exit code %d, stderr %s", out.code, out.stderr)
	}
}

// TestCLI_Bench runs a tiny benchmark through streamq bench.
func TestCLI_Bench(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := e.ok("bench", "-scenarios", "enqueue", "-enqueue-jobs", "500", "-runs", "1", "-producers", "1", "-max-time", "30s")
	if !strings.Contains(out, "enqueue/") || !strings.Contains(out, redistest.Addr()) {
		t.Errorf("bench output:\n%s", out)
	}
	// --url wins over REDIS_URL (here a closed port), and a bare --json
	// prints the results as JSON on stdout, the table on stderr.
	r := runIn(t, "", []string{"REDIS_URL=redis://127.0.0.1:1"}, "bench", "--url", "redis://"+redistest.Addr(), "--json",
		"-scenarios", "enqueue", "-enqueue-jobs", "200", "-runs", "1", "-producers", "1", "-max-time", "30s")
	var rep struct {
		RedisAddr string `json:"redis_addr"`
		Results   []struct{ Scenario string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); r.code != 0 || err != nil || rep.RedisAddr != redistest.Addr() || len(rep.Results) == 0 {
		t.Errorf("bench --url --json: exit code %d, JSON error %v, report %+v; stdout:\n%s\nstderr:\n%s", r.code, err, rep, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "enqueue/") {
		t.Errorf("bench --json: the table is not on stderr:\n%s", r.stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--url", "redis://:pw@127.0.0.1:1"}, "without credentials"},
		{[]string{"bench", "--url", "redis://127.0.0.1:1", "-addr", "127.0.0.1:2"}, "not both"},
		{[]string{"bench", "--prefix", "x"}, "does not use --prefix"},
	} {
		if r := e.run("", c.args...); r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("streamq %s: exit code %d, stderr %q; want %d and %q", strings.Join(c.args, " "), r.code, r.stderr, exitUsage, c.want)
		}
	}
}

// TestCLI_Topologies enqueues and lists through --cluster and --sentinel.
func TestCLI_Topologies(t *testing.T) {
	t.Parallel()
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Replicas: -1})
		e := newEnv(t)
		e.viaTopology(t, "--cluster", strings.Join(c.Addrs(), ","))
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		s := redistest.StartSentinel(t, redistest.SentinelOptions{Replicas: -1, Sentinels: 1, Quorum: 1})
		e := newEnv(t)
		e.viaTopology(t, "--sentinel", s.MasterName()+"@"+strings.Join(s.Addrs(), ","))
	})
}

// viaTopology enqueues a job with the connection flags and finds it again.
func (e *env) viaTopology(t *testing.T, flags ...string) {
	t.Helper()
	id := strings.TrimSpace(e.ok(append(flags, "enqueue", "orders", `{"via":"topology"}`)...))
	var page struct{ Jobs []struct{ ID string } }
	if err := json.Unmarshal([]byte(e.ok(append(flags, "jobs", "orders", "--json")...)), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 1 || page.Jobs[0].ID != id {
		t.Errorf("jobs through %s: %+v, want the enqueued job %s", flags[0], page.Jobs, id)
	}
}
