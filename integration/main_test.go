// Package integration tests streamq against a real Redis: REDIS_ADDR if set,
// else a private redis-server, else a testcontainers-go container.
package integration

import (
	"os"
	"testing"

	"github.com/streamq/streamq/internal/rediscontainer"
	"github.com/streamq/streamq/internal/redistest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(dedupChildEnv); spec != "" { // a child of TestDedup_ConcurrentProcesses
		os.Exit(dedupChild(spec))
	}
	os.Exit(redistest.Run(m, rediscontainer.Start))
}
