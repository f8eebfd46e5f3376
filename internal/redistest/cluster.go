package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// DefaultClusterMasters is the default number of masters in
	// [StartCluster], and the fewest that redis-cli --cluster create accepts.
	DefaultClusterMasters = 3
	// DefaultClusterReplicas is the default number of replicas per master.
	DefaultClusterReplicas = 1
	// DefaultNodeTimeout is the default cluster-node-timeout: how long a node
	// must not answer before the others think it failed and a replica takes
	// over.
	DefaultNodeTimeout = time.Second
	// DefaultMigrateBatch is how many keys [Migration.Finish] moves with one
	// MIGRATE, and what [Migration.MoveKeys] moves for a batch of 0.
	DefaultMigrateBatch = 100

	// ClusterSlots is the number of hash slots of a Redis Cluster.
	ClusterSlots = 16384

	// createTimeout bounds redis-cli --cluster create, which waits for the
	// nodes to agree on their configuration.
	createTimeout = time.Minute
	// migrateTimeout is MIGRATE's own bound on talking to the target node.
	migrateTimeout = 5 * time.Second
)

// ClusterOptions shape the cluster of [StartCluster]. The zero value is
// three masters with one replica each.
type ClusterOptions struct {
	// Masters is the number of masters, which share the slots evenly. At
	// least 3. Defaults to DefaultClusterMasters.
	Masters int
	// Replicas is the number of replicas of each master. -1 means none
	// (then no master can fail over). Defaults to DefaultClusterReplicas.
	Replicas int
	// NodeTimeout is the nodes' cluster-node-timeout. Defaults to
	// DefaultNodeTimeout.
	NodeTimeout time.Duration
}

// withDefaults returns a copy of o with defaults applied, or an error that
// says which field is wrong.
func (o ClusterOptions) withDefaults() (ClusterOptions, error) {
	if o.Masters == 0 {
		o.Masters = DefaultClusterMasters
	}
	var err error
	if o.Replicas, err = replicaCount(o.Replicas, DefaultClusterReplicas); err != nil {
		return o, err
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = DefaultNodeTimeout
	}
	switch {
	case o.Masters < 3:
		return o, fmt.Errorf("bad Masters %d: redis-cli --cluster create needs 3 or more", o.Masters)
	case o.NodeTimeout < time.Millisecond:
		return o, fmt.Errorf("bad NodeTimeout %v: want 1ms or more", o.NodeTimeout)
	}
	return o, nil
}

// ClusterNode is one node of a [Cluster]: its process and its cluster ID.
type ClusterNode struct {
	*Server
	// ID is the node's cluster ID (CLUSTER MYID). It survives a
	// [Server.Restart]: the node keeps its nodes.conf.
	ID string
}

// Cluster is a Redis Cluster owned by one test, from [StartCluster]. Its
// methods are safe for concurrent use; those that take a context return an
// error rather than fail the test, so they may run beside traffic in other
// goroutines.
type Cluster struct {
	nodes []*ClusterNode
}

// StartCluster starts a Redis Cluster for this test alone: Masters times
// (1 + Replicas) redis-server processes with cluster mode on, each on a free
// loopback port with its own directory (and nodes.conf) in t.TempDir(),
// joined with redis-cli --cluster create and stopped in t.Cleanup. It returns
// once every node says cluster_state:ok, all nodes agree which master serves
// each of the 16384 slots, and every replica is in sync; it fails the test,
// showing redis-cli's output or what was missing, if that does not happen
// within [TopologyTimeout] (the logs of all nodes are shown when the test
// failed). Nodes run with a short cluster-node-timeout and
// cluster-replica-validity-factor 0, so a replica takes over a killed master
// within seconds whatever its replication lag.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	o, err := opts.withDefaults()
	if err != nil {
		t.Fatalf("redistest: StartCluster: %v", err)
	}
	cli, err := lookCLI()
	if err != nil {
		t.Fatalf("redistest: StartCluster needs redis-cli to create the cluster: %v\n"+
			"install it (Debian/Ubuntu: apt-get install -y redis-tools) or put it on PATH", err)
	}
	args := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10),
		"--cluster-replica-validity-factor", "0",
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	c := &Cluster{}
	create := []string{"--cluster", "create"}
	for range o.Masters * (1 + o.Replicas) {
		n := &ClusterNode{Server: StartServer(t, args...)}
		if n.ID, err = n.admin.Do(ctx, "CLUSTER", "MYID").Text(); err != nil {
			t.Fatalf("redistest: StartCluster: CLUSTER MYID on %s: %v", n.Addr(), err)
		}
		c.nodes = append(c.nodes, n)
		create = append(create, n.Addr())
	}
	create = append(create, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, create...)
	cmd.WaitDelay = time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		if len(out) > logTail {
			out = out[len(out)-logTail:]
		}
		t.Fatalf("redistest: StartCluster: %s %s: %v\n--- redis-cli output (last %d bytes) ---\n%s--- end of redis-cli output ---",
			cli, strings.Join(create, " "), err, logTail, out)
	}

	wctx, wcancel := context.WithTimeout(context.Background(), TopologyTimeout)
	defer wcancel()
	if err := c.WaitHealthy(wctx); err != nil {
		t.Fatalf("redistest: StartCluster: %v", err)
	}
	for _, n := range c.nodes {
		// The slots can be served before gossip has told every node of
		// every other (seen on a loaded CI machine): wait for it.
		var view clusterView
		err := poll(wctx, topologyPoll, func(ctx context.Context) error {
			var err error
			if view, err = n.clusterNodes(ctx); err != nil {
				return err
			}
			if len(view) != len(c.nodes) {
				return fmt.Errorf("node %s knows %d nodes, want %d", n.Addr(), len(view), len(c.nodes))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("redistest: StartCluster: %v", err)
		}
		if self := view.self(); self.has("slave") {
			if err := n.WaitInSync(wctx); err != nil {
				t.Fatalf("redistest: StartCluster: %v", err)
			}
		}
	}
	return c
}

// lookCLI finds redis-cli on PATH or beside redis-server.
func lookCLI() (string, error) {
	if p, err := exec.LookPath("redis-cli"); err == nil {
		return p, nil
	}
	bin, err := lookBinary()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(bin), "redis-cli")
	if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return p, nil
	}
	return "", errors.New("redis-cli is neither on PATH nor beside " + bin)
}

// Nodes returns every node, masters and replicas as redis-cli made them, in
// the order they were started.
func (c *Cluster) Nodes() []*ClusterNode { return slices.Clone(c.nodes) }

// Addrs returns the addresses of all nodes, stopped ones included, as seeds
// for redis.ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// Kill stops node with SIGKILL, as in a crash, and waits until its process is
// gone. The other nodes notice after the node timeout; [Cluster.WaitHealthy]
// waits until a replica has taken over. [Server.Restart] brings the node back
// with its old ID (as a replica, if it was replaced meanwhile).
func (c *Cluster) Kill(node *ClusterNode) { node.Stop() }

// WaitHealthy waits until every running node says cluster_state:ok with all
// 16384 slots ok, and all running nodes agree which master serves each slot,
// every such master running; or until ctx is done, and then returns an error
// with the last state seen. After [Cluster.Kill] of a master this is the wait
// for a replica to take over.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	err := poll(ctx, topologyPoll, func(ctx context.Context) error {
		for _, n := range running(c.nodes) {
			ci, err := n.admin.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("CLUSTER INFO on %s: %w", n.Addr(), err)
			}
			info := parseInfo(ci)
			if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != strconv.Itoa(ClusterSlots) {
				return fmt.Errorf("node %s: cluster_state:%s cluster_slots_ok:%s",
					n.Addr(), info["cluster_state"], info["cluster_slots_ok"])
			}
		}
		owners, err := c.owners(ctx)
		if err != nil {
			return err
		}
		for slot, id := range owners {
			if n := c.node(id); n == nil || !n.Running() {
				return fmt.Errorf("slot %d is served by node %s, which does not run", slot, id)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: cluster not healthy: %w", err)
	}
	return nil
}

// KeySlot returns the hash slot of key (CLUSTER KEYSLOT, asked of a running
// node).
func (c *Cluster) KeySlot(ctx context.Context, key string) (int, error) {
	nodes := running(c.nodes)
	if len(nodes) == 0 {
		return 0, errors.New("redistest: KeySlot: no cluster node runs")
	}
	slot, err := nodes[0].admin.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT on %s: %w", nodes[0].Addr(), err)
	}
	return int(slot), nil
}

// MasterOfSlot returns the master that serves slot as all running nodes see
// it, or an error if they disagree, as they may for a moment after a
// failover or a migration.
func (c *Cluster) MasterOfSlot(ctx context.Context, slot int) (*ClusterNode, error) {
	if slot < 0 || slot >= ClusterSlots {
		return nil, fmt.Errorf("redistest: slot %d is out of range [0, %d)", slot, ClusterSlots)
	}
	owners, err := c.owners(ctx)
	if err != nil {
		return nil, fmt.Errorf("redistest: master of slot %d: %w", slot, err)
	}
	n := c.node(owners[slot])
	if n == nil {
		return nil, fmt.Errorf("redistest: slot %d is served by %q, not a node of this cluster", slot, owners[slot])
	}
	return n, nil
}

// MasterOfKey returns the master that serves key's slot; see
// [Cluster.MasterOfSlot].
func (c *Cluster) MasterOfKey(ctx context.Context, key string) (*ClusterNode, error) {
	slot, err := c.KeySlot(ctx, key)
	if err != nil {
		return nil, err
	}
	return c.MasterOfSlot(ctx, slot)
}

// node returns the node with cluster ID id, or nil.
func (c *Cluster) node(id string) *ClusterNode {
	for _, n := range c.nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// owners returns, for each slot, the ID of the master that serves it, as
// every running node sees it; an error if a slot has no master or the nodes
// disagree.
func (c *Cluster) owners(ctx context.Context) ([]string, error) {
	var (
		agreed []string
		first  *ClusterNode
	)
	for _, n := range running(c.nodes) {
		view, err := n.clusterNodes(ctx)
		if err != nil {
			return nil, err
		}
		owners, err := view.owners()
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Addr(), err)
		}
		if agreed == nil {
			agreed, first = owners, n
			continue
		}
		for slot := range owners {
			if owners[slot] != agreed[slot] {
				return nil, fmt.Errorf("nodes disagree on slot %d: %s says %s, %s says %s",
					slot, first.Addr(), agreed[slot], n.Addr(), owners[slot])
			}
		}
	}
	if agreed == nil {
		return nil, errors.New("no cluster node runs")
	}
	return agreed, nil
}

// clusterNodes returns the node's view of the cluster (CLUSTER NODES).
func (n *ClusterNode) clusterNodes(ctx context.Context) (clusterView, error) {
	text, err := n.admin.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", n.Addr(), err)
	}
	view, err := parseClusterNodes(text)
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", n.Addr(), err)
	}
	return view, nil
}

// nodeEntry is one line of CLUSTER NODES.
type nodeEntry struct {
	id     string
	addr   string   // ip:port, without the cluster bus port
	flags  []string // myself, master, slave, fail?, fail, handshake, noaddr, ...
	master string   // the master's ID for a replica, "-" for a master
	slots  [][2]int // inclusive ranges; migration markers ([slot->-id]) left out
}

// has reports whether the entry carries flag.
func (e nodeEntry) has(flag string) bool { return slices.Contains(e.flags, flag) }

// clusterView is a node's CLUSTER NODES reply.
type clusterView []nodeEntry

// parseClusterNodes parses a CLUSTER NODES reply.
func parseClusterNodes(text string) (clusterView, error) {
	var view clusterView
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("short line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",") // a hostname may follow
		e := nodeEntry{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b < a || b >= ClusterSlots {
				return nil, fmt.Errorf("bad slot range %q in line %q", s, line)
			}
			e.slots = append(e.slots, [2]int{a, b})
		}
		view = append(view, e)
	}
	return view, nil
}

// self returns the entry flagged myself (a zero entry if there is none).
func (v clusterView) self() nodeEntry {
	for _, e := range v {
		if e.has("myself") {
			return e
		}
	}
	return nodeEntry{}
}

// owners returns the ID of the master of each slot, or an error naming a
// slot that no master serves or whose master this view thinks failed.
func (v clusterView) owners() ([]string, error) {
	owners := make([]string, ClusterSlots)
	for _, e := range v {
		for _, r := range e.slots {
			for slot := r[0]; slot <= r[1]; slot++ {
				owners[slot] = e.id
			}
		}
		if len(e.slots) > 0 && (e.has("fail") || e.has("fail?")) {
			return nil, fmt.Errorf("slots %d-%d are served by %s (%s), flagged %s",
				e.slots[0][0], e.slots[0][1], e.id, e.addr, strings.Join(e.flags, ","))
		}
	}
	for slot, id := range owners {
		if id == "" {
			return nil, fmt.Errorf("slot %d has no master", slot)
		}
	}
	return owners, nil
}

// Migration is a slot on its way from one master to another, from
// [Cluster.BeginMigration]. Between BeginMigration and [Migration.Finish] the
// cluster serves the slot the way it does during a resharding: the source
// answers for the keys it still has and sends clients to the target (ASK)
// for the others, so a test can run traffic at every step. Its methods may be
// called from any goroutine, one at a time.
type Migration struct {
	c        *Cluster
	slot     int
	from, to *ClusterNode
}

// BeginMigration starts moving slot to the master to: CLUSTER SETSLOT
// IMPORTING on the target, then MIGRATING on the slot's current master. Move
// the keys with [Migration.MoveKeys] (or let Finish do it) and end with
// [Migration.Finish].
func (c *Cluster) BeginMigration(ctx context.Context, slot int, to *ClusterNode) (*Migration, error) {
	from, err := c.MasterOfSlot(ctx, slot)
	if err != nil {
		return nil, err
	}
	if from == to {
		return nil, fmt.Errorf("redistest: slot %d is already served by %s", slot, to.Addr())
	}
	view, err := to.clusterNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("redistest: BeginMigration: %w", err)
	}
	if !view.self().has("master") {
		return nil, fmt.Errorf("redistest: BeginMigration: the target %s is not a master (flags %v)", to.Addr(), view.self().flags)
	}
	m := &Migration{c: c, slot: slot, from: from, to: to}
	// The target first: once the source says MIGRATING it sends clients on
	// (ASK), and the target must then accept them.
	if err := m.setSlot(ctx, to, "IMPORTING", from.ID); err != nil {
		return nil, err
	}
	if err := m.setSlot(ctx, from, "MIGRATING", to.ID); err != nil {
		return nil, err
	}
	return m, nil
}

// Slot returns the slot being moved.
func (m *Migration) Slot() int { return m.slot }

// From returns the master the slot moves away from.
func (m *Migration) From() *ClusterNode { return m.from }

// To returns the master the slot moves to.
func (m *Migration) To() *ClusterNode { return m.to }

// MoveKeys moves up to batch of the slot's keys (CLUSTER GETKEYSINSLOT, then
// one MIGRATE ... KEYS on the source) and returns how many it moved: 0 once
// the source has none left. A batch of 0 or less means DefaultMigrateBatch.
func (m *Migration) MoveKeys(ctx context.Context, batch int) (int, error) {
	if batch <= 0 {
		batch = DefaultMigrateBatch
	}
	keys, err := m.from.admin.ClusterGetKeysInSlot(ctx, m.slot, batch).Result()
	if err != nil {
		return 0, fmt.Errorf("redistest: CLUSTER GETKEYSINSLOT %d on %s: %w", m.slot, m.from.Addr(), err)
	}
	if len(keys) == 0 {
		return 0, nil
	}
	if err := m.MoveNamed(ctx, keys...); err != nil {
		return 0, err
	}
	return len(keys), nil
}

// MoveNamed moves the named keys of the slot (one MIGRATE ... KEYS on the
// source); MoveKeys uses it, and tests that stop a migration with some keys
// moved and others not call it. A key the source no longer has is skipped
// (NOKEY: it expired or was deleted since it was listed).
func (m *Migration) MoveNamed(ctx context.Context, keys ...string) error {
	host, port, _ := net.SplitHostPort(m.to.Addr())
	args := []any{"MIGRATE", host, port, "", 0, migrateTimeout.Milliseconds(), "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	if res, err := m.from.admin.Do(ctx, args...).Text(); err != nil || (res != "OK" && res != "NOKEY") {
		return fmt.Errorf("redistest: MIGRATE of %d keys (%q) of slot %d from %s to %s = %q, %v",
			len(keys), keys[:min(len(keys), 3)], m.slot, m.from.Addr(), m.to.Addr(), res, err)
	}
	return nil
}

// Finish moves the keys that are left, in batches of DefaultMigrateBatch,
// then assigns the slot to the target (CLUSTER SETSLOT NODE on the target,
// then the source, then every other running master, as the Redis manual
// says), and waits until every running node agrees that the target serves
// the slot, or ctx is done.
func (m *Migration) Finish(ctx context.Context) error {
	for {
		n, err := m.MoveKeys(ctx, DefaultMigrateBatch)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	// Clients are sent on to the target for every key the source lacks, so
	// no key of the slot can appear on the source again.
	left, err := m.from.admin.ClusterCountKeysInSlot(ctx, m.slot).Result()
	if err != nil || left != 0 {
		return fmt.Errorf("redistest: CLUSTER COUNTKEYSINSLOT %d on %s after moving the keys = %d, %v; want 0",
			m.slot, m.from.Addr(), left, err)
	}
	view, err := m.to.clusterNodes(ctx)
	if err != nil {
		return fmt.Errorf("redistest: Finish: %w", err)
	}
	order := []*ClusterNode{m.to, m.from}
	for _, e := range view {
		if n := m.c.node(e.id); n != nil && n != m.to && n != m.from && e.has("master") && n.Running() {
			order = append(order, n)
		}
	}
	for i, n := range order {
		err := m.setSlot(ctx, n, "NODE", m.to.ID)
		// The target's view may still call master a node that has just
		// become a replica (gossip lags the roles of a new cluster): it
		// refuses, and needs no SETSLOT anyway.
		if err != nil && i >= 2 && strings.Contains(err.Error(), "SETSLOT only with masters") {
			continue
		}
		if err != nil {
			return err
		}
	}
	err = poll(ctx, topologyPoll, func(ctx context.Context) error {
		owners, err := m.c.owners(ctx)
		if err != nil {
			return err
		}
		if owners[m.slot] != m.to.ID {
			return fmt.Errorf("slot %d is still served by %s", m.slot, owners[m.slot])
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: slot %d not moved to %s: %w", m.slot, m.to.Addr(), err)
	}
	return nil
}

// setSlot runs CLUSTER SETSLOT <slot> <state> <id> on n.
func (m *Migration) setSlot(ctx context.Context, n *ClusterNode, state, id string) error {
	if err := n.admin.Do(ctx, "CLUSTER", "SETSLOT", m.slot, state, id).Err(); err != nil {
		return fmt.Errorf("redistest: CLUSTER SETSLOT %d %s %s on %s: %w", m.slot, state, id, n.Addr(), err)
	}
	return nil
}

// MigrateSlot moves slot and its keys to the master to, the way
// redis-cli --cluster reshard does; see [Cluster.BeginMigration] and
// [Migration.Finish] for the steps, and to run traffic between them.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, to *ClusterNode) error {
	m, err := c.BeginMigration(ctx, slot, to)
	if err != nil {
		return err
	}
	return m.Finish(ctx)
}
