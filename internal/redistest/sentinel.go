package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// DefaultMasterName is the name the sentinels of [StartSentinel] monitor
	// their master under, unless [SentinelOptions.MasterName] says otherwise.
	DefaultMasterName = "mymaster"
	// DefaultSentinelReplicas is the default number of replicas in
	// [StartSentinel].
	DefaultSentinelReplicas = 1
	// DefaultSentinels is the default number of sentinel processes.
	DefaultSentinels = 3
	// DefaultDownAfter is the default down-after-milliseconds: how long the
	// master must not answer before a sentinel thinks it down.
	DefaultDownAfter = time.Second
	// DefaultFailoverTimeout is the default failover-timeout: how long a
	// failover may take before the sentinels give it up (and wait twice that
	// before the next automatic attempt).
	DefaultFailoverTimeout = 5 * time.Second
)

// SentinelOptions shape the topology of [StartSentinel]. The zero value is a
// master, one replica and three sentinels.
type SentinelOptions struct {
	// MasterName is the name the sentinels monitor the master under.
	// Defaults to DefaultMasterName.
	MasterName string
	// Replicas is the number of replicas of the master. -1 means none
	// (sentinels then have no replica to fail over to). Defaults to
	// DefaultSentinelReplicas.
	Replicas int
	// Sentinels is the number of sentinel processes. Defaults to
	// DefaultSentinels.
	Sentinels int
	// Quorum is how many sentinels must agree that the master is down before
	// a failover starts. Defaults to a majority of Sentinels.
	Quorum int
	// DownAfter is the sentinels' down-after-milliseconds. Defaults to
	// DefaultDownAfter.
	DownAfter time.Duration
	// FailoverTimeout is the sentinels' failover-timeout. Defaults to
	// DefaultFailoverTimeout.
	FailoverTimeout time.Duration
}

// withDefaults returns a copy of o with defaults applied, or an error that
// says which field is wrong.
func (o SentinelOptions) withDefaults() (SentinelOptions, error) {
	if o.MasterName == "" {
		o.MasterName = DefaultMasterName
	}
	var err error
	if o.Replicas, err = replicaCount(o.Replicas, DefaultSentinelReplicas); err != nil {
		return o, err
	}
	if o.Sentinels == 0 {
		o.Sentinels = DefaultSentinels
	}
	if o.Quorum == 0 {
		o.Quorum = o.Sentinels/2 + 1
	}
	if o.DownAfter == 0 {
		o.DownAfter = DefaultDownAfter
	}
	if o.FailoverTimeout == 0 {
		o.FailoverTimeout = DefaultFailoverTimeout
	}
	switch {
	case strings.ContainsAny(o.MasterName, " \t\r\n\"'"):
		return o, fmt.Errorf("bad MasterName %q: use a name without spaces or quotes", o.MasterName)
	case o.Sentinels < 0:
		return o, fmt.Errorf("bad Sentinels %d: want 1 or more", o.Sentinels)
	case o.Quorum < 1 || o.Quorum > o.Sentinels:
		return o, fmt.Errorf("bad Quorum %d: want 1 to Sentinels (%d)", o.Quorum, o.Sentinels)
	case o.DownAfter < time.Millisecond || o.FailoverTimeout < time.Millisecond:
		return o, fmt.Errorf("bad DownAfter %v or FailoverTimeout %v: want 1ms or more", o.DownAfter, o.FailoverTimeout)
	}
	return o, nil
}

// Sentinel is a Redis Sentinel topology owned by one test, from
// [StartSentinel]: a master, its replicas and the sentinels that watch them,
// each a [Server]. Its methods are safe for concurrent use.
type Sentinel struct {
	opts      SentinelOptions
	data      []*Server // the first master, then its replicas
	sentinels []*Server
}

// StartSentinel starts a Sentinel topology for this test alone: a master, its
// replicas (each in sync) and the sentinels that monitor the master under
// one name, every process on a free loopback port with its files (the
// sentinels' configuration included) in its own t.TempDir(), stopped in
// t.Cleanup. It returns once every sentinel knows the master, every replica
// (with its link up) and every other sentinel, and fails the test, saying
// what was missing, if that takes longer than [TopologyTimeout]. The logs of
// all the processes are shown when the test failed.
//
// Sentinels run as redis-server --sentinel with the short timeouts of opts,
// so that a failover ends within seconds. Connect with
// redis.NewFailoverClient([Sentinel.FailoverOptions]).
func StartSentinel(t testing.TB, opts SentinelOptions) *Sentinel {
	t.Helper()
	o, err := opts.withDefaults()
	if err != nil {
		t.Fatalf("redistest: StartSentinel: %v", err)
	}
	s := &Sentinel{opts: o}
	master := StartServer(t)
	s.data = append(s.data, master)
	for range o.Replicas {
		s.data = append(s.data, StartReplica(t, master))
	}
	for range o.Sentinels {
		s.sentinels = append(s.sentinels, startSentinelProcess(t, o, master.Addr()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), TopologyTimeout)
	defer cancel()
	if err := poll(ctx, topologyPoll, s.checkDiscovered); err != nil {
		t.Fatalf("redistest: StartSentinel: the sentinels did not discover the topology: %v", err)
	}
	return s
}

// startSentinelProcess writes a sentinel's configuration into a fresh
// directory and starts it. The file must be writable: a sentinel rewrites it
// with what it learns.
func startSentinelProcess(t testing.TB, o SentinelOptions, master string) *Server {
	t.Helper()
	host, port, _ := net.SplitHostPort(master)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s %[4]d\n"+
		"sentinel down-after-milliseconds %[1]s %[5]d\n"+
		"sentinel failover-timeout %[1]s %[6]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		o.MasterName, host, port, o.Quorum, o.DownAfter.Milliseconds(), o.FailoverTimeout.Milliseconds())
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatalf("redistest: StartSentinel: %v", err)
	}
	return startServer(t, launch{dir: dir, conf: conf, extra: []string{"--sentinel"}})
}

// checkDiscovered reports nil once every running sentinel sees the master
// up, every replica up with its link to the master, and every other sentinel.
func (s *Sentinel) checkDiscovered(ctx context.Context) error {
	wantReplicas := len(s.data) - 1
	for _, sen := range running(s.sentinels) {
		master, err := s.sentinelCmd(ctx, sen, "master")
		if err != nil {
			return err
		}
		m := pairs(master[0])
		if m["flags"] != "master" {
			return fmt.Errorf("sentinel %s: master %s:%s has flags %q", sen.Addr(), m["ip"], m["port"], m["flags"])
		}
		replicas, err := s.sentinelCmd(ctx, sen, "replicas")
		if err != nil {
			return err
		}
		var up int
		for _, r := range replicas {
			if r := pairs(r); r["flags"] == "slave" && r["master-link-status"] == "ok" {
				up++
			}
		}
		if up != wantReplicas {
			return fmt.Errorf("sentinel %s sees %d of %d replicas up", sen.Addr(), up, wantReplicas)
		}
		others, err := s.sentinelCmd(ctx, sen, "sentinels")
		if err != nil {
			return err
		}
		if len(others) != len(s.sentinels)-1 {
			return fmt.Errorf("sentinel %s knows %d of the %d other sentinels", sen.Addr(), len(others), len(s.sentinels)-1)
		}
	}
	return nil
}

// sentinelCmd runs SENTINEL <sub> <master name> on sen and returns its reply
// as a list of field-value lists (for MASTER, a list of one).
func (s *Sentinel) sentinelCmd(ctx context.Context, sen *Server, sub string) ([][]any, error) {
	v, err := sen.admin.Do(ctx, "SENTINEL", sub, s.opts.MasterName).Slice()
	if err != nil {
		return nil, fmt.Errorf("SENTINEL %s %s on %s: %w", sub, s.opts.MasterName, sen.Addr(), err)
	}
	if sub == "master" {
		return [][]any{v}, nil
	}
	out := make([][]any, 0, len(v))
	for _, e := range v {
		fields, ok := e.([]any)
		if !ok {
			return nil, fmt.Errorf("SENTINEL %s on %s: unexpected reply element %T", sub, sen.Addr(), e)
		}
		out = append(out, fields)
	}
	return out, nil
}

// pairs turns a RESP2 field-value list into a map.
func pairs(fields []any) map[string]string {
	m := make(map[string]string, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		m[fmt.Sprint(fields[i])] = fmt.Sprint(fields[i+1])
	}
	return m
}

// replicaCount applies the rule of the Replicas options: 0 means def, -1
// means none.
func replicaCount(n, def int) (int, error) {
	switch {
	case n == 0:
		return def, nil
	case n == -1:
		return 0, nil
	case n < 0:
		return 0, fmt.Errorf("bad Replicas %d: want -1 (none), 0 (the default) or more", n)
	}
	return n, nil
}

// running returns the servers whose process runs.
func running[S interface{ Running() bool }](servers []S) []S {
	var out []S
	for _, srv := range servers {
		if srv.Running() {
			out = append(out, srv)
		}
	}
	return out
}

// MasterName returns the name the sentinels monitor the master under.
func (s *Sentinel) MasterName() string { return s.opts.MasterName }

// Addrs returns the sentinels' addresses, for redis.FailoverOptions.
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.sentinels))
	for i, sen := range s.sentinels {
		out[i] = sen.Addr()
	}
	return out
}

// Sentinels returns the sentinel processes, to stop or restart them.
func (s *Sentinel) Sentinels() []*Server { return append([]*Server(nil), s.sentinels...) }

// Servers returns the data servers: the first master, then its replicas, in
// the order they were started. Which of them is master now is for the
// sentinels to say: see [Sentinel.Master].
func (s *Sentinel) Servers() []*Server { return append([]*Server(nil), s.data...) }

// FailoverOptions returns options for redis.NewFailoverClient that reach the
// master through the sentinels. The caller may change them.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: s.opts.MasterName, SentinelAddrs: s.Addrs()}
}

// MasterAddr returns the master's address as every running sentinel reports
// it (SENTINEL GET-MASTER-ADDR-BY-NAME), or an error if they disagree, as
// they may for a moment during a failover.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var (
		addr string
		seen []string
	)
	for _, sen := range running(s.sentinels) {
		hp, err := sen.admin.Do(ctx, "SENTINEL", "get-master-addr-by-name", s.opts.MasterName).StringSlice()
		if err != nil {
			return "", fmt.Errorf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME on %s: %w", sen.Addr(), err)
		}
		if len(hp) != 2 {
			return "", fmt.Errorf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME on %s = %q", sen.Addr(), hp)
		}
		a := net.JoinHostPort(hp[0], hp[1])
		seen = append(seen, sen.Addr()+" says "+a)
		if addr == "" {
			addr = a
		} else if a != addr {
			return "", fmt.Errorf("redistest: the sentinels disagree on the master: %s", strings.Join(seen, ", "))
		}
	}
	if addr == "" {
		return "", errors.New("redistest: no sentinel runs")
	}
	return addr, nil
}

// Master returns the data server that the sentinels agree is the master now
// (see [Sentinel.MasterAddr]).
func (s *Sentinel) Master(ctx context.Context) (*Server, error) {
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return nil, err
	}
	for _, srv := range s.data {
		if srv.Addr() == addr {
			return srv, nil
		}
	}
	return nil, fmt.Errorf("redistest: the sentinels' master %s is none of this topology's servers", addr)
}

// Failover makes the sentinels promote a replica (SENTINEL FAILOVER, sent to
// the first running sentinel and sent again while it answers NOGOODSLAVE or
// INPROG) and waits until every running sentinel reports the new master, that
// server says it is a master (ROLE), and no sentinel has a failover in
// progress. It returns the new master's address, or an error with the last
// state seen once ctx is done. The old master, if it still runs, is turned
// into a replica by the sentinels some seconds later.
func (s *Sentinel) Failover(ctx context.Context) (string, error) {
	old, err := s.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	sens := running(s.sentinels)
	if len(sens) == 0 {
		return "", errors.New("redistest: Failover: no sentinel runs")
	}
	sen := sens[0]
	err = poll(ctx, topologyPoll, func(ctx context.Context) error {
		err := sen.admin.Do(ctx, "SENTINEL", "failover", s.opts.MasterName).Err()
		if err != nil && !strings.HasPrefix(err.Error(), "NOGOODSLAVE") && !strings.HasPrefix(err.Error(), "INPROG") {
			return stopPolling{err}
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("redistest: SENTINEL FAILOVER %s on %s: %w", s.opts.MasterName, sen.Addr(), err)
	}
	var addr string
	err = poll(ctx, topologyPoll, func(ctx context.Context) error {
		a, err := s.MasterAddr(ctx)
		if err != nil {
			return err
		}
		if a == old {
			return fmt.Errorf("the sentinels still report the old master %s", old)
		}
		if err := s.checkRole(ctx, a); err != nil {
			return err
		}
		for _, sen := range running(s.sentinels) {
			m, err := s.sentinelCmd(ctx, sen, "master")
			if err != nil {
				return err
			}
			if flags := pairs(m[0])["flags"]; strings.Contains(flags, "failover_in_progress") {
				return fmt.Errorf("sentinel %s: failover in progress (flags %s)", sen.Addr(), flags)
			}
		}
		addr = a
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("redistest: Failover from %s: %w", old, err)
	}
	return addr, nil
}

// checkRole reports nil if the data server at addr says it is a master.
func (s *Sentinel) checkRole(ctx context.Context, addr string) error {
	for _, srv := range s.data {
		if srv.Addr() != addr {
			continue
		}
		role, err := srv.admin.Do(ctx, "ROLE").Slice()
		if err != nil {
			return fmt.Errorf("ROLE on %s: %w", addr, err)
		}
		if len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("%s is not a master yet (ROLE %v)", addr, role)
		}
		return nil
	}
	return fmt.Errorf("the sentinels' master %s is none of this topology's servers", addr)
}
