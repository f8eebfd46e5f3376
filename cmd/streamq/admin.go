package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq/inspect"
)

func newQueueCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Work with one queue as a whole (delete)",
		Long:  `Work with one queue as a whole: 'streamq queue delete <name>' deletes it.`,
		Example: `  streamq queue delete orders-test
  streamq queue delete orders-test --force --yes`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown subcommand %q of queue: use delete", args[0])
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(newQueueDeleteCmd(a))
	return cmd
}

// deletedJSON is the JSON shape of queue delete.
type deletedJSON struct {
	Queue       string `json:"queue"`
	DeletedKeys int    `json:"deleted_keys"`
}

func newQueueDeleteCmd(a *app) *cobra.Command {
	var force, yes bool
	var live time.Duration
	cmd := &cobra.Command{
		Use:   "delete <queue>",
		Short: "Delete a queue: every job, dead letter, schedule and counter of it, and its registry entry",
		Long: `Delete a queue for good: its jobs in every state, dead letters, schedules,
counters, results and locks (every key "<prefix>:{<queue>}:*", found by a SCAN
of 1,000 keys per call and unlinked 100 at a time), then its entries in the
registry, so that it leaves the queue list.

It is refused while consumers or workers of the queue are live (read or sent a
heartbeat within --live-within): stop them first, since a producer or consumer
that goes on makes the queue again. --force deletes it anyway. It says what it
deletes and asks for confirmation on a terminal (--yes otherwise).

JSON: {"queue","deleted_keys"}`,
		Example: `  streamq queue delete orders-test
  streamq queue delete orders-test --force --yes --json`,
		Args: exactArgs(1, "<queue>"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if live <= 0 {
				return usagef("--live-within %s: use a positive duration, longer than the consumers' Block (1s by default)", live)
			}
			name := args[0]
			q, err := a.queue(cmd, name)
			if err != nil {
				return err
			}
			ctx, cancel := a.ctx(cmd)
			ov, err := q.Overview(ctx)
			var users []inspect.Consumer
			if err == nil && !force {
				users, err = q.LiveConsumers(ctx, live)
			}
			cancel()
			if err != nil {
				return err
			}
			if len(users) > 0 {
				return inUse(&inspect.InUseError{Queue: name, Live: users, Within: live})
			}
			jobs := ov.Waiting + ov.Running + ov.Delayed + ov.Retrying + ov.Dead + ov.Cancelled
			what := fmt.Sprintf("delete queue %s with its %d jobs (waiting %d, running %d, delayed %d, retrying %d, dead %d, cancelled %d)",
				name, jobs, ov.Waiting, ov.Running, ov.Delayed, ov.Retrying, ov.Dead, ov.Cancelled)
			if err := a.confirm(what, yes); err != nil {
				return err
			}
			in, err := a.inspector(cmd)
			if err != nil {
				return err
			}
			bar := a.progress("keys deleted", 0)
			n, err := in.DeleteQueue(cmd.Context(), name, &inspect.DeleteQueueOptions{Force: force, LiveWithin: live, Progress: bar.done})
			bar.end()
			if err != nil {
				return inUse(err)
			}
			if a.json {
				return printJSON(a.stdout, deletedJSON{Queue: name, DeletedKeys: n})
			}
			fmt.Fprintf(a.stdout, "deleted queue %s (%d keys)\n", name, n)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete the queue even while consumers or workers are live")
	cmd.Flags().DurationVar(&live, "live-within", inspect.DefaultLiveWithin, "a consumer or worker seen within this is live")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (needed when stdin is not a terminal)")
	return cmd
}

func newQueuesPruneCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "prune",
		Short: "Remove ghost queues: registry entries of queues none of whose keys exist",
		Long: `Remove the registry entries of queues that have no jobs, dead letters, pause
flag, workers or schedules left (their keys were deleted by hand, or by tests),
so that they leave the queue list, and write-behind entries of queues that are
not registered. A queue that is used again is registered again by its
producers and consumers when they start.

JSON: {"removed":[names]}`,
		Example: `  streamq queues prune
  streamq queues prune --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var removed []string
			err := a.withInspector(cmd, func(ctx context.Context, in *inspect.Inspector) (err error) {
				removed, err = in.PruneQueues(ctx)
				return err
			})
			if err != nil {
				return err
			}
			if a.json {
				if removed == nil {
					removed = []string{}
				}
				return printJSON(a.stdout, struct {
					Removed []string `json:"removed"`
				}{removed})
			}
			for _, n := range removed {
				fmt.Fprintf(a.stdout, "removed %s\n", escape([]byte(n)))
			}
			fmt.Fprintf(a.stdout, "%d ghost queues removed from the registry\n", len(removed))
			return nil
		},
	}
}

// redisJSON is the JSON shape of one server of streamq redis.
type redisJSON struct {
	Addr            string     `json:"addr"`
	Server          string     `json:"server"`
	Version         string     `json:"version"`
	Mode            string     `json:"mode"`
	Role            string     `json:"role"`
	UptimeS         int64      `json:"uptime_s"`
	UsedMemory      int64      `json:"used_memory"`
	PeakMemory      int64      `json:"peak_memory"`
	MaxMemory       int64      `json:"max_memory"`
	EvictionPolicy  string     `json:"eviction_policy"`
	EvictionWarning string     `json:"eviction_warning,omitempty"`
	EvictedKeys     int64      `json:"evicted_keys"`
	OpsPerSec       int64      `json:"ops_per_sec"`
	Clients         int64      `json:"clients"`
	BlockedClients  int64      `json:"blocked_clients"`
	Replicas        int64      `json:"replicas"`
	Persistence     string     `json:"persistence"`
	AOF             bool       `json:"aof"`
	AOFStatus       string     `json:"aof_status"`
	RDBSchedule     string     `json:"rdb_schedule"`
	RDBLastSave     *time.Time `json:"rdb_last_save,omitempty"`
	RDBChanges      int64      `json:"rdb_changes"`
	RDBStatus       string     `json:"rdb_status"`
}

func newRedisCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "redis",
		Short: "Show the Redis server: version, memory, eviction policy, ops/s, clients, persistence",
		Long: `Show what the Redis (or Valkey) server says of itself in INFO, for every master
of a cluster: its version, memory used and the limit, the eviction policy (a
warning unless noeviction: any other policy deletes keys, jobs with them, at
the limit), operations per second, clients, persistence (AOF, RDB snapshots)
and uptime.

JSON: {"servers":[{"addr","server":"redis|valkey","version","mode","role",
"uptime_s","used_memory","peak_memory","max_memory","eviction_policy",
"eviction_warning","evicted_keys","ops_per_sec","clients","blocked_clients",
"replicas","persistence","aof","aof_status","rdb_schedule","rdb_last_save",
"rdb_changes","rdb_status"}]}`,
		Example: `  streamq redis
  streamq --cluster 10.0.0.5:7000 redis --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ss []inspect.RedisServer
			err := a.withInspector(cmd, func(ctx context.Context, in *inspect.Inspector) (err error) {
				ss, err = in.Redis(ctx)
				return err
			})
			if err != nil {
				return err
			}
			if a.json {
				out := struct {
					Servers []redisJSON `json:"servers"`
				}{Servers: []redisJSON{}}
				for _, s := range ss {
					out.Servers = append(out.Servers, newRedisJSON(&s))
				}
				return printJSON(a.stdout, out)
			}
			for i, s := range ss {
				if i > 0 {
					fmt.Fprintln(a.stdout)
				}
				a.printRedis(&s)
			}
			return nil
		},
	}
}

func newRedisJSON(s *inspect.RedisServer) redisJSON {
	return redisJSON{
		Addr: s.Addr, Server: s.Server, Version: s.Version, Mode: s.Mode, Role: s.Role, UptimeS: int64(s.Uptime / time.Second),
		UsedMemory: s.UsedMemory, PeakMemory: s.PeakMemory, MaxMemory: s.MaxMemory,
		EvictionPolicy: s.EvictionPolicy, EvictionWarning: s.EvictionWarning(), EvictedKeys: s.EvictedKeys,
		OpsPerSec: s.OpsPerSec, Clients: s.Clients, BlockedClients: s.BlockedClients, Replicas: s.Replicas,
		Persistence: s.Persistence(), AOF: s.AOF, AOFStatus: s.AOFStatus, RDBSchedule: s.RDBSchedule,
		RDBLastSave: jsonTime(s.RDBLastSave), RDBChanges: s.RDBChanges, RDBStatus: s.RDBLastState,
	}
}

func (a *app) printRedis(s *inspect.RedisServer) {
	w := a.stdout
	fmt.Fprintf(w, "Server:       %s (%s, %s)", s.Product(), s.Mode, s.Role)
	if s.Addr != "" {
		fmt.Fprintf(w, " at %s", s.Addr)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Uptime:       %s\n", age(s.Uptime))
	limit := "no limit"
	if s.MaxMemory > 0 {
		limit = fmt.Sprintf("%s (%.0f%% used)", bytesText(s.MaxMemory), 100*float64(s.UsedMemory)/float64(s.MaxMemory))
	}
	fmt.Fprintf(w, "Memory:       %s used (peak %s), maxmemory %s\n", bytesText(s.UsedMemory), bytesText(s.PeakMemory), limit)
	fmt.Fprintf(w, "Eviction:     %s (%d keys evicted since start)\n", s.EvictionPolicy, s.EvictedKeys)
	fmt.Fprintf(w, "Ops/s:        %d\n", s.OpsPerSec)
	fmt.Fprintf(w, "Clients:      %d (%d blocked), %d replicas\n", s.Clients, s.BlockedClients, s.Replicas)
	fmt.Fprintf(w, "Persistence:  %s", s.Persistence())
	if s.AOF {
		fmt.Fprintf(w, "; AOF last write %s", s.AOFStatus)
	}
	if s.RDBSchedule != "" && s.RDBSchedule != "?" {
		fmt.Fprintf(w, "; RDB save %q, last save %s (%s), %d changes since", s.RDBSchedule, since(s.RDBLastSave, time.Now()), s.RDBLastState, s.RDBChanges)
	}
	fmt.Fprintln(w)
	if warn := s.EvictionWarning(); warn != "" {
		fmt.Fprintf(w, "WARNING:      %s\n", warn)
	}
}

// bytesText writes n bytes in binary units: "1.5 MiB".
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// withInspector connects and runs call with the inspector and the context
// of one Redis call (--timeout).
func (a *app) withInspector(cmd *cobra.Command, call func(context.Context, *inspect.Inspector) error) error {
	in, err := a.inspector(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := a.ctx(cmd)
	defer cancel()
	return call(ctx, in)
}

// inUse turns DeleteQueue's refusal into the CLI's words.
func inUse(err error) error {
	var iu *inspect.InUseError
	if errors.As(err, &iu) {
		return &exitError{code: exitFailure, err: fmt.Errorf("%w (--force deletes it anyway)", err)}
	}
	return err
}
