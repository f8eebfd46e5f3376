package rdb

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/internal/wire"
)

// TestCluster_DerivedKeysDuringMigration stops a slot migration with the
// queue's retry markers (<delayed>:retrying, a key the scripts derive, not
// declare) moved to the target and every declared key still on the
// source: a retry (Move) and a promotion of a due job (Promote) are then
// refused with TRYAGAIN before they write anything, instead of failing
// half done (a retry's new copy written with the old entry still pending,
// a promoted job left in the delayed set too: each would run twice). On
// the target, a script whose declared keys have all arrived is refused the
// same way while the markers are still on the source. Once the slot has
// moved, both calls go through, each job once.
func TestCluster_DerivedKeysDuringMigration(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.ClusterOptions{Replicas: -1})
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cl.Close() })
	ctx := context.Background()
	cfg := Config{Prefix: redistest.Name(t), Name: "q", Group: "g"}
	q := New(cl, cfg)
	if !q.probe {
		t.Fatal("a queue on a *redis.ClusterClient runs its scripts without the slot probe")
	}
	k := q.Keys()
	if err := cl.XGroupCreateMkStream(ctx, k.Stream, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range []string{"due", "held"} {
		id, err := cl.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: job(p)}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if n := len(cl.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{k.Stream, ">"}, Block: -1}).Val()); n != 1 {
		t.Fatalf("read %d streams, want 1", n)
	}
	retry := func(p string) []any { return (&wire.Job{Payload: []byte(p), EnqMillis: 1, Attempt: 1}).Args() }
	// "due" fails and waits 1 ms for its retry: it is marked retrying, and
	// due by the time the slot migrates.
	if moved, err := q.Move(ctx, MoveParams{Consumer: "c", ID: ids[0], Delay: time.Millisecond, Settle: Settle{JobID: "due", Failed: true}, Fields: retry("due")}); err != nil || !moved {
		t.Fatalf("move before the migration = %v, %v", moved, err)
	}
	// Every key the two calls declare exists on the source, so that Redis
	// lets them run there: the dead-letter stream, the minute counters
	// and the memo hashes of the coming minute.
	if err := cl.XAdd(ctx, &redis.XAddArgs{Stream: k.Dead, Values: job("placeholder")}).Err(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, m := range []int64{Minute(now), Minute(now) + 1} {
		if err := cl.HSet(ctx, k.Stats(m), "placeholder", 1).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for at := now.Add(-memoBucket); at.Before(now.Add(time.Minute)); at = at.Add(memoBucket) {
		b := at.UnixMilli()
		b -= b % memoBucket.Milliseconds()
		if err := cl.HSet(ctx, memoKey(k.base, b), "placeholder", 1).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n := cl.SCard(ctx, k.Retrying).Val(); n != 1 {
		t.Fatalf("%d jobs marked retrying, want 1", n)
	}

	slot, err := c.KeySlot(ctx, k.Stream)
	if err != nil {
		t.Fatal(err)
	}
	from, err := c.MasterOfSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	var to *redistest.ClusterNode
	for _, n := range c.Nodes() {
		if n.ID != from.ID {
			to = n
			break
		}
	}
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	m, err := c.BeginMigration(mctx, slot, to)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MoveNamed(mctx, k.Retrying); err != nil {
		t.Fatal(err)
	}

	// The state both calls must leave alone, read on the source, which
	// still has every other key of the queue.
	src := redis.NewClient(&redis.Options{Addr: from.Addr()})
	t.Cleanup(func() { _ = src.Close() })
	state := func() (stream, delayed, jobs, pending int64) {
		t.Helper()
		p, err := src.XPending(ctx, k.Stream, "g").Result()
		if err != nil {
			t.Fatal(err)
		}
		return src.XLen(ctx, k.Stream).Val(), src.ZCard(ctx, k.Delayed).Val(), src.HLen(ctx, k.DelayedJobs).Val(), p.Count
	}
	s0, d0, j0, p0 := state()
	if s0 != 1 || d0 != 1 || j0 != 1 || p0 != 1 {
		t.Fatalf("before the calls: stream %d, delayed %d, delayed jobs %d, pending %d; want 1 each", s0, d0, j0, p0)
	}
	// The calls go to the source alone (a client of that node): each is
	// sent once, and its reply is the script's own.
	if New(src, cfg).probe {
		t.Error("a queue on a plain client runs its scripts with the slot probe")
	}
	scfg := cfg
	scfg.SlotProbe = true // as on the Cluster client
	qs := New(src, scfg)
	moved, err := qs.Move(ctx, MoveParams{Consumer: "c", ID: ids[1], Delay: time.Hour, Settle: Settle{JobID: "held", Failed: true}, Fields: retry("held")})
	if !Transient(err) || !redis.HasErrorPrefix(err, "TRYAGAIN") {
		t.Errorf("Move during the migration = %v, %v; want a TRYAGAIN error", moved, err)
	}
	n, dead, err := qs.Promote(ctx, PromoteParams{Limit: 10, Reason: "corrupt"})
	if !Transient(err) || !redis.HasErrorPrefix(err, "TRYAGAIN") {
		t.Errorf("Promote during the migration = %d, %v, %v; want a TRYAGAIN error", n, dead, err)
	}
	if s, d, j, p := state(); s != s0 || d != d0 || j != j0 || p != p0 {
		t.Errorf("the refused calls changed the queue: stream %d, delayed %d, delayed jobs %d, pending %d; want 1 each", s, d, j, p)
	}

	// On the target, where a client is sent on (ASK) once the source lacks
	// every key a call declares, Redis runs a script whose keys have all
	// arrived, and the probe refuses it while the markers are still away.
	if err := m.MoveNamed(mctx, k.Stream, k.Delayed); err != nil {
		t.Fatal(err)
	}
	tgt := redis.NewClient(&redis.Options{Addr: to.Addr(), PoolSize: 1})
	t.Cleanup(func() { _ = tgt.Close() })
	asking := func(script string) error {
		var cmd *redis.Cmd
		_, err := tgt.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			cmd = p.Do(ctx, "EVAL", script, 2, k.Stream, k.Delayed)
			return nil
		})
		if cmd.Err() != nil {
			return cmd.Err()
		}
		return err
	}
	if err := asking("return 1"); err != nil {
		t.Fatalf("a script of the moved keys on the target, with ASKING: %v", err)
	}
	if err := asking(withProbe("return 1")); !redis.HasErrorPrefix(err, "TRYAGAIN") {
		t.Errorf("the probe on the target, with ASKING = %v, want a TRYAGAIN error", err)
	}

	if err := m.Finish(mctx); err != nil {
		t.Fatal(err)
	}
	if moved, err := q.Move(ctx, MoveParams{Consumer: "c", ID: ids[1], Delay: time.Hour, Settle: Settle{JobID: "held", Failed: true}, Fields: retry("held")}); err != nil || !moved {
		t.Fatalf("Move after the migration = %v, %v", moved, err)
	}
	if n, _, err := q.Promote(ctx, PromoteParams{Limit: 10, Reason: "corrupt"}); err != nil || n != 1 {
		t.Fatalf("Promote after the migration = %d, %v; want 1 job", n, err)
	}
	if got := streamPayloads(t, cl, k.Stream); len(got) != 1 || got[0] != "due" {
		t.Errorf("stream after the migration = %q, want [due]", got)
	}
	if p := cl.XPending(ctx, k.Stream, "g").Val(); p.Count != 0 {
		t.Errorf("%d entries pending after the migration, want 0", p.Count)
	}
	if d := cl.ZCard(ctx, k.Delayed).Val(); d != 1 {
		t.Errorf("%d jobs delayed after the migration, want 1 (held)", d)
	}
	if r := cl.SMembers(ctx, k.Retrying).Val(); len(r) != 1 {
		t.Errorf("retry markers after the migration = %q, want held's alone", r)
	}
}

// streamPayloads returns the payloads of the entries of stream key.
func streamPayloads(t *testing.T, c redis.UniversalClient, key string) []string {
	t.Helper()
	msgs, err := c.XRange(context.Background(), key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, m.Values["payload"].(string))
	}
	return out
}
