package inspect_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
)

// A consumer that was never delivered a job is alive from its first
// control tick, with its host, PID, concurrency, version and start time; one
// that stops leaves the listing at once; one that crashed is listed as dead,
// not counted, and pruned.
func TestQueue_ConsumerHeartbeats(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	c, err := streamq.NewConsumer(e.q, streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil }),
		&streamq.ConsumerConfig{Name: "idle-one", Concurrency: 3, ControlInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	redistest.WaitFor(t, 10*time.Second, "the idle consumer counted as alive", func() bool {
		o, err := e.iq.Overview(ctx)
		return err == nil && o.Consumers == 1
	})
	cs, err := e.iq.Consumers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(cs, func(c inspect.Consumer) bool { return c.Name == "idle-one" })
	if i < 0 {
		t.Fatalf("consumers %+v: want idle-one", cs)
	}
	host, _ := os.Hostname()
	got := cs[i]
	if !got.Alive || got.Kind != "consumer" || got.Host != host || got.PID != os.Getpid() || got.Concurrency != 3 ||
		got.Version != streamq.Version || got.Started.IsZero() || time.Since(got.LastSeen) > inspect.LiveWithin {
		t.Fatalf("consumer %+v: want alive, host %s, pid %d, concurrency 3, version %s, a start time and a recent heartbeat",
			got, host, os.Getpid(), streamq.Version)
	}

	// A crashed consumer: its heartbeat stopped an hour ago.
	old := time.Now().Add(-time.Hour)
	if err := e.c.ZAdd(ctx, e.key("workers"), redis.Z{Score: float64(old.UnixMilli()), Member: "crashed"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Set(ctx, e.key("hb:crashed"), `{"role":"consumer","host":"h2","pid":7,"concurrency":8,"version":"0.1.0","started":1,"every":1000}`, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	o, err := e.iq.Overview(ctx)
	if err != nil || o.Consumers != 1 {
		t.Fatalf("overview consumers = %v, %v; want 1 (the crashed one is not alive)", o, err)
	}
	cs, _ = e.iq.Consumers(ctx)
	i = slices.IndexFunc(cs, func(c inspect.Consumer) bool { return c.Name == "crashed" })
	if i < 0 || cs[i].Alive || cs[i].Host != "h2" || cs[i].PID != 7 {
		t.Fatalf("consumers %+v: want crashed listed as dead with its host and PID", cs)
	}
	gone, err := e.iq.PruneConsumers(ctx, 10*time.Minute)
	if err != nil || !slices.Contains(gone, "crashed") || slices.Contains(gone, "idle-one") {
		t.Fatalf("PruneConsumers = %v, %v; want crashed pruned, idle-one kept", gone, err)
	}
	if n, _ := e.c.Exists(ctx, e.key("hb:crashed")).Result(); n != 0 {
		t.Error("the crashed consumer's heartbeat record is still there after pruning")
	}

	// A clean stop removes the heartbeat.
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	done <- nil // for the cleanup
	cs, err = e.iq.Consumers(ctx)
	// Its heartbeat is gone. (Redis also drops it from the group, as it
	// holds nothing; Valkey 8.0 may keep it there a while, listed from the
	// group without a heartbeat.)
	if err != nil || slices.ContainsFunc(cs, func(c inspect.Consumer) bool { return c.Name == "idle-one" && (c.PID != 0 || c.Host != "") }) {
		t.Fatalf("consumers after a clean stop = %+v, %v; want idle-one's heartbeat gone", cs, err)
	}
	if o, err := e.iq.Overview(ctx); err != nil || o.Consumers != 0 {
		t.Fatalf("overview after a clean stop = %+v, %v; want 0 consumers", o, err)
	}
}
