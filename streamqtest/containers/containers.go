// Package containers adds a Docker fallback to the Redis that package
// streamqtest finds for a test binary: when neither REDIS_ADDR nor a
// redis-server binary gives one, [Main] starts a redis:7 container with
// testcontainers-go.
//
//	func TestMain(m *testing.M) { os.Exit(containers.Main(m)) }
//
// It is a package of its own because testcontainers-go and the Docker
// client are large (over a hundred packages from some forty modules): only test binaries
// that import this package link them; streamqtest alone does not.
package containers

import (
	"testing"

	"github.com/streamq/streamq/internal/rediscontainer"
	"github.com/streamq/streamq/internal/redistest"
)

// Main is streamqtest.Main with a last resort: it finds or starts the Redis
// of a test binary, runs its tests and stops what it started. It uses the
// server at REDIS_ADDR (host:port) if that is set; else a private
// redis-server (from PATH or /usr/bin) on a free loopback port, without
// persistence; else a redis:7 container started with testcontainers-go, if a
// Docker engine runs, removed when the tests end. If none works, it prints
// how to get one and returns 1 without running the tests.
// streamqtest.NewRedis and streamqtest.NewQueue then use that server (see
// package [github.com/streamq/streamq/streamqtest]).
func Main(m *testing.M) int { return redistest.RunWithoutLeakCheck(m, rediscontainer.Start) }
