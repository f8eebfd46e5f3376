package rdb

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Replication is what the master that serves a queue says about its
// replicas in INFO replication.
type Replication struct {
	// Replicas is the number of replicas connected to the master
	// (connected_slaves).
	Replicas int
	// MinReplicasToWrite reports whether the master refuses writes when too
	// few replicas are in sync (min-replicas-to-write and
	// min-replicas-max-lag are both set: INFO then shows
	// min_slaves_good_slaves, in Redis and Valkey). Without it a master
	// takes writes however few replicas it has, also the old master after
	// a failover made one of them the master, which drops them when it
	// resyncs.
	MinReplicasToWrite bool
}

// MasterReplication reads the replication state of the master that serves
// key (INFO replication; of the cluster node that serves key's slot for a
// Redis Cluster client). It needs no CONFIG GET, which managed services
// and least-privilege users are often denied. It returns an error when it
// cannot tell: INFO denied, an unreachable server, or a server that is not
// a master.
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
		case "min_slaves_good_slaves":
			r.MinReplicasToWrite = true
		}
	}
	if role != "master" {
		return r, fmt.Errorf("INFO replication says role:%s, not master", role)
	}
	return r, nil
}
