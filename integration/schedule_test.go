package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/periodic"
)

// schedQueue opens the queue called name with its own client, as a separate
// process would.
func schedQueue(t *testing.T, name string) (*redis.Client, *streamq.Queue, *streamq.Producer) {
	t.Helper()
	rdb := redistest.NewClient(t)
	q, err := streamq.NewQueue(rdb, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		t.Fatal(err)
	}
	redistest.DeleteKeysAtCleanup(t, rdb, core.Of(q).Keys.Part("*"))
	return rdb, q, p
}

// schedConsumers starts n consumers of q (each with its own client and its
// own delayed-job scheduler at the default SchedulerInterval) running h. The
// returned stop cancels them and waits until every Run returned; it is also
// registered with t.Cleanup.
func schedConsumers(t *testing.T, name string, n int, cfg streamq.ConsumerConfig, h streamq.HandlerFunc) (stop func()) {
	t.Helper()
	if cfg.Block == 0 {
		cfg.Block = 100 * time.Millisecond
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, n)
	for i := range n {
		_, q, _ := schedQueue(t, name)
		c := cfg
		c.Name = fmt.Sprintf("c%d", i)
		cons, err := streamq.NewConsumer(q, h, &c)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		go func() { errs <- cons.Run(ctx) }()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			timeout := time.NewTimer(10 * time.Second)
			defer timeout.Stop()
			for range n {
				select {
				case err := <-errs:
					if err != nil {
						t.Errorf("consumer Run: %v", err)
					}
				case <-timeout.C:
					t.Errorf("consumers did not stop within 10s")
					return
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestSchedule_DelayedJobsExactlyOnceNeverEarly enqueues 1,000 jobs due in
// 0-2 s for 5 consumers whose schedulers all race to move them: each job must
// be handled exactly once, and never before its due time.
func TestSchedule_DelayedJobsExactlyOnceNeverEarly(t *testing.T) {
	t.Parallel()
	const (
		jobs      = 1000
		consumers = 5
		maxDelay  = 2 * time.Second
	)
	name := redistest.Name(t)
	rdb, q, p := schedQueue(t, name)
	ctx := context.Background()

	var (
		handled atomic.Int64
		mu      sync.Mutex
		count   [jobs]int
		delay   [jobs]time.Duration // handler start - due
		moved   [jobs]time.Duration // time in the stream entry ID - due
	)
	stop := schedConsumers(t, name, consumers, streamq.ConsumerConfig{}, func(_ context.Context, m *streamq.Message) error {
		start := time.Now()
		idx, due, err := schedParseDue(m.Payload)
		if err != nil {
			return streamq.Permanent(err)
		}
		ms, _, _ := strings.Cut(m.EntryID, "-")
		added, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return streamq.Permanent(fmt.Errorf("entry ID %q: %v", m.EntryID, err))
		}
		mu.Lock()
		count[idx]++
		delay[idx] = start.Sub(due)
		moved[idx] = time.UnixMilli(added).Sub(due)
		mu.Unlock()
		handled.Add(1)
		return nil
	})

	ids := make([]string, jobs)
	for i := range jobs {
		d := rand.N(maxDelay + 1)
		// The due time is taken before Enqueue, so it is at or before the
		// time ProcessIn computes inside Enqueue; it is cut to whole
		// milliseconds, the resolution of the delayed set.
		due := time.Now().Add(d).UnixMilli()
		id, err := p.Enqueue(ctx, []byte(strconv.Itoa(i)+":"+strconv.FormatInt(due, 10)), streamq.ProcessIn(d))
		if err != nil {
			t.Fatalf("enqueue %d: %v", i, err)
		}
		ids[i] = id
	}
	redistest.WaitFor(t, 30*time.Second, "all delayed jobs handled", func() bool { return handled.Load() >= jobs })
	// Let the consumers finish their acknowledgements, then look at Redis.
	stop()

	mu.Lock()
	defer mu.Unlock()
	for i, n := range count {
		if n != 1 {
			t.Errorf("job %d (%s) handled %d times, want 1", i, ids[i], n)
		}
	}
	var early []string
	ds := make([]time.Duration, 0, jobs)
	for i, d := range delay {
		if d < 0 {
			early = append(early, fmt.Sprintf("job %d %s early", i, -d))
		}
		ds = append(ds, d)
	}
	if len(early) > 0 {
		t.Errorf("%d jobs ran before their due time: %s", len(early), strings.Join(early[:min(len(early), 10)], "; "))
	}
	slices.Sort(ds)
	t.Logf("delay from due time to handler start over %d jobs, %d consumers, SchedulerInterval %s: p50 %s, p99 %s, max %s",
		jobs, consumers, streamq.DefaultSchedulerInterval,
		ds[len(ds)/2].Round(time.Microsecond), ds[len(ds)*99/100].Round(time.Microsecond), ds[len(ds)-1].Round(time.Microsecond))
	// The entry ID holds the time (ms, Redis's clock) the job was added to
	// the stream, so this is the scheduler's own lateness.
	ms := slices.Clone(moved[:])
	slices.Sort(ms)
	t.Logf("delay from due time to the job's entry in the stream (ms resolution): p50 %s, p90 %s, p99 %s, max %s",
		ms[len(ms)/2], ms[len(ms)*90/100], ms[len(ms)*99/100], ms[len(ms)-1])

	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every job entered the stream exactly once: no double move by racing schedulers.
	if st.Length != jobs || st.Delayed != 0 || st.Pending != 0 {
		t.Errorf("stats %+v: want %d stream entries, nothing delayed or pending", st, jobs)
	}
	if n := rdb.HLen(ctx, core.Of(q).Keys.Part("delayed:jobs")).Val(); n != 0 {
		t.Errorf("%d delayed job bodies left behind", n)
	}
}

func schedParseDue(payload []byte) (int, time.Time, error) {
	a, b, ok := strings.Cut(string(payload), ":")
	idx, err1 := strconv.Atoi(a)
	ms, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || idx < 0 || idx >= 1000 {
		return 0, time.Time{}, fmt.Errorf("bad payload %q", payload)
	}
	return idx, time.UnixMilli(ms), nil
}

// Environment of TestHelperSchedulerProcess: the queue to schedule on (the
// helper runs only when it is set) and the scheduler's number, which it puts
// in a header of every job it enqueues. REDIS_ADDR points it at the parent's
// Redis.
const (
	envHelperQueue = "STREAMQ_TEST_SCHEDULER_QUEUE"
	envHelperIndex = "STREAMQ_TEST_SCHEDULER_INDEX"
	// headerScheduler names the scheduler process that enqueued a job.
	headerScheduler = "test-scheduler"
)

// TestHelperSchedulerProcess is not a test of its own: it is the body of the
// scheduler processes that TestSchedule_PeriodicOnePerTickAcrossProcesses
// starts by running this test binary again. It registers the schedules
// "cron-1s" and "interval-1s", prints "ready" and runs a periodic.Scheduler
// until it is killed or its stdin closes (so that it cannot outlive a parent
// that died; -test.timeout bounds it as well).
func TestHelperSchedulerProcess(t *testing.T) {
	t.Parallel()
	name := os.Getenv(envHelperQueue)
	if name == "" {
		t.Skip("helper process of TestSchedule_PeriodicOnePerTickAcrossProcesses; runs only when that test starts it")
	}
	_, _, p := schedQueue(t, name)
	s, err := periodic.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := periodic.WithHeaders(map[string]string{headerScheduler: os.Getenv(envHelperIndex)})
	if err := s.Register("cron-1s", "* * * * * *", []byte("payload-cron-1s"), h); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterInterval("interval-1s", time.Second, []byte("payload-interval-1s"), h); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdinClosed := make(chan struct{})
	go func() {
		defer close(stdinClosed)
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	fmt.Println("ready")
	if err := s.Run(ctx); err != nil {
		t.Fatalf("scheduler Run: %v", err)
	}
	<-stdinClosed
}

// schedProc is one scheduler process started by schedStartProc.
type schedProc struct {
	index  int
	cmd    *exec.Cmd
	stdin  io.Closer
	ready  chan struct{} // closed when the process printed "ready"
	done   chan struct{} // closed when the process has exited and was reaped
	err    error         // exit status, valid after done
	output *relLogs      // stdout and stderr, shown if the test fails
}

// schedStartProc runs this test binary again as a scheduler process on the
// queue called name (see TestHelperSchedulerProcess). The test's cleanup
// kills it if it still runs.
func schedStartProc(t *testing.T, name string, index int) *schedProc {
	t.Helper()
	p := &schedProc{
		index:  index,
		ready:  make(chan struct{}),
		done:   make(chan struct{}),
		output: &relLogs{},
	}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestHelperSchedulerProcess$", "-test.count=1", "-test.timeout=2m")
	p.cmd.Env = append(os.Environ(),
		"REDIS_ADDR="+redistest.Addr(),
		envHelperQueue+"="+name,
		envHelperIndex+"="+strconv.Itoa(index),
	)
	p.cmd.Stdout = &readyWriter{w: p.output, ready: p.ready}
	p.cmd.Stderr = p.output
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start scheduler process %d: %v", index, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("scheduler process %d (%v): output:\n%s", index, p.err, p.output.String())
		}
	})
	return p
}

// kill SIGKILLs the process and waits until it has been reaped.
func (p *schedProc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.stdin.Close()
	<-p.done
}

// readyWriter passes output on to w and closes ready once a line "ready"
// has been written.
type readyWriter struct {
	w     io.Writer
	ready chan struct{}
	line  []byte
	seen  bool
}

func (r *readyWriter) Write(b []byte) (int, error) {
	if !r.seen {
		r.line = append(r.line, b...)
		for {
			i := bytes.IndexByte(r.line, '\n')
			if i < 0 {
				break
			}
			if string(r.line[:i]) == "ready" {
				r.seen = true
				close(r.ready)
				break
			}
			r.line = r.line[i+1:]
		}
	}
	return r.w.Write(b)
}

// schedWatch waits for d, failing the test at once if one of the processes
// that should be running exits.
func schedWatch(t *testing.T, procs []*schedProc, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	cases := make([]reflect.SelectCase, 0, len(procs)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)})
	for _, p := range procs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.done)})
	}
	if i, _, _ := reflect.Select(cases); i > 0 {
		p := procs[i-1]
		t.Fatalf("scheduler process %d exited early (%v); output:\n%s", p.index, p.err, p.output.String())
	}
}

// schedJob is a periodic job read back from the stream.
type schedJob struct {
	id        string
	schedule  string
	tick      time.Time
	scheduler string
	payload   string
}

// schedReadJobs reads the stream of q and decodes its periodic jobs.
func schedReadJobs(t *testing.T, rdb *redis.Client, q *streamq.Queue) []schedJob {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), core.Of(q).Keys.Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]schedJob, 0, len(entries))
	for _, e := range entries {
		raw, _ := e.Values["headers"].(string)
		m := &streamq.Message{ID: e.ID}
		if err := json.Unmarshal([]byte(raw), &m.Headers); err != nil {
			t.Fatalf("entry %s: headers %q: %v", e.ID, raw, err)
		}
		s, tick, ok := periodic.FromMessage(m)
		if !ok {
			t.Fatalf("entry %s is not a periodic job: headers %v", e.ID, m.Headers)
		}
		payload, _ := e.Values["payload"].(string)
		jobs = append(jobs, schedJob{id: e.ID, schedule: s, tick: tick, scheduler: m.Headers[headerScheduler], payload: payload})
	}
	return jobs
}

// TestSchedule_PeriodicOnePerTickAcrossProcesses runs 4 scheduler processes
// (this test binary run again, see TestHelperSchedulerProcess) for 10 s with
// two schedules ticking every second. Halfway it SIGKILLs the process that
// enqueued the latest job, the one a leader-based design would depend on.
// Each schedule must give 10±1 jobs, one per tick, and keep ticking after the
// kill.
func TestSchedule_PeriodicOnePerTickAcrossProcesses(t *testing.T) {
	t.Parallel()
	const (
		processes = 4
		window    = 10 * time.Second
		startup   = 30 * time.Second // bound on a process getting ready
	)
	name := redistest.Name(t)
	rdb, q, _ := schedQueue(t, name)

	procs := make([]*schedProc, processes)
	for i := range procs {
		procs[i] = schedStartProc(t, name, i)
	}
	for _, p := range procs {
		select {
		case <-p.ready:
		case <-p.done:
			t.Fatalf("scheduler process %d exited before it was ready (%v); output:\n%s", p.index, p.err, p.output.String())
		case <-time.After(startup):
			t.Fatalf("scheduler process %d not ready within %s", p.index, startup)
		}
	}
	start := time.Now()

	schedWatch(t, procs, window/2)
	last := schedReadJobs(t, rdb, q)
	if len(last) == 0 {
		t.Fatalf("no periodic job after %s", window/2)
	}
	victim, err := strconv.Atoi(last[len(last)-1].scheduler)
	if err != nil || victim < 0 || victim >= processes {
		t.Fatalf("latest job %+v does not name its scheduler process", last[len(last)-1])
	}
	procs[victim].kill()
	killedAt := time.Now()
	t.Logf("SIGKILLed scheduler process %d (it enqueued the latest job, %s of %s) after %s",
		victim, last[len(last)-1].schedule, last[len(last)-1].tick.Format(time.TimeOnly), killedAt.Sub(start).Round(time.Millisecond))
	alive := slices.Delete(slices.Clone(procs), victim, victim+1)

	schedWatch(t, alive, window-time.Since(start))
	for _, p := range alive {
		p.kill()
	}
	t.Logf("ran %s", time.Since(start).Round(time.Millisecond))

	jobs := schedReadJobs(t, rdb, q)
	bySchedule := map[string][]schedJob{}
	for _, j := range jobs {
		if j.payload != "payload-"+j.schedule {
			t.Errorf("job %s of %s has payload %q", j.id, j.schedule, j.payload)
		}
		bySchedule[j.schedule] = append(bySchedule[j.schedule], j)
	}
	if len(bySchedule) != 2 {
		t.Errorf("jobs of schedules %v, want cron-1s and interval-1s", slices.Sorted(maps.Keys(bySchedule)))
	}
	for _, s := range []string{"cron-1s", "interval-1s"} {
		js := bySchedule[s]
		slices.SortFunc(js, func(a, b schedJob) int { return a.tick.Compare(b.tick) })
		ts := make([]time.Time, len(js))
		writers := map[string]int{}
		afterKill := 0
		for i, j := range js {
			ts[i] = j.tick
			writers[j.scheduler]++
			if j.tick.After(killedAt) {
				afterKill++
				if j.scheduler == strconv.Itoa(victim) {
					t.Errorf("%s: tick %s enqueued by process %d after it was killed", s, j.tick, victim)
				}
			}
		}
		t.Logf("%s: %d jobs, ticks %s .. %s, %d after the kill; jobs per process %v", s, len(js), schedFirst(ts), schedLast(ts), afterKill, writers)
		if n := len(js); n < 9 || n > 11 {
			t.Errorf("%s: %d jobs in %s, want 10±1", s, n, window)
		}
		// The kill came halfway: about 5 ticks remained, so at least 3 must
		// have been enqueued by the surviving processes.
		if afterKill < 3 {
			t.Errorf("%s: only %d jobs after the kill, want the survivors to keep ticking", s, afterKill)
		}
		for i := range ts {
			if ts[i].Nanosecond() != 0 {
				t.Errorf("%s: tick %s is not on a whole second", s, ts[i])
			}
			if i > 0 && ts[i].Equal(ts[i-1]) {
				t.Errorf("%s: two jobs for tick %s", s, ts[i])
			}
		}
	}
}

func schedFirst(ts []time.Time) string {
	if len(ts) == 0 {
		return "-"
	}
	return ts[0].Format(time.RFC3339)
}

func schedLast(ts []time.Time) string {
	if len(ts) == 0 {
		return "-"
	}
	return ts[len(ts)-1].Format(time.RFC3339)
}

// TestSchedule_CancelDelayedJob: a delayed job cancelled before it is due
// never runs, with or without a scheduler running; cancelling a job that
// already ran, or an unknown ID, reports false. No step depends on how fast
// the machine is: the jobs whose due time passes during the test are
// cancelled before any scheduler of the queue runs, and the job cancelled
// while a scheduler runs is due in an hour.
func TestSchedule_CancelDelayedJob(t *testing.T) {
	t.Parallel()
	name := redistest.Name(t)
	rdb, q, p := schedQueue(t, name)
	ctx := context.Background()

	// No consumer, so no scheduler, runs yet: whatever the delay, Cancel
	// comes first.
	cancelled, err := p.Enqueue(ctx, []byte("cancelled"), streamq.ProcessIn(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Enqueue(ctx, []byte("later"), streamq.ProcessIn(20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	ok, err := q.CancelDelayed(ctx, cancelled)
	if err != nil || !ok {
		t.Fatalf("Cancel before due = %v, %v; want true", ok, err)
	}

	ran := make(chan string, 10)
	schedConsumers(t, name, 1, streamq.ConsumerConfig{Concurrency: 1}, func(_ context.Context, m *streamq.Message) error {
		ran <- string(m.Payload)
		return nil
	})
	// The scheduler moves due jobs in due-time order, so once "later" is in
	// the stream, "cancelled" (due before it) would be there too.
	if got := schedWaitPayload(t, ran); got != "later" {
		t.Fatalf("%q ran, want only \"later\"", got)
	}
	if got := schedStreamPayloads(t, rdb, q); !slices.Equal(got, []string{"later"}) {
		t.Fatalf("stream holds %q, want only \"later\"", got)
	}
	if ok, err := q.CancelDelayed(ctx, cancelled); err != nil || ok {
		t.Fatalf("second Cancel = %v, %v; want false", ok, err)
	}

	// Cancel while the scheduler runs: the job is gone from Redis, so it
	// can never be moved, without waiting for its due time.
	live, err := p.Enqueue(ctx, []byte("cancelled-live"), streamq.ProcessIn(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := q.CancelDelayed(ctx, live); err != nil || !ok {
		t.Fatalf("Cancel with a scheduler running = %v, %v; want true", ok, err)
	}
	if err := rdb.ZScore(ctx, core.Of(q).Keys.Delayed, live).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("cancelled job still in the delayed set (ZSCORE: %v)", err)
	}
	if rdb.HExists(ctx, core.Of(q).Keys.Part("delayed:jobs"), live).Val() {
		t.Fatal("cancelled job's body left in the delayed job hash")
	}

	// Cancel after the job ran.
	id, err := p.Enqueue(ctx, []byte("runs"), streamq.ProcessIn(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if got := schedWaitPayload(t, ran); got != "runs" {
		t.Fatalf("%q ran, want \"runs\"", got)
	}
	if ok, err := q.CancelDelayed(ctx, id); err != nil || ok {
		t.Fatalf("Cancel after run = %v, %v; want false", ok, err)
	}
	if ok, err := q.CancelDelayed(ctx, "d-unknown"); err != nil || ok {
		t.Fatalf("Cancel of an unknown ID = %v, %v; want false", ok, err)
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Delayed != 0 || st.Length != 2 {
		t.Fatalf("stats %+v: want 2 stream entries (the cancelled jobs never entered) and nothing delayed", st)
	}
	select {
	case got := <-ran:
		t.Fatalf("unexpected job %q ran", got)
	default:
	}
}

// schedStreamPayloads returns the payloads of q's stream entries in order.
func schedStreamPayloads(t *testing.T, rdb *redis.Client, q *streamq.Queue) []string {
	t.Helper()
	entries, err := rdb.XRange(context.Background(), core.Of(q).Keys.Stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i], _ = e.Values["payload"].(string)
	}
	return out
}

func schedWaitPayload(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no job ran within 10s")
		return ""
	}
}
