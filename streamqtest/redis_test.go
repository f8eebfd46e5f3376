package streamqtest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/streamqtest"
)

// TestNewRedis_CleansUp: a test's keys are gone when it ends, another
// test's keys are left alone.
func TestNewRedis_CleansUp(t *testing.T) {
	t.Parallel()
	other := streamqtest.NewRedis(t)
	if err := other.Client.Set(t.Context(), other.KeyPrefix+":keep", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var prefix string
	t.Run("sub", func(t *testing.T) {
		r := streamqtest.NewRedis(t)
		prefix = r.KeyPrefix
		if !strings.HasPrefix(prefix, "sqt-TestNewRedis_CleansUp_sub-") {
			t.Errorf("KeyPrefix = %q, want one made of the test name", prefix)
		}
		q := r.NewQueue("jobs", nil)
		p, err := streamq.NewProducer(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Enqueue(t.Context(), []byte("x")); err != nil {
			t.Fatal(err)
		}
		streamqtest.RequireEnqueuedN(t.Context(), t, q, 1)
	})
	ctx := context.Background()
	keys, _, err := other.Client.Scan(ctx, 0, prefix+":*", 1000).Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("keys of the ended test: %v, %v; want none", keys, err)
	}
	if n := other.Client.Exists(ctx, other.KeyPrefix+":keep").Val(); n != 1 {
		t.Error("another test's key was deleted")
	}
	if other.Addr == "" || other.Client.Ping(ctx).Err() != nil {
		t.Errorf("Redis at %q does not answer", other.Addr)
	}
}

func TestRedis_NewQueue_Invalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, queue string
		cfg         *streamq.QueueConfig
		msg         string
	}{
		{"own prefix", "q", &streamq.QueueConfig{KeyPrefix: "mine"}, "leave it empty"},
		{"bad name", "bad name", nil, "queue name"},
	} {
		f := runFake(t, func(tb testing.TB) { streamqtest.NewQueue(tb, tc.queue, tc.cfg) })
		if msg := f.message(); !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: fatal message %q, want %q in it", tc.name, msg, tc.msg)
		}
	}
}
