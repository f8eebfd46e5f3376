package containers_test

import (
	"os"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/streamqtest"
	"github.com/streamq/streamq/streamqtest/containers"
)

// TestMain uses containers.Main as users do. This machine's tests find a
// redis-server (or REDIS_ADDR) first, so no container starts here; the
// fallback's order is tested in internal/redistest.
func TestMain(m *testing.M) { os.Exit(containers.Main(m)) }

// A test binary whose TestMain is containers.Main has a Redis for
// streamqtest.NewQueue.
func TestNewQueue_UnderContainersMain(t *testing.T) {
	t.Parallel()
	q := streamqtest.NewQueue(t, "jobs", nil)
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(t.Context(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	streamqtest.RequireEnqueuedN(t.Context(), t, q, 1)
}
