package integration

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
)

// replicatedSetup starts a master without replicas for this test alone and
// returns a client of it, a queue and a producer that waits for one replica
// with the given ReplicaRetry (ReplicaTimeout 100 ms).
func replicatedSetup(t *testing.T, retry time.Duration) (*redistest.Server, *redis.Client, *streamq.Queue, *streamq.Producer) {
	t.Helper()
	master := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	q, err := streamq.NewQueue(rdb, redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, &streamq.ProducerConfig{MinReplicas: 1, ReplicaTimeout: 100 * time.Millisecond, ReplicaRetry: retry})
	if err != nil {
		t.Fatal(err)
	}
	return master, rdb, q, p
}

// scriptSends returns how many scripts the server ran without an error
// (EVALSHA and EVAL calls less their failed calls, such as NOSCRIPT: INFO
// commandstats).
func scriptSends(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		stats := map[string]int{}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if i, err := strconv.Atoi(v); err == nil {
				stats[k] = i
			}
		}
		n += stats["calls"] - stats["failed_calls"]
	}
	return n
}

// TestProducer_ReplicaRetry_RidesMissingReplica enqueues with MinReplicas 1
// on a master that has no replica, as a new master after a failover has
// none until the old one resyncs: Enqueue keeps sending the job again,
// with the same idempotency token, and returns nil once a replica started
// and holds it; the job is stored once.
func TestProducer_ReplicaRetry_RidesMissingReplica(t *testing.T) {
	t.Parallel()
	master, rdb, q, p := replicatedSetup(t, 0) // the default retry
	ctx := context.Background()
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		id, err := p.Enqueue(ctx, []byte("ride"))
		done <- result{id, err}
	}()
	// Wait until the first send was not replicated and a second was made.
	redistest.WaitFor(t, 10*time.Second, "the enqueue to be sent twice", func() bool { return scriptSends(t, rdb) >= 2 })
	select {
	case r := <-done:
		t.Fatalf("Enqueue returned (%q, %v) without a replica; want it to wait for one", r.id, r.err)
	default:
	}
	replica := redistest.StartReplica(t, master)
	var r result
	select {
	case r = <-done:
	case <-time.After(streamq.DefaultReplicaRetry):
		t.Fatal("Enqueue did not return once a replica was in sync")
	}
	if r.err != nil {
		t.Fatalf("Enqueue = %q, %v; want success once the replica holds the job", r.id, r.err)
	}
	stream := core.Of(q).Keys.Stream
	entries, err := rdb.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].ID != r.id {
		t.Fatalf("the stream holds %v after %d sends; want the one entry %s", entries, scriptSends(t, rdb), r.id)
	}
	rr := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { _ = rr.Close() })
	if got, err := rr.XRange(ctx, stream, r.id, r.id).Result(); err != nil || len(got) != 1 {
		t.Fatalf("the replica holds %v, %v; want the job %s", got, err, r.id)
	}
}

// TestProducer_ReplicaRetry_Bounded checks that ReplicaRetry bounds the
// sends of a write that is never replicated, that -1 sends it once, and
// that either way the job is stored once and returned with its ID and
// ErrNotReplicated.
func TestProducer_ReplicaRetry_Bounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		retry     time.Duration
		minSends  int
		maxSends  int
		minTook   time.Duration
		ctxCancel time.Duration // cancel the call's context after this (0: never)
	}{
		{name: "disabled", retry: -1, minSends: 1, maxSends: 1},
		// Bounds with room for a loaded machine: a first send can take
		// several hundred milliseconds there (a dial, NOSCRIPT, two WAITs).
		{name: "two seconds", retry: 2 * time.Second, minSends: 2, maxSends: 40, minTook: 1900 * time.Millisecond},
		{name: "context ends first", retry: time.Minute, minSends: 2, maxSends: 40, minTook: 2900 * time.Millisecond, ctxCancel: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, rdb, q, p := replicatedSetup(t, tt.retry)
			ctx := context.Background()
			if tt.ctxCancel > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctxCancel)
				defer cancel()
			}
			start := time.Now()
			id, err := p.Enqueue(ctx, []byte("never replicated"))
			took := time.Since(start)
			var nr *streamq.NotReplicatedError
			if !errors.As(err, &nr) || nr.Acked != 0 || nr.Want != 1 || id == "" {
				t.Fatalf("Enqueue = %q, %v; want the ID and a NotReplicatedError (0 of 1)", id, err)
			}
			if took < tt.minTook || took > tt.retry.Abs()+10*time.Second {
				t.Errorf("Enqueue took %v; want at least %v and about ReplicaRetry (%v)", took, tt.minTook, tt.retry)
			}
			sends := scriptSends(t, rdb)
			if sends < tt.minSends || sends > tt.maxSends {
				t.Errorf("the enqueue was sent %d times; want %d to %d", sends, tt.minSends, tt.maxSends)
			}
			n, err := rdb.XLen(context.Background(), core.Of(q).Keys.Stream).Result()
			if err != nil || n != 1 {
				t.Fatalf("XLEN = %d, %v after %d sends; want the job stored once", n, err, sends)
			}
		})
	}
}

func TestNewProducer_ReplicaRetryValidation(t *testing.T) {
	t.Parallel()
	q, err := streamq.NewQueue(redistest.NewClient(t), redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = streamq.NewProducer(q, &streamq.ProducerConfig{MinReplicas: 1, ReplicaRetry: -2 * time.Second})
	var ce *streamq.ConfigError
	if !errors.As(err, &ce) || ce.Field != "ProducerConfig.ReplicaRetry" || !strings.Contains(ce.Reason, "use -1") {
		t.Fatalf("ReplicaRetry -2s: err = %v; want a ConfigError on ProducerConfig.ReplicaRetry saying to use -1", err)
	}
}

// failoverWarning is a part of the warning of core.Queue.WarnFailoverLoss.
const failoverWarning = "min-replicas-to-write 0: a failover can lose jobs"

// TestConsumer_WarnsOfFailoverLoss checks the warning a consumer logs once
// when it starts on a master whose replicas a failover could lose jobs to
// (min-replicas-to-write 0), and that it says nothing once the master
// refuses writes without a replica, or has none.
func TestConsumer_WarnsOfFailoverLoss(t *testing.T) {
	t.Parallel()
	master := redistest.StartServer(t)
	redistest.StartReplica(t, master)
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	q, err := streamq.NewQueue(rdb, redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &relLogs{}
	handled := make(chan struct{}, 1)
	c := relConsumer(t, q, func(context.Context, *streamq.Message) error { handled <- struct{}{}; return nil },
		streamq.ConsumerConfig{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	run := relRun(t, c)
	redistest.WaitFor(t, relWait, "the consumer's warning of failover loss", func() bool {
		return strings.Contains(logs.String(), failoverWarning)
	})
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(context.Background(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handled:
	case <-time.After(relWait):
		t.Fatal("the job was not handled")
	}
	run.stop()
	if n := strings.Count(logs.String(), failoverWarning); n != 1 {
		t.Fatalf("the warning was logged %d times; want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "replicas=1 min_replicas_to_write=0") {
		t.Errorf("the warning does not name the replicas and the setting:\n%s", logs.String())
	}

	ctx := context.Background()
	quiet := func(name string, q *streamq.Queue) {
		t.Helper()
		l := &relLogs{}
		core.Of(q).WarnFailoverLoss(ctx, slog.New(slog.NewTextHandler(l, nil)))
		if l.String() != "" {
			t.Errorf("%s: WarnFailoverLoss logged %q; want nothing", name, l.String())
		}
	}
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	quiet("min-replicas-to-write 1", q)
	alone, err := streamq.NewQueue(redistest.NewClient(t), redistest.Name(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	quiet("no replica", alone)
}
