package streamqtest

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
)

// Main finds or starts the Redis of a test binary, runs its tests and stops
// what it started. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(streamqtest.Main(m)) }
//
// It uses the server at REDIS_ADDR (host:port) if that is set; else a
// private redis-server (from PATH or /usr/bin) on a free loopback port,
// without persistence, killed when the tests end. If neither works, it
// prints how to get one and returns 1 without running the tests. For a
// Docker fallback (a redis:7 container), use containers.Main from package
// [github.com/streamq/streamq/streamqtest/containers] instead.
//
// Main is optional: without it, the first [NewRedis] finds a server the same
// way, and a private redis-server it started is killed by the kernel when
// the test binary exits (on Linux; elsewhere it would outlive the tests, so
// use Main there).
func Main(m *testing.M) int { return redistest.RunWithoutLeakCheck(m) }

// Redis is one test's share of the test binary's Redis: a client and a key
// prefix that no other test uses, whose keys are deleted when the test ends.
// Tests that each use their own Redis run in parallel against one server.
type Redis struct {
	// Addr is the server's address, host:port, for tests that make clients
	// of their own.
	Addr string
	// Client is a client of the server, closed when the test ends.
	Client *redis.Client
	// KeyPrefix is the test's own key prefix: pass it as
	// QueueConfig.KeyPrefix (as [Redis.NewQueue] does), so that the test's
	// keys are apart from every other test's and are cleaned up.
	KeyPrefix string

	tb testing.TB
}

// NewRedis returns the test's share of the test binary's Redis (see
// [Main]), or fails the test with a message saying how to get a Redis. When
// the test ends, it deletes the keys under the test's KeyPrefix (with a
// bounded SCAN, never FLUSHDB, so other tests' keys are left alone) and
// closes the client.
func NewRedis(tb testing.TB) *Redis {
	tb.Helper()
	addr, err := redistest.SharedAddr()
	if err != nil {
		tb.Fatalf("streamqtest: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = c.Close() })
	r := &Redis{Addr: addr, Client: c, KeyPrefix: "sqt-" + redistest.Name(tb), tb: tb}
	// Registered after the client's Close, so it runs before it.
	redistest.DeleteKeysAtCleanup(tb, c, r.KeyPrefix+":*")
	return r
}

// NewQueue returns the queue name of the test's Redis, under the test's
// KeyPrefix. cfg may be nil; its KeyPrefix must be empty. An invalid
// configuration fails the test.
func (r *Redis) NewQueue(name string, cfg *streamq.QueueConfig) *streamq.Queue {
	r.tb.Helper()
	var c streamq.QueueConfig
	if cfg != nil {
		c = *cfg
	}
	if c.KeyPrefix != "" {
		r.tb.Fatalf("streamqtest: NewQueue: QueueConfig.KeyPrefix is %q: leave it empty, NewQueue uses the test's own prefix %q (Redis.KeyPrefix)", c.KeyPrefix, r.KeyPrefix)
	}
	c.KeyPrefix = r.KeyPrefix
	q, err := streamq.NewQueue(r.Client, name, &c)
	if err != nil {
		r.tb.Fatalf("streamqtest: NewQueue: %v", err)
	}
	return q
}

// NewQueue is NewRedis(tb).NewQueue(name, cfg): a queue on the test
// binary's Redis under a key prefix of the test's own.
func NewQueue(tb testing.TB, name string, cfg *streamq.QueueConfig) *streamq.Queue {
	tb.Helper()
	return NewRedis(tb).NewQueue(name, cfg)
}
