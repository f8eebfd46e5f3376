package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

const (
	// TopologyTimeout bounds each wait of the topology helpers that fail the
	// test instead of taking a context: a replica's first sync, sentinels
	// finding each other, a cluster agreeing on its slots.
	TopologyTimeout = 30 * time.Second
	// topologyPoll is the polling period of the topology helpers' waits:
	// each check asks several servers, so it runs less often than WaitFor's.
	topologyPoll = 50 * time.Millisecond
)

// StartReplica starts a redis-server, as [StartServer] does, that replicates
// master (--replicaof), and returns once the replica is in sync with it (see
// [Server.WaitInSync]), failing the test if that takes longer than
// [TopologyTimeout]. The master must be a plain (not TLS) server. A replica
// that is restarted comes back as a replica of master again, whatever
// failovers happened meanwhile.
func StartReplica(t testing.TB, master *Server, extraArgs ...string) *Server {
	t.Helper()
	if master.l.tls != nil {
		t.Fatalf("redistest: StartReplica: the master %s speaks TLS; replicas of TLS servers are not supported", master.Addr())
	}
	host, port, _ := net.SplitHostPort(master.Addr())
	r := startServer(t, launch{extra: append([]string{"--replicaof", host, port}, extraArgs...)})
	ctx, cancel := context.WithTimeout(context.Background(), TopologyTimeout)
	defer cancel()
	if err := r.WaitInSync(ctx); err != nil {
		t.Fatalf("redistest: StartReplica of %s: %v", master.Addr(), err)
	}
	return r
}

// WaitInSync waits until the server is a replica whose link to its master is
// up and whose first sync is done (INFO replication: role:slave,
// master_link_status:up, master_sync_in_progress:0), or until ctx is done,
// and then returns an error that says what INFO last showed.
func (s *Server) WaitInSync(ctx context.Context) error {
	err := poll(ctx, topologyPoll, func(ctx context.Context) error {
		info, err := s.info(ctx, "replication")
		if err != nil {
			return err
		}
		if info["role"] != "slave" || info["master_link_status"] != "up" || info["master_sync_in_progress"] != "0" {
			return fmt.Errorf("role:%s master_host:%s master_port:%s master_link_status:%s master_sync_in_progress:%s",
				info["role"], info["master_host"], info["master_port"], info["master_link_status"], info["master_sync_in_progress"])
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: replica %s not in sync: %w", s.Addr(), err)
	}
	return nil
}

// info returns one section of the server's INFO as a map.
func (s *Server) info(ctx context.Context, section string) (map[string]string, error) {
	text, err := s.admin.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s on %s: %w", section, s.Addr(), err)
	}
	return parseInfo(text), nil
}

// parseInfo turns the "key:value" lines of INFO or CLUSTER INFO into a map,
// skipping "# Section" headers and blank lines.
func parseInfo(text string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}
