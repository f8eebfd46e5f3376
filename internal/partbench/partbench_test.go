package partbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
)

const (
	// cgroupRoot is the cgroup v1 cpu controller; each master gets a
	// directory of its own under it.
	cgroupRoot = "/sys/fs/cgroup/cpu"
	// periodUS and quotaUS are each master's CPU quota: 5 % of a core, low
	// enough that Redis, not this process, is the bottleneck on a machine
	// of two cores, in short periods so that a throttled server answers
	// again within 20 ms (the kernel refuses a quota below 1 ms).
	periodUS = 20000
	quotaUS  = 1000
	// jobsPerMaster is the number of jobs of one run per partition.
	jobsPerMaster = 8000
	// producers is the number of goroutines that enqueue.
	producers = 64
	// batch is the size of a batch in the batch and keyed modes.
	batch = 50
	// keys is the number of partition keys in the keyed mode.
	keys = 1000
)

// limitCPU puts every master in a cgroup of its own with quotaUS, and
// removes exactly those cgroups (moving the processes back) at cleanup.
func limitCPU(b *testing.B, masters []*redistest.ClusterNode) {
	b.Helper()
	for _, m := range masters {
		pid, err := serverPID(m.Addr())
		if err != nil {
			b.Fatal(err)
		}
		dir := filepath.Join(cgroupRoot, fmt.Sprintf("streamq-partbench-%d", pid))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatalf("cgroup %s: %v (is %s writable? these benchmarks need root and the cgroup v1 cpu controller)", dir, err, cgroupRoot)
		}
		b.Cleanup(func() {
			// Move the server back (if it still runs), then remove the
			// directory this benchmark made.
			_ = os.WriteFile(filepath.Join(cgroupRoot, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
			if err := os.Remove(dir); err != nil {
				b.Errorf("remove cgroup %s: %v", dir, err)
			}
		})
		for _, fv := range [][2]string{{"cpu.cfs_period_us", strconv.Itoa(periodUS)}, {"cpu.cfs_quota_us", strconv.Itoa(quotaUS)}, {"cgroup.procs", strconv.Itoa(pid)}} {
			f, v := fv[0], fv[1]
			if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0); err != nil {
				b.Fatalf("write %s/%s: %v", dir, f, err)
			}
		}
	}
}

// serverPID asks the server at addr for its process ID.
func serverPID(addr string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		return 0, err
	}
	return infoInt(info, "process_id")
}

// infoInt reads an integer field of an INFO reply.
func infoInt(info, field string) (int, error) {
	f, err := infoFloat(info, field)
	return int(f), err
}

// infoFloat reads a number field of an INFO reply.
func infoFloat(info, field string) (float64, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no %s in INFO", field)
}

// redisCPU returns the CPU time each master used so far.
func redisCPU(ctx context.Context, masters []*redistest.ClusterNode) ([]time.Duration, error) {
	out := make([]time.Duration, len(masters))
	for i, m := range masters {
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		info, err := c.Info(ctx, "cpu").Result()
		c.Close()
		if err != nil {
			return nil, err
		}
		u, err1 := infoFloat(info, "used_cpu_user")
		s, err2 := infoFloat(info, "used_cpu_sys")
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		out[i] = time.Duration((u + s) * float64(time.Second))
	}
	return out, nil
}

// processCPU returns this process's CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// result is one run's figures.
type result struct {
	mode        string
	n           int
	jobs        int
	elapsed     time.Duration
	perMaster   []time.Duration // Redis CPU per job on each master with a partition
	clientPerJb time.Duration
}

func (r result) rate() float64 { return float64(r.jobs) / r.elapsed.Seconds() }

// place moves the slot of each partition k of pq to masters[k].
func place(ctx context.Context, b *testing.B, cl *redistest.Cluster, pq *streamq.PartitionedQueue, masters []*redistest.ClusterNode, n int) {
	b.Helper()
	for k := range n {
		q, err := pq.Partition(k)
		if err != nil {
			b.Fatal(err)
		}
		slot, err := cl.KeySlot(ctx, "{"+q.Name()+"}")
		if err != nil {
			b.Fatal(err)
		}
		owner, err := cl.MasterOfSlot(ctx, slot)
		if err != nil {
			b.Fatal(err)
		}
		if owner.ID != masters[k].ID {
			if err := cl.MigrateSlot(ctx, slot, masters[k]); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// run enqueues and handles jobsPerMaster*n jobs of one logical queue of n
// partitions, producers and one partitioned worker at once, and returns the
// figures.
func run(ctx context.Context, b *testing.B, cl *redistest.Cluster, c *redis.ClusterClient, masters []*redistest.ClusterNode, mode string, n int) result {
	b.Helper()
	name := fmt.Sprintf("pb-%s-%d-%d", mode, n, time.Now().UnixNano())
	pq, err := streamq.NewPartitionedQueue(c, name, &streamq.PartitionedQueueConfig{Queue: &streamq.QueueConfig{MaxLen: -1}})
	if err != nil {
		b.Fatal(err)
	}
	place(ctx, b, cl, pq, masters, n)
	if _, err := pq.SetPartitions(ctx, n); err != nil {
		b.Fatal(err)
	}
	if err := pq.Setup(ctx); err != nil {
		b.Fatal(err)
	}
	p, err := streamq.NewPartitionedProducer(pq, nil)
	if err != nil {
		b.Fatal(err)
	}
	total := jobsPerMaster * n
	var done atomic.Int64
	finished := make(chan struct{})
	w, err := streamq.NewPartitionedWorker(pq, streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		if done.Add(1) == int64(total) {
			close(finished)
		}
		return nil
	}), &streamq.PartitionedWorkerConfig{Concurrency: 128})
	if err != nil {
		b.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	werr := make(chan error, 1)
	go func() { werr <- w.Run(wctx) }()

	for _, m := range masters {
		mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		_ = mc.ConfigResetStat(ctx).Err()
		mc.Close()
	}
	cpu0, err := redisCPU(ctx, masters)
	if err != nil {
		b.Fatal(err)
	}
	client0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	per := total / producers
	for g := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- produce(ctx, p, mode, g, per)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%s n=%d: handled %d of %d jobs", mode, n, done.Load(), total)
	}
	elapsed := time.Since(start)
	clientCPU := processCPU() - client0
	cpu1, err := redisCPU(ctx, masters)
	if err != nil {
		b.Fatal(err)
	}
	stop()
	if err := <-werr; err != nil {
		b.Fatal(err)
	}
	r := result{mode: mode, n: n, jobs: total, elapsed: elapsed, clientPerJb: clientCPU / time.Duration(total)}
	for i := range n {
		r.perMaster = append(r.perMaster, (cpu1[i]-cpu0[i])/time.Duration(total))
	}
	return r
}

// produce enqueues count jobs the way mode says.
func produce(ctx context.Context, p *streamq.PartitionedProducer, mode string, g, count int) error {
	payload := []byte("0123456789abcdef0123456789abcdef")
	switch mode {
	case "single":
		for range count {
			if _, err := p.Enqueue(ctx, payload); err != nil {
				return err
			}
		}
	case "batch":
		jobs := make([]streamq.Job, batch)
		for i := range jobs {
			jobs[i].Payload = payload
		}
		for i := 0; i < count; i += batch {
			if _, err := p.EnqueueBatch(ctx, jobs[:min(batch, count-i)]); err != nil {
				return err
			}
		}
	case "keyed":
		jobs := make([]streamq.KeyedJob, batch)
		for i := 0; i < count; i += batch {
			for j := range jobs {
				jobs[j] = streamq.KeyedJob{Key: "customer:" + strconv.Itoa((g*count+i+j)%keys), Job: streamq.Job{Payload: payload}}
			}
			if _, err := p.EnqueueKeyed(ctx, jobs[:min(batch, count-i)]); err != nil {
				return err
			}
		}
	}
	return nil
}

// BenchmarkPartitions measures one logical queue of N partitions on N
// CPU-limited masters (N = 1, 2, 4) end to end, for single enqueues,
// batches and batches routed by 1,000 keys. Run it alone:
//
//	go test -run '^$' -bench Partitions -benchtime 1x ./internal/partbench/
func BenchmarkPartitions(b *testing.B) {
	ctx := context.Background()
	cl := redistest.StartCluster(b, redistest.ClusterOptions{Masters: 4, Replicas: -1})
	masters := cl.Nodes()
	limitCPU(b, masters)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	b.Cleanup(func() { _ = c.Close() })
	for range b.N {
		var rows []result
		base := map[string]float64{}
		modes, ns := []string{"single", "batch", "keyed"}, []int{1, 2, 4}
		for _, mode := range modes {
			for _, n := range ns {
				r := run(ctx, b, cl, c, masters, mode, n)
				if n == 1 {
					base[mode] = r.rate()
				}
				rows = append(rows, r)
			}
		}
		var sb strings.Builder
		fmt.Fprintf(&sb, "\n| mode | partitions (masters) | jobs/s | x 1 partition | Redis CPU per job, each master (µs) | spread | client CPU per job (µs) |\n|---|---|---|---|---|---|---|\n")
		for _, r := range rows {
			var cells []string
			lo, hi := r.perMaster[0], r.perMaster[0]
			for _, d := range r.perMaster {
				cells = append(cells, fmt.Sprintf("%.1f", float64(d.Nanoseconds())/1000*float64(r.n)))
				lo, hi = min(lo, d), max(hi, d)
			}
			mean := float64(0)
			for _, d := range r.perMaster {
				mean += float64(d)
			}
			mean /= float64(len(r.perMaster))
			spread := (float64(hi) - float64(lo)) / 2 / mean * 100
			fmt.Fprintf(&sb, "| %s | %d | %.0f | %.2f | %s | ±%.0f %% | %.1f |\n", r.mode, r.n, r.rate(), r.rate()/base[r.mode], strings.Join(cells, " / "), spread, float64(r.clientPerJb.Nanoseconds())/1000)
			b.ReportMetric(r.rate(), fmt.Sprintf("jobs/s_%s_%d", r.mode, r.n))
		}
		fmt.Print(sb.String()) // b.Log would cut the table short
	}
}
