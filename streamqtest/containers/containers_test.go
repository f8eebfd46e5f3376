package containers_test

import (
	"os"
	"testing"

	"github.com/streamq/streamq/streamqtest"
	"github.com/streamq/streamq/streamqtest/containers"
)

// TestMain uses containers.Main as users do. This machine's tests find a
// redis-server (or REDIS_ADDR) first, so no container starts here; the
// order of the fallbacks is tested in internal/redistest.
func TestMain(m *testing.M) { os.Exit(containers.Main(m)) }

// A test binary whose TestMain is containers.Main has a Redis for
// streamqtest.NewRedis.
func TestNewRedis_UnderContainersMain(t *testing.T) {
	t.Parallel()
	r := streamqtest.NewRedis(t)
	if err := r.Client.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("the Redis at %s does not answer: %v", r.Addr, err)
	}
}
