package integration

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/periodic"
	"github.com/streamq/streamq/priority"
	"github.com/streamq/streamq/writebehind"
	"github.com/streamq/streamq/writebehind/sqlite"
)

// ACLCommands are the commands the README's least-privilege ACL grants a
// streamq user (keys ~streamq:*). TestACL_LeastPrivilege runs every part of
// the library as such a user and fails on any denial, so a command that
// new code needs cannot slip in unlisted: add it here and to the README.
// Cluster clients also need cluster|slots and command (go-redis reads the
// slot map and the command table with them).
var aclCommands = []string{
	"evalsha", "eval", "xreadgroup", "xack", "xautoclaim", "xgroup|create", "xgroup|delconsumer",
	"xlen", "xinfo|groups", "xinfo|consumers", "xinfo|stream", "xpending", "xclaim", "xrange", "xrevrange", "xdel",
	"xtrim", "xread", "xadd", "zcard", "get", "hgetall", "del", "exists", "hdel", "hget", "hincrby",
	"hlen", "hmget", "hset", "hsetnx", "incr", "pexpire", "set", "time", "zadd", "zcount", "zmscore", "zrange",
	"zrem", "zremrangebyrank", "zscore",
	"hkeys", "expire", "hexists", "zremrangebyscore", // control loop, throughput counters, worker heartbeats
	"zrank", "zscan", // the inspector (package inspect): paging sorted sets, finding priority jobs
	"wait",                                      // replicated writes (MinReplicas)
	"watch", "unwatch", "type", "multi", "exec", // writebehind Writer.Resync
	"incrby",                // writebehind Writer.EnsureVersionAtLeast
	"sadd", "srem", "scard", // the retrying markers of the delayed set (the overview counts them)
	"info", // the maxmemory-policy check at start (optional: denied, it is skipped)
}

// TestACL_LeastPrivilege runs a producer (plain, batched, delayed, unique,
// replicated), a consumer that retries and dead-letters, dead-letter
// requeueing, cancel, a priority queue with Forward and a worker, a
// write-behind writer with its handler and SQLite sink, and a periodic
// schedule, as a user that may run only the commands of aclCommands on
// keys streamq:*, and checks that Redis denied nothing (ACL LOG) and every
// job was handled.
func TestACL_LeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, rdb := leastPrivilege(t)

	q, err := streamq.NewQueue(rdb, "acl", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	h := func(_ context.Context, m *streamq.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[string(m.Payload)]++
		switch {
		case string(m.Payload) == "dead":
			return streamq.Permanent(errors.New("to the dead letters"))
		case strings.HasPrefix(string(m.Payload), "retry") && m.Attempt == 1:
			return streamq.RetryAfter(10*time.Millisecond, errors.New("once more"))
		}
		return nil
	}
	cons := relRun(t, relConsumer(t, q, h, streamq.ConsumerConfig{ReclaimInterval: 100 * time.Millisecond, MinIdle: time.Second, PruneIdle: time.Second}))

	// Producer: every kind of enqueue.
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s as the least-privilege user: %v", what, err)
		}
	}
	_, err = p.Enqueue(ctx, []byte("plain"))
	must("Enqueue", err)
	_, err = p.EnqueueBatch(ctx, []streamq.Job{{Payload: []byte("batch-1")}, {Payload: []byte("retry-1")}})
	must("EnqueueBatch", err)
	_, err = p.Enqueue(ctx, []byte("delayed"), streamq.ProcessIn(20*time.Millisecond))
	must("delayed Enqueue", err)
	_, err = p.Enqueue(ctx, []byte("unique"), streamq.Unique("u", time.Minute))
	must("unique Enqueue", err)
	cancelID, err := p.Enqueue(ctx, []byte("cancelled"), streamq.ProcessIn(time.Hour), streamq.Unique("c", time.Hour))
	must("delayed unique Enqueue", err)
	ok, err := q.CancelDelayed(ctx, cancelID)
	must("Cancel", err)
	if !ok {
		t.Fatal("Cancel found nothing")
	}
	_, err = p.Enqueue(ctx, []byte("dead"))
	must("Enqueue", err)
	_, err = q.Stats(ctx)
	must("Stats", err)
	_, err = q.Trim(ctx)
	must("Trim", err)

	redistest.WaitFor(t, relWait, "the dead letter", func() bool {
		n, err := q.DeadLetters().Len(ctx)
		return err == nil && n == 1
	})
	dl := q.DeadLetters()
	letters, _, err := dl.List(ctx, "", 10)
	must("DeadLetters.List", err)
	_, err = dl.Get(ctx, letters[0].ID)
	must("DeadLetters.Get", err)
	_, err = dl.RequeueAll(ctx)
	must("DeadLetters.RequeueAll", err)
	redistest.WaitFor(t, relWait, "the requeued job to be dead-lettered again", func() bool {
		n, err := q.DeadLetters().Len(ctx)
		return err == nil && n == 1
	})
	_, err = dl.PurgeBefore(ctx, time.Now().Add(time.Hour))
	must("DeadLetters.PurgeBefore", err)

	// Priority: push, forward, a worker that retries once.
	pq, err := priority.NewQueue(q, nil)
	must("priority.NewQueue", err)
	_, err = pq.PushBatch(ctx, []priority.Job{{Priority: 2, Payload: []byte("retry-p")}, {Priority: 1, Payload: []byte("p")}})
	must("priority PushBatch", err)
	_, err = pq.Stats(ctx)
	must("priority Stats", err)
	w, err := priority.NewWorker(pq, streamq.HandlerFunc(h), &priority.WorkerConfig{Block: 100 * time.Millisecond, ReapInterval: 100 * time.Millisecond, Logger: relLogger(t)})
	must("priority.NewWorker", err)
	wr := redistest.Background(t, "priority Worker.Run", relRunStop, w.Run)
	fq, err := streamq.NewQueue(rdb, "acl-fwd", nil)
	must("NewQueue", err)
	fpq, err := priority.NewQueue(fq, nil)
	must("priority.NewQueue", err)
	fwd := relRun(t, relConsumer(t, fq, priority.Forward(fpq).Handle, streamq.ConsumerConfig{}))
	fp, err := streamq.NewProducer(fq, nil)
	must("NewProducer", err)
	_, err = fp.Enqueue(ctx, []byte("forwarded"), priority.WithPriority(3))
	must("Enqueue for Forward", err)
	fw, err := priority.NewWorker(fpq, streamq.HandlerFunc(h), &priority.WorkerConfig{Block: 100 * time.Millisecond, Logger: relLogger(t)})
	must("priority.NewWorker", err)
	fwr := redistest.Background(t, "priority Worker.Run", relRunStop, fw.Run)

	// Write-behind: a writer and its handler into SQLite.
	wq, err := streamq.NewQueue(rdb, "acl-wb", nil)
	must("NewQueue", err)
	writer, err := writebehind.NewWriter(wq, &writebehind.WriterConfig{TTL: time.Hour})
	must("NewWriter", err)
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "acl.db"))
	must("sqlite.Open", err)
	t.Cleanup(func() { _ = db.Close() })
	sink, err := sqlite.NewSink(db, nil)
	must("sqlite.NewSink", err)
	must("CreateSchema", sink.CreateSchema(ctx))
	wh, err := writebehind.NewHandler(sink, &writebehind.HandlerConfig{Writer: writer, MaxLatency: 20 * time.Millisecond})
	must("writebehind.NewHandler", err)
	t.Cleanup(func() { _ = wh.Close() })
	wbc := relRun(t, relConsumer(t, wq, wh.Handle, streamq.ConsumerConfig{}))
	_, err = writer.Set(ctx, "k1", []byte("v1"))
	must("Writer.Set", err)
	_, err = writer.SetFields(ctx, "k2", map[string]string{"a": "b"})
	must("Writer.SetFields", err)
	_, _, err = writer.Get(ctx, "k1")
	must("Writer.Get", err)
	_, _, err = writer.GetFields(ctx, "k2")
	must("Writer.GetFields", err)
	_, _, err = writer.Resync(ctx, "k1")
	must("Writer.Resync", err)
	_, err = writer.Delete(ctx, "k2")
	must("Writer.Delete", err)
	_, err = writer.EnsureVersionAtLeast(ctx, 1)
	must("Writer.EnsureVersionAtLeast", err)

	// Periodic: a schedule that ticks every 100 ms.
	sched, err := periodic.New(p, nil)
	must("periodic.New", err)
	must("RegisterInterval", sched.RegisterInterval("tick", 100*time.Millisecond, []byte("tick")))
	sr := redistest.Background(t, "periodic Scheduler.Run", relRunStop, sched.Run)

	redistest.WaitFor(t, relWait, "every job handled and the write-behind changes stored", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, want := range []string{"plain", "batch-1", "retry-1", "delayed", "unique", "retry-p", "p", "forwarded"} {
			if seen[want] == 0 {
				return false
			}
		}
		if seen["tick"] < 2 || seen["retry-1"] < 2 || seen["retry-p"] < 2 {
			return false
		}
		v, err := sink.MaxVersion(ctx)
		return err == nil && v >= 4
	})
	for _, r := range []interface{ Stop() error }{sr, wbc, fwr, fwd, wr, cons} {
		if err := r.Stop(); err != nil {
			t.Errorf("as the least-privilege user: %v", err)
		}
	}
	denied, err := admin.Do(ctx, "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(denied) > 0 {
		t.Fatalf("Redis denied %d commands to the least-privilege user (add them to aclCommands and the README, or stop using them):\n%s", len(denied), fmt.Sprint(denied...))
	}
}

// leastPrivilege starts a server of the test's own with the user streamq
// allowed only aclCommands on keys streamq:*, and returns an admin client
// and a client logged in as that user (both closed at cleanup).
func leastPrivilege(t *testing.T) (admin, user *redis.Client) {
	t.Helper()
	ctx := context.Background()
	s := redistest.StartServer(t)
	admin = redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	rule := []any{"ACL", "SETUSER", "streamq", "reset", "on", ">secret", "~streamq:*", "-@all"}
	for _, c := range aclCommands {
		rule = append(rule, "+"+c)
	}
	if err := admin.Do(ctx, rule...).Err(); err != nil {
		t.Fatal(err)
	}
	_ = admin.Do(ctx, "ACL", "LOG", "RESET").Err()
	user = redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "streamq", Password: "secret", DisableIdentity: true, Protocol: 2})
	t.Cleanup(func() { _ = user.Close() })
	return admin, user
}
