package bench

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Report is the JSON document written by -json.
type Report struct {
	Started      time.Time         `json:"started"`
	GoVersion    string            `json:"go_version"`
	GOOS         string            `json:"goos"`
	GOARCH       string            `json:"goarch"`
	NumCPU       int               `json:"num_cpu"`
	GOMAXPROCS   int               `json:"gomaxprocs"`
	CPUModel     string            `json:"cpu_model,omitempty"`
	RedisVersion string            `json:"redis_version"`
	RedisAddr    string            `json:"redis_addr"`
	Settings     map[string]string `json:"settings"`
	Results      []Result          `json:"results"`
	Memcheck     *MemcheckResult   `json:"memcheck,omitempty"`
}

// Result is one line of output: a scenario variant, streamq next to baseline.
type Result struct {
	Scenario string  `json:"scenario"`
	Variant  string  `json:"variant"`
	Param    int     `json:"param"` // goroutines, batch size or concurrency
	Unit     string  `json:"unit"`
	Streamq  Sample  `json:"streamq"`
	Baseline Sample  `json:"baseline"`
	Ratio    float64 `json:"ratio"` // streamq median / baseline median
	Notes    string  `json:"notes,omitempty"`
}

// Sample holds the runs of one side of a Result.
type Sample struct {
	Runs   []Run   `json:"runs"`
	Median float64 `json:"median"` // median rate

	// Medians over runs of the per-run figures (0 when not measured).
	ServerCmdsPerJob float64 `json:"server_cmds_per_job,omitempty"`
	ClientCmdsPerJob float64 `json:"client_cmds_per_job,omitempty"`
	AllocsPerJob     float64 `json:"allocs_per_job,omitempty"`
	BytesPerJob      float64 `json:"bytes_per_job,omitempty"`
	CPUMicrosPerJob  float64 `json:"cpu_us_per_job,omitempty"`
	// RedisCPUMicrosPerJob is the Redis server's CPU time per job (INFO
	// cpu, user+system): where a scenario is bound by Redis, its cost.
	RedisCPUMicrosPerJob float64 `json:"redis_cpu_us_per_job,omitempty"`
	// GCMicrosPerJob is the part of CPUMicrosPerJob spent by the garbage
	// collector (every allocated byte brings it closer to its next cycle).
	GCMicrosPerJob float64  `json:"gc_cpu_us_per_job,omitempty"`
	Latency        *Latency `json:"latency,omitempty"`
}

// Run is one measurement.
type Run struct {
	Jobs       int64            `json:"jobs"`
	Seconds    float64          `json:"seconds"`
	Rate       float64          `json:"rate"`
	TimedOut   bool             `json:"timed_out,omitempty"`
	ServerCmds int64            `json:"server_cmds,omitempty"` // INFO commandstats calls delta (INFO itself excluded)
	ClientCmds int64            `json:"client_cmds,omitempty"` // commands this client sent
	CmdStats   map[string]int64 `json:"cmdstats,omitempty"`    // per-command calls delta
	Mallocs    uint64           `json:"mallocs,omitempty"`
	AllocBytes uint64           `json:"alloc_bytes,omitempty"`
	CPUSeconds float64          `json:"cpu_seconds,omitempty"`       // CPU time of this process (user+system)
	RedisCPU   float64          `json:"redis_cpu_seconds,omitempty"` // CPU time of the Redis server (user+system)
	GCSeconds  float64          `json:"gc_cpu_seconds,omitempty"`    // CPU time of this process's garbage collector (runtime/metrics estimate)
	Latency    *Latency         `json:"latency,omitempty"`
}

// Latency are enqueue-to-handler-start percentiles in milliseconds.
type Latency struct {
	OfferedRate  float64 `json:"offered_rate"`
	AchievedRate float64 `json:"achieved_rate"`
	Samples      int     `json:"samples"`
	P50          float64 `json:"p50_ms"`
	P99          float64 `json:"p99_ms"`
	P999         float64 `json:"p999_ms"`
	Max          float64 `json:"max_ms"`
}

func newReport(ctx context.Context, o *options, admin *redis.Client) *Report {
	r := &Report{
		Started:    time.Now().UTC().Truncate(time.Second),
		GoVersion:  runtime.Version(),
		GOOS:       runtime.GOOS,
		GOARCH:     runtime.GOARCH,
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		CPUModel:   cpuModel(),
		RedisAddr:  o.addr,
		Settings: map[string]string{
			"scenarios":           strings.Join(o.scenarios, ","),
			"jobs":                strconv.Itoa(o.jobs),
			"enqueue_jobs":        strconv.Itoa(o.enqueueJobs),
			"payload":             strconv.Itoa(o.payload),
			"runs":                strconv.Itoa(o.runs),
			"latency_concurrency": strconv.Itoa(o.latConc),
			"latency_duration":    o.latDuration.String(),
			"latency_load":        strconv.FormatFloat(o.latLoad, 'g', -1, 64),
		},
	}
	info, err := admin.Info(ctx, "server").Result()
	if err == nil {
		r.RedisVersion = infoField(info, "redis_version")
	}
	return r
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// finish computes medians and the ratio.
func (r *Result) finish() {
	r.Streamq.finish()
	r.Baseline.finish()
	if r.Baseline.Median > 0 {
		r.Ratio = r.Streamq.Median / r.Baseline.Median
	}
}

func (s *Sample) finish() {
	if len(s.Runs) == 0 {
		return
	}
	pick := func(f func(Run) float64) float64 {
		v := make([]float64, 0, len(s.Runs))
		for _, r := range s.Runs {
			v = append(v, f(r))
		}
		return median(v)
	}
	s.Median = pick(func(r Run) float64 { return r.Rate })
	per := func(n float64, r Run) float64 {
		if r.Jobs == 0 {
			return 0
		}
		return n / float64(r.Jobs)
	}
	s.ServerCmdsPerJob = pick(func(r Run) float64 { return per(float64(r.ServerCmds), r) })
	s.ClientCmdsPerJob = pick(func(r Run) float64 { return per(float64(r.ClientCmds), r) })
	s.AllocsPerJob = pick(func(r Run) float64 { return per(float64(r.Mallocs), r) })
	s.BytesPerJob = pick(func(r Run) float64 { return per(float64(r.AllocBytes), r) })
	s.CPUMicrosPerJob = pick(func(r Run) float64 { return per(r.CPUSeconds*1e6, r) })
	s.RedisCPUMicrosPerJob = pick(func(r Run) float64 { return per(r.RedisCPU*1e6, r) })
	s.GCMicrosPerJob = pick(func(r Run) float64 { return per(r.GCSeconds*1e6, r) })
	if s.Runs[0].Latency != nil {
		// The run whose p99 is the median p99 represents the sample.
		runs := slices.Clone(s.Runs)
		slices.SortFunc(runs, func(a, b Run) int {
			switch {
			case a.Latency.P99 < b.Latency.P99:
				return -1
			case a.Latency.P99 > b.Latency.P99:
				return 1
			}
			return 0
		})
		s.Latency = runs[len(runs)/2].Latency
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// percentile returns the p-th percentile (0..100) of sorted values, nearest rank.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// gcCPU returns the CPU time this process's garbage collector used so far,
// as the runtime estimates it.
func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// redisCPU returns the CPU time the Redis server used so far (INFO cpu,
// used_cpu_user plus used_cpu_sys), or 0 when it cannot be read.
func redisCPU(ctx context.Context, admin *redis.Client) float64 {
	info, err := admin.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	user, err1 := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
	sys, err2 := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return user + sys
}

// cmdStats reads INFO commandstats: calls per command.
func cmdStats(ctx context.Context, admin *redis.Client) (map[string]int64, error) {
	costs, err := cmdCosts(ctx, admin)
	if err != nil {
		return nil, err
	}
	m := make(map[string]int64, len(costs))
	for k, c := range costs {
		m[k] = c.calls
	}
	return m, nil
}

// cmdDelta returns after-before per command and the total, leaving out INFO
// (the benchmark's own probe).
func cmdDelta(before, after map[string]int64) (map[string]int64, int64) {
	d := make(map[string]int64)
	var total int64
	for k, v := range after {
		if k == "info" {
			continue
		}
		if n := v - before[k]; n > 0 {
			d[k] = n
			total += n
		}
	}
	return d, total
}

// probe measures one run: Redis commands (server and client side),
// allocations and time. Start it right before the measured work and call
// stop right after.
type probe struct {
	admin   *redis.Client
	hook    *countHook
	cmds    map[string]int64
	ms      runtime.MemStats
	started time.Time
	cpu     time.Duration
	gc      float64 // GC CPU seconds at the start
	redis   float64 // Redis server CPU seconds at the start (0: unknown)
	client0 int64
}

func startProbe(ctx context.Context, admin *redis.Client, hook *countHook) (*probe, error) {
	p := &probe{admin: admin, hook: hook}
	var err error
	if p.cmds, err = cmdStats(ctx, admin); err != nil {
		return nil, err
	}
	p.client0 = hook.cmds.Load()
	runtime.ReadMemStats(&p.ms)
	p.cpu = processCPU()
	p.gc = gcCPU()
	p.redis = redisCPU(ctx, admin)
	p.started = time.Now()
	return p, nil
}

// stop ends the measurement of jobs jobs.
func (p *probe) stop(ctx context.Context, jobs int64, timedOut bool) Run {
	elapsed := time.Since(p.started)
	cpu := processCPU() - p.cpu
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	client := p.hook.cmds.Load() - p.client0
	r := Run{
		Jobs:       jobs,
		Seconds:    elapsed.Seconds(),
		TimedOut:   timedOut,
		ClientCmds: client,
		Mallocs:    ms.Mallocs - p.ms.Mallocs,
		AllocBytes: ms.TotalAlloc - p.ms.TotalAlloc,
		CPUSeconds: cpu.Seconds(),
		GCSeconds:  gcCPU() - p.gc,
	}
	if elapsed > 0 {
		r.Rate = float64(jobs) / elapsed.Seconds()
	}
	if after := redisCPU(ctx, p.admin); p.redis > 0 && after > p.redis {
		r.RedisCPU = after - p.redis
	}
	if after, err := cmdStats(ctx, p.admin); err == nil {
		r.CmdStats, r.ServerCmds = cmdDelta(p.cmds, after)
	}
	return r
}

// countHook counts the commands a client sends and the entries its XACKs
// acknowledge on one stream, and closes done once target entries are
// acknowledged. It allocates nothing per command.
type countHook struct {
	stream string
	target int64
	cmds   atomic.Int64
	acked  atomic.Int64
	once   sync.Once
	done   chan struct{}
}

func newCountHook(stream string, target int64) *countHook {
	return &countHook{stream: stream, target: target, done: make(chan struct{})}
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.cmds.Add(1)
		h.observe(cmd)
		return err
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.cmds.Add(int64(len(cmds)))
		for _, c := range cmds {
			h.observe(c)
		}
		return err
	}
}

func (h *countHook) observe(cmd redis.Cmder) {
	if h.target <= 0 || cmd.Name() != "xack" {
		return
	}
	ic, ok := cmd.(*redis.IntCmd)
	if !ok || ic.Err() != nil {
		return
	}
	if args := cmd.Args(); len(args) < 2 || args[1] != h.stream {
		return
	}
	if h.acked.Add(ic.Val()) >= h.target {
		h.once.Do(func() { close(h.done) })
	}
}

// newClient returns a fresh client with h installed, so each measurement
// starts with its own connection pool.
func newClient(addr string, h *countHook, poolSize int) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: max(poolSize, 10*runtime.GOMAXPROCS(0))})
	rdb.AddHook(h)
	return rdb
}
