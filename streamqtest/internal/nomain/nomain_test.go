// Package nomain tests streamqtest in a test binary without a TestMain, as
// a user who skips streamqtest.Main has: the first NewRedis finds or starts
// the server, and every test shares it.
package nomain

import (
	"sync"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/streamqtest"
)

func TestNewRedis_WithoutMain(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		addrs = map[string]bool{}
	)
	for _, name := range []string{"a", "b", "c"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q := streamqtest.NewQueue(t, "jobs", nil)
			p, err := streamq.NewProducer(q, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Enqueue(t.Context(), []byte(name)); err != nil {
				t.Fatal(err)
			}
			// Each test sees only its own job, though they share the queue name.
			streamqtest.RequireEnqueuedN(t.Context(), t, q, 1)
			streamqtest.RequireEnqueued(t.Context(), t, q, streamqtest.Want{Payload: []byte(name)})
			mu.Lock()
			addrs[streamqtest.NewRedis(t).Addr] = true
			mu.Unlock()
		})
	}
	t.Cleanup(func() {
		if len(addrs) != 1 {
			t.Errorf("tests used servers %v, want one shared server", addrs)
		}
	})
}
