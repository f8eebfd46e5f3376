package dashboard

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

// countXLen counts the XLEN commands of a stream in the pipelines a client
// sends: one per overview read.
type countXLen struct{ n atomic.Int64 }

func (*countXLen) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*countXLen) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (c *countXLen) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if k, _ := cmd.Args()[len(cmd.Args())-1].(string); cmd.Name() == "xlen" && strings.HasSuffix(k, ":stream") {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// Requests within overviewTTL share one read of a queue's overview, also
// when they come at once; a later request, or one after an action forgot
// it, reads again and sees the change.
func TestOverviews_Shared(t *testing.T) {
	t.Parallel()
	c := redistest.NewClient(t)
	prefix := "dov-" + redistest.Name(t)
	redistest.DeleteKeysAtCleanup(t, c, prefix+":*")
	ctx := context.Background()
	q, err := streamq.NewQueue(c, "jobs", &streamq.QueueConfig{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	counter := &countXLen{}
	ic := redis.NewClient(c.Options())
	t.Cleanup(func() { _ = ic.Close() })
	ic.AddHook(counter)
	in, err := inspect.New(ic, &inspect.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	iq, err := in.Queue(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	var mu sync.Mutex
	ovs := &overviews{now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}

	// 20 tabs at once: one read.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if ov, err := ovs.get(ctx, iq); err != nil || ov.Waiting != 1 {
				t.Errorf("get = %+v, %v; want 1 waiting", ov, err)
			}
		})
	}
	wg.Wait()
	if n := counter.n.Load(); n != 1 {
		t.Fatalf("%d overview reads for 20 requests at once, want 1", n)
	}
	// A copy per caller.
	a, _ := ovs.get(ctx, iq)
	a.Waiting = 99
	if b, _ := ovs.get(ctx, iq); b.Waiting != 1 {
		t.Fatalf("a caller's change leaked into the shared overview: %+v", b)
	}
	// Within the TTL the shared read is served although the queue changed.
	if _, err := p.Enqueue(ctx, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if ov, _ := ovs.get(ctx, iq); ov.Waiting != 1 || counter.n.Load() != 1 {
		t.Fatalf("within the TTL: %d waiting after %d reads, want the shared read (1 waiting, 1 read)", ov.Waiting, counter.n.Load())
	}
	// After the TTL, a new read.
	mu.Lock()
	now = now.Add(overviewTTL)
	mu.Unlock()
	if ov, _ := ovs.get(ctx, iq); ov.Waiting != 2 || counter.n.Load() != 2 {
		t.Fatalf("after the TTL: %d waiting after %d reads, want 2 and 2", ov.Waiting, counter.n.Load())
	}
	// An action forgets it.
	if _, err := p.Enqueue(ctx, []byte("c")); err != nil {
		t.Fatal(err)
	}
	ovs.forget("jobs")
	if ov, _ := ovs.get(ctx, iq); ov.Waiting != 3 || counter.n.Load() != 3 {
		t.Fatalf("after forget: %d waiting after %d reads, want 3 and 3", ov.Waiting, counter.n.Load())
	}
}
