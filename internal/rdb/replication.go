package rdb

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Replication is what the master that serves a queue says about its
// replicas.
type Replication struct {
	// Replicas is the number of replicas connected to the master
	// (connected_slaves in INFO replication).
	Replicas int
	// MinReplicasToWrite is the master's min-replicas-to-write: with 0, it
	// takes writes however few replicas it has, also after a failover
	// made one of them the master (and then loses them when it resyncs).
	MinReplicasToWrite int
}

// MasterReplication reads the replication state of the master that serves
// key: INFO replication and CONFIG GET min-replicas-to-write, on the
// cluster node that serves key's slot for a Redis Cluster client. It
// returns an error when it cannot tell: a command denied (managed services
// often deny CONFIG), an unreachable server, or a server that is not a
// master.
func MasterReplication(ctx context.Context, c redis.UniversalClient, key string) (Replication, error) {
	var node redis.Cmdable = c
	if cc, ok := c.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return Replication{}, err
		}
		node = n
	}
	text, err := node.Info(ctx, "replication").Result()
	if err != nil {
		return Replication{}, err
	}
	var r Replication
	role := ""
	for _, line := range strings.Split(text, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "role":
			role = v
		case "connected_slaves":
			r.Replicas, _ = strconv.Atoi(v)
		}
	}
	if role != "master" {
		return r, fmt.Errorf("INFO replication says role:%s, not master", role)
	}
	cfg, err := node.ConfigGet(ctx, "min-replicas-to-write").Result()
	if err != nil {
		return r, err
	}
	v, ok := cfg["min-replicas-to-write"]
	if !ok {
		return r, fmt.Errorf("CONFIG GET min-replicas-to-write returned %v", cfg)
	}
	if r.MinReplicasToWrite, err = strconv.Atoi(v); err != nil {
		return r, fmt.Errorf("CONFIG GET min-replicas-to-write returned %q", v)
	}
	return r, nil
}
