package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/streamq/streamq"
)

const (
	// memcheckEvery is how often (in processed jobs) the consumer reports
	// progress; RSS is sampled every memcheckSample jobs.
	memcheckEvery  = 10_000
	memcheckSample = 100_000
	// memcheckBacklog bounds the jobs waiting in the stream, so Redis memory
	// stays small however many jobs the check runs.
	memcheckBacklog = 50_000
	memcheckBatch   = 1_000
)

// MemcheckResult is the outcome of -memcheck.
type MemcheckResult struct {
	Jobs         int             `json:"jobs"`
	Concurrency  int             `json:"concurrency"`
	Seconds      float64         `json:"seconds"`
	Samples      []MemSample     `json:"samples"`
	Consumer     *ConsumerMemory `json:"consumer,omitempty"`
	AllocsPerJob float64         `json:"allocs_per_job,omitempty"`
	Note         string          `json:"note,omitempty"`
}

// MemSample is the consumer process's memory after Jobs jobs.
type MemSample struct {
	Jobs   int64 `json:"jobs"`
	RSSKiB int64 `json:"rss_kib"`
	HWMKiB int64 `json:"peak_rss_kib"`
}

// ConsumerMemory is what the consumer process reports when it exits.
type ConsumerMemory struct {
	Processed  int64  `json:"processed"`
	Mallocs    uint64 `json:"mallocs"`
	TotalAlloc uint64 `json:"total_alloc"`
	HeapInuse  uint64 `json:"heap_inuse"`
	Sys        uint64 `json:"sys"`
	NumGC      uint32 `json:"num_gc"`
	Goroutines int    `json:"goroutines"`
}

// memcheck runs a consumer in a child process (so its RSS is the consumer's
// alone) and feeds it -memcheck-jobs jobs from this process, sampling the
// child's RSS every 100,000 jobs.
func (b *bench) memcheck(ctx context.Context) error {
	name := b.name("memcheck")
	rdb := redis.NewClient(&redis.Options{Addr: b.o.addr})
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, name, nil)
	if err != nil {
		return err
	}
	keys := queueKeys(q)
	b.track(keys...)
	defer b.drop(keys...)
	if err := q.Setup(ctx); err != nil {
		return err
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	left := time.Until(deadline(ctx))
	args := append(append([]string(nil), b.o.self...), "-memcheck-consumer", "-addr", b.o.addr, "-queue", name,
		"-memcheck-concurrency", strconv.Itoa(b.o.memcheckConc), "-max-time", left.String())
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	var processed atomic.Int64
	var final atomic.Pointer[ConsumerMemory]
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "progress "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				processed.Store(n)
			} else if v, ok := strings.CutPrefix(line, "final "); ok {
				var m ConsumerMemory
				if json.Unmarshal([]byte(v), &m) == nil {
					final.Store(&m)
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	stopChild := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-readDone
		return cmd.Wait()
	}

	res := &MemcheckResult{Jobs: b.o.memcheckJobs, Concurrency: b.o.memcheckConc}
	b.rep.Memcheck = res
	fmt.Fprintf(b.out, "memcheck: consumer pid %d, concurrency %d, %s jobs, payload %d B\n",
		pid, b.o.memcheckConc, commas(int64(b.o.memcheckJobs)), b.o.payload)
	sample := func(jobs int64) {
		rss, hwm := procRSS(pid)
		res.Samples = append(res.Samples, MemSample{Jobs: jobs, RSSKiB: rss, HWMKiB: hwm})
		fmt.Fprintf(b.out, "memcheck: %9s jobs  RSS %6.1f MiB  peak %6.1f MiB\n", commas(jobs), float64(rss)/1024, float64(hwm)/1024)
	}

	payload := makePayload(b.o.payload)
	jobs := make([]streamq.Job, memcheckBatch)
	for i := range jobs {
		jobs[i].Payload = payload
	}
	total := int64(b.o.memcheckJobs)
	start := time.Now()
	var enqueued int64
	nextSample := int64(memcheckSample)
	sampledStart := false
	for ctx.Err() == nil {
		done := processed.Load()
		if !sampledStart && time.Since(start) > 500*time.Millisecond {
			sample(0) // the consumer is up; few or no jobs yet
			sampledStart = true
		}
		if done >= nextSample {
			sample(done)
			if _, err := q.Trim(ctx); err != nil && ctx.Err() == nil {
				_ = stopChild()
				return err
			}
			nextSample += memcheckSample
		}
		if done >= total {
			break
		}
		if enqueued < total && enqueued-done < memcheckBacklog {
			n := min(int64(memcheckBatch), total-enqueued)
			if _, err := p.EnqueueBatch(ctx, jobs[:n]); err != nil {
				if ctx.Err() != nil {
					break
				}
				_ = stopChild()
				return err
			}
			enqueued += n
			continue
		}
		// Backlog full or all enqueued: wait for the consumer.
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	res.Seconds = time.Since(start).Seconds()
	werr := stopChild()
	if m := final.Load(); m != nil {
		res.Consumer = m
		if m.Processed > 0 {
			res.AllocsPerJob = float64(m.Mallocs) / float64(m.Processed)
		}
		fmt.Fprintf(b.out, "memcheck: consumer processed %s jobs in %.1fs; %.1f allocs/job over its whole life, heap in use %.1f MiB, %d GCs\n",
			commas(m.Processed), res.Seconds, res.AllocsPerJob, float64(m.HeapInuse)/(1<<20), m.NumGC)
	}
	if processed.Load() < total {
		res.Note = fmt.Sprintf("stopped after %d of %d jobs: %v", processed.Load(), total, context.Cause(ctx))
		fmt.Fprintln(b.out, "memcheck:", res.Note)
	}
	if werr != nil && ctx.Err() == nil {
		return fmt.Errorf("memcheck consumer: %w", werr)
	}
	return nil
}

func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Hour)
}

// procRSS returns VmRSS and VmHWM of process pid in KiB (0 if unknown).
func procRSS(pid int) (rss, hwm int64) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm
}

// memcheckConsumer is the child process of -memcheck: a Consumer with a no-op
// handler that prints "progress N" every 10,000 jobs and, when its context
// ends (SIGTERM from the parent, or -max-time), "final {json}".
func memcheckConsumer(ctx context.Context, o *options, out io.Writer) error {
	rdb := redis.NewClient(&redis.Options{Addr: o.addr})
	defer rdb.Close()
	q, err := streamq.NewQueue(rdb, o.queue, nil)
	if err != nil {
		return err
	}
	var n atomic.Int64
	progress := make(chan int64, 16)
	h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		if k := n.Add(1); k%memcheckEvery == 0 {
			select {
			case progress <- k:
			default:
			}
		}
		return nil
	})
	cons, err := streamq.NewConsumer(q, h, &streamq.ConsumerConfig{Name: "memcheck", Concurrency: o.memcheckConc})
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- cons.Run(ctx) }()
	w := bufio.NewWriter(out)
	for {
		select {
		case k := <-progress:
			fmt.Fprintf(w, "progress %d\n", k)
			_ = w.Flush()
			continue
		case err = <-errc:
		}
		break
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	data, _ := json.Marshal(ConsumerMemory{
		Processed:  n.Load(),
		Mallocs:    ms.Mallocs,
		TotalAlloc: ms.TotalAlloc,
		HeapInuse:  ms.HeapInuse,
		Sys:        ms.Sys,
		NumGC:      ms.NumGC,
		Goroutines: runtime.NumGoroutine(),
	})
	fmt.Fprintf(w, "final %s\n", data)
	_ = w.Flush()
	return err
}
