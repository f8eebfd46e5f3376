package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// setupCluster starts a cluster with the default shape and a cluster client
// for it, closed in t.Cleanup.
func setupCluster(t *testing.T) (*Cluster, *redis.ClusterClient) {
	t.Helper()
	start := time.Now()
	c := StartCluster(t, ClusterOptions{})
	t.Logf("cluster of 3 masters and 3 replicas ready after %v", time.Since(start).Round(time.Millisecond))
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = rdb.Close() })
	return c, rdb
}

// nodeFlags returns the flags that node gives itself in CLUSTER NODES.
func nodeFlags(ctx context.Context, t *testing.T, n *ClusterNode) []string {
	t.Helper()
	view, err := n.clusterNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return view.self().flags
}

func TestStartCluster_KillMaster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, rdb := setupCluster(t)
	if got := len(c.Nodes()); got != 6 {
		t.Fatalf("Nodes() has %d nodes, want 6", got)
	}

	// Keys land on every master.
	for i := range 30 {
		if err := rdb.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
			t.Fatalf("SET k%d through the cluster client: %v", i, err)
		}
	}
	masters := map[string]bool{}
	for i := range 30 {
		m, err := c.MasterOfKey(ctx, fmt.Sprint("k", i))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.ID] = true
	}
	if len(masters) != 3 {
		t.Errorf("30 keys are spread over %d masters, want 3", len(masters))
	}

	// The master of k0 holds it, and its replica acknowledged it (WAIT
	// counts this connection's writes, so write once more directly).
	victim, err := c.MasterOfKey(ctx, "k0")
	if err != nil {
		t.Fatal(err)
	}
	direct := newTestClient(t, &redis.Options{Addr: victim.Addr()})
	if err := direct.Set(ctx, "k0", "acked", 0).Err(); err != nil {
		t.Fatalf("SET k0 on its master %s: %v", victim.Addr(), err)
	}
	if n, err := direct.Wait(ctx, 1, testTimeout).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on %s = %d, %v", victim.Addr(), n, err)
	}

	start := time.Now()
	c.Kill(victim)
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("a replica took over from the killed master after %v", time.Since(start).Round(time.Millisecond))
	promoted, err := c.MasterOfKey(ctx, "k0")
	if err != nil {
		t.Fatal(err)
	}
	if promoted == victim || !promoted.Running() {
		t.Fatalf("MasterOfKey(k0) after the kill = %s, want a running replacement", promoted.Addr())
	}
	fresh := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = fresh.Close() })
	if got, err := fresh.Get(ctx, "k0").Result(); err != nil || got != "acked" {
		t.Errorf("GET k0 through a new cluster client after the failover = %q, %v; want \"acked\"", got, err)
	}
	if err := fresh.Set(ctx, "k0", "after", 0).Err(); err != nil {
		t.Errorf("SET k0 through a new cluster client after the failover: %v", err)
	}
	// A cluster client that knew the old master keeps dialling it: a failed
	// dial makes go-redis retry and mark the node failing, but it reloads the
	// slot map only on MOVED/ASK or when the map is older than
	// ClusterStateReloadInterval (60 s by default). ReloadState asks for a
	// reload in the background.
	start = time.Now()
	rdb.ReloadState(ctx)
	WaitFor(t, TopologyTimeout, "the old cluster client to find the new master after ReloadState", func() bool {
		got, err := rdb.Get(ctx, "k0").Result()
		return err == nil && got == "after"
	})
	t.Logf("the cluster client that knew the killed master found the new one after %v", time.Since(start).Round(time.Millisecond))

	// The killed node comes back with its ID, as a replica of its successor.
	victim.Restart()
	WaitFor(t, TopologyTimeout, "the restarted node to rejoin as a replica", func() bool {
		return strings.Contains(strings.Join(nodeFlags(ctx, t, victim), ","), "slave")
	})
	if err := victim.WaitInSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCluster_MigrateSlot(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, rdb := setupCluster(t)

	// 250 keys in one slot, thanks to a hash tag.
	const n = 250
	key := func(i int) string { return fmt.Sprintf("{mig}:%d", i) }
	for i := range n {
		if err := rdb.Set(ctx, key(i), i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key(i), err)
		}
	}
	slot, err := c.KeySlot(ctx, key(0))
	if err != nil {
		t.Fatal(err)
	}
	from, err := c.MasterOfSlot(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	var to *ClusterNode
	for _, node := range c.Nodes() {
		if node != from && strings.Contains(strings.Join(nodeFlags(ctx, t, node), ","), "master") {
			to = node
			break
		}
	}
	checkAll := func(when string, want int) {
		t.Helper()
		for i := range want {
			if got, err := rdb.Get(ctx, key(i)).Int(); err != nil || got != i {
				t.Fatalf("%s: GET %s = %d, %v; want %d", when, key(i), got, err, i)
			}
		}
	}

	m, err := c.BeginMigration(ctx, slot, to)
	if err != nil {
		t.Fatal(err)
	}
	if m.Slot() != slot || m.From() != from || m.To() != to {
		t.Fatalf("migration of slot %d from %s to %s, want %d from %s to %s",
			m.Slot(), m.From().Addr(), m.To().Addr(), slot, from.Addr(), to.Addr())
	}
	moved, err := m.MoveKeys(ctx, 100)
	if err != nil || moved != 100 {
		t.Fatalf("MoveKeys(100) = %d, %v; want 100", moved, err)
	}
	// Half-way: the source serves what it has, the target (via ASK) the
	// rest, and a new key goes to the target.
	checkAll("during the migration", n)
	if err := rdb.Set(ctx, key(n), n, 0).Err(); err != nil {
		t.Fatalf("SET a new key during the migration: %v", err)
	}
	if got, err := newTestClient(t, &redis.Options{Addr: from.Addr()}).ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || got != n-100 {
		t.Errorf("COUNTKEYSINSLOT on the source half-way = %d, %v; want %d", got, err, n-100)
	}

	if err := m.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if owner, err := c.MasterOfSlot(ctx, slot); err != nil || owner != to {
		t.Fatalf("MasterOfSlot(%d) after Finish = %v, %v; want %s", slot, owner, err, to.Addr())
	}
	checkAll("after the migration", n+1)
	target := newTestClient(t, &redis.Options{Addr: to.Addr()})
	if got, err := target.ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || got != n+1 {
		t.Errorf("COUNTKEYSINSLOT on the target = %d, %v; want %d", got, err, n+1)
	}
	if got, err := target.Get(ctx, key(0)).Int(); err != nil || got != 0 {
		t.Errorf("GET %s directly on the target = %d, %v; want 0 without a redirect", key(0), got, err)
	}

	// And back in one call.
	if err := c.MigrateSlot(ctx, slot, from); err != nil {
		t.Fatal(err)
	}
	checkAll("after migrating back", n+1)
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStartTopology_BadOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		start func(tb testing.TB)
		want  []string
	}{
		{
			name:  "sentinel quorum",
			start: func(tb testing.TB) { StartSentinel(tb, SentinelOptions{Quorum: 4}) },
			want:  []string{"StartSentinel", "Quorum 4"},
		},
		{
			name:  "cluster masters",
			start: func(tb testing.TB) { StartCluster(tb, ClusterOptions{Masters: 2}) },
			want:  []string{"StartCluster", "Masters 2", "3 or more"},
		},
		{
			name:  "cluster replicas",
			start: func(tb testing.TB) { StartCluster(tb, ClusterOptions{Replicas: -3}) },
			want:  []string{"StartCluster", "Replicas -3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg := runFake(t, func(tb testing.TB) {
				tt.start(tb)
				tb.Errorf("start returned, want a fatal failure")
			})
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("fatal message %q does not mention %q", msg, w)
				}
			}
		})
	}
}

func TestParseClusterNodes(t *testing.T) {
	t.Parallel()
	const text = "07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected\n" +
		"67ed 127.0.0.1:30002@40002,host.example master - 0 1426238316232 2 connected 5461-10922\n" +
		"292f 127.0.0.1:30003@40003 master,fail - 0 1426238318243 3 connected 10923-16383\n" +
		"e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5459 5460 [5460->-67ed]\n"
	view, err := parseClusterNodes(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(view) != 4 {
		t.Fatalf("%d entries, want 4", len(view))
	}
	self := view.self()
	if self.id != "e7d1" || self.addr != "127.0.0.1:30001" || !self.has("master") || len(self.slots) != 2 || self.slots[1] != [2]int{5460, 5460} {
		t.Errorf("self = %+v", self)
	}
	if view[1].addr != "127.0.0.1:30002" || view[0].master != "e7d1" {
		t.Errorf("entries = %+v", view)
	}
	if _, err := view.owners(); err == nil || !strings.Contains(err.Error(), "fail") {
		t.Errorf("owners() with a failed master: err = %v, want it named", err)
	}
	view[2].flags = []string{"master"}
	owners, err := view.owners()
	if err != nil {
		t.Fatal(err)
	}
	for slot, want := range map[int]string{0: "e7d1", 5460: "e7d1", 5461: "67ed", 16383: "292f"} {
		if owners[slot] != want {
			t.Errorf("owner of slot %d = %s, want %s", slot, owners[slot], want)
		}
	}
	view[2].slots = nil
	if _, err := view.owners(); err == nil || !strings.Contains(err.Error(), "slot 10923 has no master") {
		t.Errorf("owners() with uncovered slots: err = %v", err)
	}
	for _, bad := range []string{"x 1 2", "a b master - 0 0 1 connected 9-1", "a b master - 0 0 1 connected 16384"} {
		if _, err := parseClusterNodes(bad); err == nil {
			t.Errorf("parseClusterNodes(%q) succeeded, want an error", bad)
		}
	}
}
