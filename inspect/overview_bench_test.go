package inspect_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

// Sizes of BenchmarkQueue_Overview's queue: the size the overview must stay
// cheap at (issue 32: at most 1 ms of Redis time per queue).
const (
	benchJobs     = 1_000_000
	benchDead     = 20_000
	benchDelayed  = 5_000
	benchRunning  = 100
	benchAckedDel = 100 // delivered, acknowledged and deleted, as consumers do
)

// BenchmarkQueue_Overview measures the Redis time of one Queue.Overview on
// a stream queue of a million jobs (100 running, 100 acknowledged and
// deleted), 5,000 delayed jobs (a fifth of them retrying) and 20,000 dead
// letters (a tenth of them cancelled), on a server of its own, and, as the
// baseline in the same run, the script that split delayed jobs and dead
// letters before (a sample of up to 1,000 of each). The Redis time is the
// growth of the usec of INFO commandstats (the overview of a stream queue
// calls no script, so no command is counted twice; for the baseline, only
// EVALSHA's), reported as redis-us/op, with the commands run as
// redis-cmds/op.
//
//	go test -run '^$' -bench BenchmarkQueue_Overview -benchtime 200x ./inspect/
func BenchmarkQueue_Overview(b *testing.B) {
	srv := redistest.StartServer(b, "--busy-reply-threshold", "60000")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	const prefix, name = "bench", "big"
	q, err := streamq.NewQueue(c, name, &streamq.QueueConfig{KeyPrefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	if err := q.Setup(ctx); err != nil {
		b.Fatal(err)
	}
	register(b, c, prefix, name, "stream")
	key := func(part string) string { return prefix + ":{" + name + "}:" + part }
	fill(b, c, key("stream"), benchJobs)
	fillDead(b, c, key("dead"), benchDead)
	fillRetrying(b, c, key("delayed"), key("delayed:jobs"), benchDelayed)
	msgs, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: streamq.DefaultGroup, Consumer: "bench-1",
		Streams: []string{key("stream"), ">"}, Count: benchRunning + benchAckedDel}).Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range msgs[0].Messages[:benchAckedDel] {
		c.XAck(ctx, key("stream"), streamq.DefaultGroup, m.ID)
		c.XDel(ctx, key("stream"), m.ID)
	}
	in, err := inspect.New(c, &inspect.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	iq, err := in.Queue(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	o, err := iq.Overview(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("overview: %+v", *o)
	b.Run("overview", func(b *testing.B) {
		measureRedis(b, c, nil, func() error {
			_, err := iq.Overview(ctx)
			return err
		})
	})
	b.Run("baseline_sampled_split", func(b *testing.B) {
		keys := []string{key("delayed"), key("delayed:jobs"), key("dead")}
		measureRedis(b, c, []string{"evalsha", "eval"}, func() error {
			return censusBefore.Run(ctx, c, keys, "stream", 1000).Err()
		})
	})
}

// measureRedis runs call b.N times and reports per call the growth of the
// usec and calls of the commands named in only (nil: all but INFO) in INFO
// commandstats.
func measureRedis(b *testing.B, c *redis.Client, only []string, call func() error) {
	ctx := context.Background()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	n := 0
	for b.Loop() {
		if err := call(); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.StopTimer()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec, cmds int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "info" || name == "config|resetstat" || (only != nil && !slices.Contains(only, name)) {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				u, _ := strconv.ParseInt(v, 10, 64)
				usec += u
			} else if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				cmds += n
			}
		}
	}
	b.ReportMetric(float64(usec)/float64(n), "redis-us/op")
	b.ReportMetric(float64(cmds)/float64(n), "redis-cmds/op")
}

// censusBefore is the script that split the delayed jobs and dead letters
// for the overview before the markers (see rdb.markLib): the baseline of
// BenchmarkQueue_Overview.
var censusBefore = redis.NewScript(`
local n = tonumber(ARGV[2])
local retrying, cancelled = 0, 0
local members = redis.call('ZRANGE', KEYS[1], 0, n - 1)
for _, id in ipairs(members) do
  local data = redis.call('HGET', KEYS[2], id)
  if data then
    local ok, f = pcall(cmsgpack.unpack, data)
    if ok and type(f) == 'table' then
      for k = 1, #f - 1, 2 do
        if (f[k] == 'attempt' and tonumber(f[k + 1]) and tonumber(f[k + 1]) > 0) or f[k] == 'err' then
          retrying = retrying + 1
          break
        end
      end
    end
  end
end
local dead = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', n)
for _, e in ipairs(dead) do
  local f = e[2]
  for k = 1, #f - 1, 2 do
    if f[k] == 'dl_reason' then
      if f[k + 1] == 'cancelled' then cancelled = cancelled + 1 end
      break
    end
  end
end
return {retrying, #members, cancelled, #dead}
`)

// fillDead adds n dead letters to stream dead with a Lua loop, every tenth
// a cancelled job (with its marker), in calls of 50,000.
func fillDead(tb testing.TB, c redis.UniversalClient, dead string, n int) {
	tb.Helper()
	const chunk = 50_000
	fill := redis.NewScript(`
for i = 1, tonumber(ARGV[1]) do
  local reason = 'max_deliveries'
  if (ARGV[2] + i) % 10 == 0 then reason = 'cancelled' end
  local id = redis.call('XADD', KEYS[1], '*', 'v', '1', 'payload', 'job-' .. (ARGV[2] + i), 'enq', '0',
    'dl_queue', 'big', 'dl_id', '1-' .. i, 'dl_reason', reason, 'dl_error', 'gateway timeout', 'dl_attempts', '5')
  if reason == 'cancelled' then redis.call('ZADD', KEYS[1] .. ':cancelled', string.match(id, '^(%d+)'), id) end
end
return 1`)
	for done := 0; done < n; done += chunk {
		if err := fill.Run(context.Background(), c, []string{dead}, min(chunk, n-done), done).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}

// fillRetrying adds n delayed jobs, every fifth waiting for a retry (with
// its marker).
func fillRetrying(tb testing.TB, c redis.UniversalClient, set, jobs string, n int) {
	tb.Helper()
	fill := redis.NewScript(`
local due = 4102444800000 -- 2100
for i = 1, tonumber(ARGV[1]) do
  local id = 'd-' .. i
  local f = {'v', '1', 'payload', 'job', 'enq', '0'}
  if i % 5 == 0 then
    f = {'v', '1', 'payload', 'job', 'enq', '0', 'attempt', '1', 'err', 'boom'}
    redis.call('SADD', KEYS[1] .. ':retrying', id)
  end
  redis.call('HSET', KEYS[2], id, cmsgpack.pack(f))
  redis.call('ZADD', KEYS[1], due + i, id)
end
return 1`)
	if err := fill.Run(context.Background(), c, []string{set, jobs}, n).Err(); err != nil {
		tb.Fatal(err)
	}
}
