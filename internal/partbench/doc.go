// Package partbench holds the benchmark of partitioned queues on a loopback
// Redis Cluster whose masters each run in a CPU-limited cgroup, so that
// Redis is the bottleneck as on a real cluster. It has no code besides its
// benchmark; see docs/performance.md, "Partitioned queues", for the command
// and the figures.
package partbench
