package inspect

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is what one Redis (or Valkey) server says of itself in INFO:
// what the Redis panel of the dashboard and `streamq redis` show.
type RedisServer struct {
	Addr    string // host:port the client reaches it at ("" when unknown)
	Server  string // "redis" or "valkey"
	Version string // of the server named in Server
	Mode    string // redis_mode: standalone, cluster or sentinel
	Role    string // master or slave (a replica)
	Uptime  time.Duration

	UsedMemory, PeakMemory int64  // bytes
	MaxMemory              int64  // bytes; 0: no limit
	EvictionPolicy         string // maxmemory_policy
	EvictedKeys            int64  // since the start

	OpsPerSec               int64 // instantaneous_ops_per_sec
	Clients, BlockedClients int64
	Replicas                int64 // connected_slaves

	AOF          bool   // aof_enabled
	AOFStatus    string // aof_last_write_status: ok or err
	RDBSchedule  string // CONFIG GET save: "3600 1 300 100" (snapshots), "" off, "?" when CONFIG is refused
	RDBLastSave  time.Time
	RDBChanges   int64  // writes since the last snapshot
	RDBLastState string // rdb_last_bgsave_status: ok or err
}

// Product names the server and its version as people write them:
// "Redis 7.0.15", "Valkey 8.0.1".
func (s *RedisServer) Product() string {
	name := s.Server
	if name != "" {
		name = strings.ToUpper(name[:1]) + name[1:]
	}
	return strings.TrimSpace(name + " " + s.Version)
}

// EvictionWarning says why the eviction policy loses jobs, or "" under
// noeviction: any other policy lets Redis delete keys (streams, delayed
// jobs, locks) when it reaches maxmemory.
func (s *RedisServer) EvictionWarning() string {
	if s.EvictionPolicy == "" || s.EvictionPolicy == "noeviction" {
		return ""
	}
	return fmt.Sprintf("maxmemory-policy is %s: at maxmemory Redis deletes keys, and jobs with them; set it to noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf)", s.EvictionPolicy)
}

// Persistence sums up how the server keeps data: "AOF and RDB", "AOF",
// "RDB", "none (data is lost on restart)", or "unknown".
func (s *RedisServer) Persistence() string {
	rdbOn := s.RDBSchedule != "" && s.RDBSchedule != "?"
	switch {
	case s.AOF && rdbOn:
		return "AOF and RDB"
	case s.AOF:
		return "AOF"
	case rdbOn:
		return "RDB"
	case s.RDBSchedule == "?":
		return "unknown"
	}
	return "none (data is lost on restart)"
}

// Redis reads INFO (and CONFIG GET save, when allowed) of the server the
// inspector's client talks to, or of every master of a cluster, sorted by
// address.
func (in *Inspector) Redis(ctx context.Context) ([]RedisServer, error) {
	if cc, ok := in.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var out []RedisServer
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			s, err := readServer(ctx, c, c.Options().Addr)
			if err != nil {
				return err
			}
			mu.Lock()
			out = append(out, *s)
			mu.Unlock()
			return nil
		})
		slices.SortFunc(out, func(a, b RedisServer) int { return strings.Compare(a.Addr, b.Addr) })
		return out, err
	}
	addr := ""
	if c, ok := in.rdb.(*redis.Client); ok {
		addr = c.Options().Addr
	}
	s, err := readServer(ctx, in.rdb, addr)
	if err != nil {
		return nil, err
	}
	return []RedisServer{*s}, nil
}

// readServer reads INFO and CONFIG GET save of one server.
func readServer(ctx context.Context, c redis.Cmdable, addr string) (*RedisServer, error) {
	info, err := c.Info(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("inspect: INFO of %s: %w", addr, err)
	}
	s := parseInfo(info)
	s.Addr = addr
	s.RDBSchedule = "?"
	if save, err := c.ConfigGet(ctx, "save").Result(); err == nil {
		s.RDBSchedule = strings.TrimSpace(save["save"])
	}
	return s, nil
}

// parseInfo reads the fields of RedisServer from the text of INFO.
func parseInfo(info string) *RedisServer {
	f := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			f[k] = v
		}
	}
	num := func(k string) int64 {
		n, _ := strconv.ParseInt(f[k], 10, 64)
		return n
	}
	s := &RedisServer{
		Server: "redis", Version: f["redis_version"], Mode: f["redis_mode"], Role: f["role"],
		Uptime:     time.Duration(num("uptime_in_seconds")) * time.Second,
		UsedMemory: num("used_memory"), PeakMemory: num("used_memory_peak"), MaxMemory: num("maxmemory"),
		EvictionPolicy: f["maxmemory_policy"], EvictedKeys: num("evicted_keys"),
		OpsPerSec: num("instantaneous_ops_per_sec"), Clients: num("connected_clients"), BlockedClients: num("blocked_clients"),
		Replicas: num("connected_slaves"),
		AOF:      f["aof_enabled"] == "1", AOFStatus: f["aof_last_write_status"],
		RDBChanges: num("rdb_changes_since_last_save"), RDBLastState: f["rdb_last_bgsave_status"],
	}
	// Valkey answers redis_version with the Redis version it is compatible
	// with, and names itself in valkey_version and server_name.
	if v, ok := f["valkey_version"]; ok || f["server_name"] == "valkey" {
		s.Server, s.Version = "valkey", v
	}
	if t := num("rdb_last_save_time"); t > 0 {
		s.RDBLastSave = time.Unix(t, 0)
	}
	return s
}
