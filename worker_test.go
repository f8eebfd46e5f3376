package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
)

const workerWait = 30 * time.Second

// workerEnv is one test's queues under its own key prefix.
type workerEnv struct {
	c  *redis.Client
	qs []*streamq.Queue
	ps []*streamq.Producer
}

// workerSetup returns n set-up queues q0..q(n-1) and their producers; every
// key of the test's prefix is deleted when the test ends.
func workerSetup(t *testing.T, n int) *workerEnv {
	t.Helper()
	c := redistest.NewClient(t)
	prefix := "t-" + redistest.Name(t)
	redistest.DeleteKeysAtCleanup(t, c, prefix+":*")
	e := &workerEnv{c: c}
	for i := range n {
		q, err := streamq.NewQueue(c, "q"+strconv.Itoa(i), &streamq.QueueConfig{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Setup(context.Background()); err != nil {
			t.Fatal(err)
		}
		p, err := streamq.NewProducer(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.qs, e.ps = append(e.qs, q), append(e.ps, p)
	}
	return e
}

// fill enqueues n jobs to queue i.
func (e *workerEnv) fill(t *testing.T, i, n int) {
	t.Helper()
	jobs := make([]streamq.Job, n)
	for k := range jobs {
		jobs[k].Payload = []byte(fmt.Sprintf("q%d-%d", i, k))
	}
	if _, err := e.ps[i].EnqueueBatch(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
}

// starts records the starts of handlers over several queues, and how many
// ran at once.
type starts struct {
	mu       sync.Mutex
	order    []int // queue index of every start
	running  []int
	maxRun   []int
	total    int
	maxTotal int
	enough   chan struct{} // closed after want starts
	want     int
}

func newStarts(queues, want int) *starts {
	return &starts{running: make([]int, queues), maxRun: make([]int, queues), enough: make(chan struct{}), want: want}
}

// handler returns queue i's handler: it records the start, calls work,
// and records the end.
func (s *starts) handler(i int, work func(ctx context.Context, msg *streamq.Message) error) streamq.HandlerFunc {
	return func(ctx context.Context, msg *streamq.Message) error {
		s.mu.Lock()
		s.order = append(s.order, i)
		s.running[i]++
		s.total++
		s.maxRun[i] = max(s.maxRun[i], s.running[i])
		s.maxTotal = max(s.maxTotal, s.total)
		if len(s.order) == s.want {
			close(s.enough)
		}
		s.mu.Unlock()
		err := work(ctx, msg)
		s.mu.Lock()
		s.running[i]--
		s.total--
		s.mu.Unlock()
		return err
	}
}

// sleepWork stands for a job that takes d.
func sleepWork(d time.Duration) func(context.Context, *streamq.Message) error {
	return func(context.Context, *streamq.Message) error { time.Sleep(d); return nil }
}

// consumer returns a consumer of queue i with cfg's test defaults.
func (e *workerEnv) consumer(t *testing.T, i int, h streamq.Handler, cfg streamq.ConsumerConfig) *streamq.Consumer {
	t.Helper()
	if cfg.Block == 0 {
		cfg.Block = 100 * time.Millisecond
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	cfg.ControlInterval = streamq.MinControlInterval
	c, err := streamq.NewConsumer(e.qs[i], h, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(workerWait):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestWorker_WeightedShares(t *testing.T) {
	t.Parallel()
	e := workerSetup(t, 3)
	const conc, measured = 10, 1200
	weights := []int{6, 3, 1}
	s := newStarts(3, measured)
	var qs []streamq.WorkerQueue
	for i, w := range weights {
		e.fill(t, i, measured) // none runs dry while measured
		qs = append(qs, streamq.WorkerQueue{Source: e.consumer(t, i, s.handler(i, sleepWork(5*time.Millisecond)), streamq.ConsumerConfig{}), Weight: w})
	}
	w, err := streamq.NewWorker(streamq.WorkerConfig{Queues: qs, Concurrency: conc})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "Worker.Run", workerWait, w.Run)
	waitClosed(t, s.enough, "the measured starts")
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := make([]int, 3)
	for _, q := range s.order[:measured] {
		counts[q]++
	}
	for i, wt := range weights {
		want := measured * wt / 10
		if d := counts[i] - want; 10*d < -want || 10*d > want {
			t.Errorf("queue of weight %d started %d of the first %d jobs, want %d ±10%% (all: %v)", wt, counts[i], measured, want, counts)
		}
	}
	if s.maxTotal > conc {
		t.Errorf("%d jobs ran at once, above the worker's Concurrency %d", s.maxTotal, conc)
	}
}

func TestWorker_StarvationProtection(t *testing.T) {
	t.Parallel()
	e := workerSetup(t, 2)
	const heavy = 100
	e.fill(t, 0, 4*(heavy+1))
	e.fill(t, 1, 3)
	s := newStarts(2, 3*(heavy+1)+10)
	w, err := streamq.NewWorker(streamq.WorkerConfig{Concurrency: 4, Queues: []streamq.WorkerQueue{
		{Source: e.consumer(t, 0, s.handler(0, sleepWork(time.Millisecond)), streamq.ConsumerConfig{}), Weight: heavy},
		{Source: e.consumer(t, 1, s.handler(1, sleepWork(time.Millisecond)), streamq.ConsumerConfig{}), Weight: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "Worker.Run", workerWait, w.Run)
	waitClosed(t, s.enough, "the starts")
	s.mu.Lock()
	defer s.mu.Unlock()
	// The light queue gets one slot of every heavy+1 however busy the heavy
	// one is: its k-th job starts within the first k×(heavy+1) starts, give
	// or take one fetch's batch.
	k := 0
	for at, q := range s.order {
		if q != 1 {
			continue
		}
		k++
		if limit := k*(heavy+1) + 4; at >= limit {
			t.Errorf("the light queue's job %d started as start %d, after %d", k, at+1, limit)
		}
	}
	if k != 3 {
		t.Errorf("the light queue started %d of its 3 jobs in the first %d starts", k, len(s.order))
	}
}

func TestWorker_Strict(t *testing.T) {
	t.Parallel()
	e := workerSetup(t, 3)
	const n = 40
	var violations atomic.Int64
	var mu sync.Mutex
	var msgs []string
	// A job of queue i starts only while queues 0..i-1 have no job waiting
	// (undelivered to their group).
	check := func(i int) func(context.Context, *streamq.Message) error {
		return func(ctx context.Context, _ *streamq.Message) error {
			for j := range i {
				k := core.Of(e.qs[j]).Keys
				gs, err := e.c.XInfoGroups(ctx, k.Stream).Result()
				if err != nil {
					return err
				}
				for _, g := range gs {
					if g.Lag > 0 {
						violations.Add(1)
						mu.Lock()
						msgs = append(msgs, fmt.Sprintf("a job of q%d started while q%d had %d waiting", i, j, g.Lag))
						mu.Unlock()
					}
				}
			}
			time.Sleep(2 * time.Millisecond) // the job's work
			return nil
		}
	}
	s := newStarts(3, 3*n)
	var qs []streamq.WorkerQueue
	for i := range 3 {
		e.fill(t, i, n)
		qs = append(qs, streamq.WorkerQueue{Source: e.consumer(t, i, s.handler(i, check(i)), streamq.ConsumerConfig{})})
	}
	w, err := streamq.NewWorker(streamq.WorkerConfig{Queues: qs, Concurrency: 4, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "Worker.Run", workerWait, w.Run)
	waitClosed(t, s.enough, "every job to start")
	if v := violations.Load(); v > 0 {
		mu.Lock()
		t.Errorf("%d starts while a higher queue had jobs waiting, first: %s", v, msgs[0])
		mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// With every queue full from the start, the starts come in queue order.
	firstOf := map[int]int{}
	lastOf := map[int]int{}
	for at, q := range s.order {
		if _, ok := firstOf[q]; !ok {
			firstOf[q] = at
		}
		lastOf[q] = at
	}
	for i := 1; i < 3; i++ {
		if firstOf[i] < lastOf[i-1]-4 { // the higher queue's last fetch may start beside it
			t.Errorf("q%d's first job started as start %d, before q%d's last (%d)", i, firstOf[i], i-1, lastOf[i-1])
		}
	}
}

func TestWorker_LimitsAndIdleQueues(t *testing.T) {
	t.Parallel()
	e := workerSetup(t, 3)
	const conc = 6
	s := newStarts(3, 0)
	// Jobs of q2 wait until conc-2 of them run at once: the idle q1 and the
	// limited q0 must leave it the rest of the budget.
	all := make(chan struct{})
	var once sync.Once
	gate := func(ctx context.Context, _ *streamq.Message) error {
		s.mu.Lock()
		full := s.running[2] >= conc-2
		s.mu.Unlock()
		if full {
			once.Do(func() { close(all) })
		}
		select {
		case <-all:
			return nil
		case <-time.After(workerWait):
			return errors.New("the idle queue or the limited one held slots")
		}
	}
	done := make(chan string, 64)
	record := func(ctx context.Context, msg *streamq.Message) error {
		time.Sleep(2 * time.Millisecond)
		done <- string(msg.Payload)
		return nil
	}
	e.fill(t, 0, 20)
	e.fill(t, 2, conc-2)
	w, err := streamq.NewWorker(streamq.WorkerConfig{Concurrency: conc, Queues: []streamq.WorkerQueue{
		{Source: e.consumer(t, 0, s.handler(0, record), streamq.ConsumerConfig{Concurrency: 2})},
		{Source: e.consumer(t, 1, s.handler(1, record), streamq.ConsumerConfig{})},
		{Source: e.consumer(t, 2, s.handler(2, gate), streamq.ConsumerConfig{})},
	}})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "Worker.Run", workerWait, w.Run)
	waitClosed(t, all, "q2's jobs to run at once")
	// A job for the idle queue starts promptly.
	if _, err := e.ps[1].Enqueue(context.Background(), []byte("late")); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(workerWait)
	for got := 0; got < 21; got++ {
		select {
		case <-done:
		case <-deadline:
			t.Fatalf("%d of 21 jobs of q0 and q1 ran", got)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxRun[0] > 2 {
		t.Errorf("%d jobs of q0 ran at once, above its Concurrency 2", s.maxRun[0])
	}
	if s.maxTotal > conc {
		t.Errorf("%d jobs ran at once, above the worker's Concurrency %d", s.maxTotal, conc)
	}
	if st := w.Stats(); st.Processed < 25 || st.Failed != 0 {
		t.Errorf("Stats = %+v, want 25 processed, none failed", st)
	}
}

func TestWorker_Shutdown(t *testing.T) {
	t.Parallel()
	e := workerSetup(t, 2)
	const n = 10
	e.fill(t, 0, n)
	e.fill(t, 1, n)
	release := make(chan struct{})
	var running atomic.Int64
	four := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	ran := map[string]int{}
	h := func(ctx context.Context, msg *streamq.Message) error {
		if running.Add(1) == 4 {
			once.Do(func() { close(four) })
		}
		defer running.Add(-1)
		<-release
		mu.Lock()
		ran[string(msg.Payload)]++
		mu.Unlock()
		return nil
	}
	build := func() *streamq.Worker {
		w, err := streamq.NewWorker(streamq.WorkerConfig{Concurrency: 4, Queues: []streamq.WorkerQueue{
			{Source: e.consumer(t, 0, streamq.HandlerFunc(h), streamq.ConsumerConfig{}), Weight: 1},
			{Source: e.consumer(t, 1, streamq.HandlerFunc(h), streamq.ConsumerConfig{}), Weight: 1},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := build()
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()
	waitClosed(t, four, "four running jobs")
	cancel()
	// Run waits for the running handlers (their contexts are detached).
	select {
	case err := <-runErr:
		t.Fatalf("Run returned %v while handlers ran", err)
	case <-time.After(50 * time.Millisecond):
	}
	if !w.Health().ShuttingDown {
		t.Error("Health().ShuttingDown = false while draining")
	}
	close(release)
	select {
	case err := <-runErr:
		if err != nil {
			t.Fatalf("Run = %v, want nil after a cancel", err)
		}
	case <-time.After(workerWait):
		t.Fatal("Run did not return after the handlers did")
	}
	if h := w.Health(); h.Running || h.Fetching {
		t.Errorf("Health after Run = %+v", h)
	}
	mu.Lock()
	first := len(ran)
	mu.Unlock()
	if first != 4 {
		t.Errorf("%d jobs ran before the shutdown, want the 4 that were running (no job read but not started)", first)
	}
	// A new worker runs the rest; nothing was lost.
	w2 := build()
	redistest.Background(t, "Worker.Run", workerWait, w2.Run)
	redistest.WaitFor(t, workerWait, "every job to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == 2*n
	})
}

func TestWorker_Running(t *testing.T) {
	t.Parallel()
	e := workerSetup(t, 2)
	c0 := e.consumer(t, 0, noopHandler, streamq.ConsumerConfig{})
	c1 := e.consumer(t, 1, noopHandler, streamq.ConsumerConfig{})
	w, err := streamq.NewWorker(streamq.WorkerConfig{Queues: []streamq.WorkerQueue{{Source: c0}, {Source: c1}}})
	if err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "Consumer.Run", workerWait, c1.Run)
	redistest.WaitFor(t, workerWait, "the consumer to run", func() bool { return c1.Health().Running })
	if err := w.Run(context.Background()); !errors.Is(err, streamq.ErrRunning) {
		t.Fatalf("Worker.Run beside its source's Run = %v, want ErrRunning", err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "Worker.Run", workerWait, w.Run)
	redistest.WaitFor(t, workerWait, "the worker to run", func() bool { return w.Health().Running })
	if err := c0.Run(context.Background()); !errors.Is(err, streamq.ErrRunning) {
		t.Errorf("Consumer.Run of a running worker's source = %v, want ErrRunning", err)
	}
	if err := w.Run(context.Background()); !errors.Is(err, streamq.ErrRunning) {
		t.Errorf("a second Worker.Run = %v, want ErrRunning", err)
	}
}

var noopHandler = streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })

func TestNewWorker_Validation(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	newConsumer := func(name string, conc int) *streamq.Consumer {
		q, err := streamq.NewQueue(c, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		cons, err := streamq.NewConsumer(q, noopHandler, &streamq.ConsumerConfig{Concurrency: conc})
		if err != nil {
			t.Fatal(err)
		}
		return cons
	}
	a, b, big := newConsumer("a", 0), newConsumer("b", 0), newConsumer("big", 32)
	a2 := newConsumer("a", 0)
	var typedNil *streamq.Consumer
	tests := []struct {
		name  string
		cfg   streamq.WorkerConfig
		field string
	}{
		{"no queues", streamq.WorkerConfig{}, "WorkerConfig.Queues"},
		{"negative concurrency", streamq.WorkerConfig{Concurrency: -1, Queues: []streamq.WorkerQueue{{Source: a}}}, "WorkerConfig.Concurrency"},
		{"nil source", streamq.WorkerConfig{Queues: []streamq.WorkerQueue{{Source: a}, {}}}, "WorkerConfig.Queues[1].Source"},
		{"typed nil source", streamq.WorkerConfig{Queues: []streamq.WorkerQueue{{Source: typedNil}}}, "WorkerConfig.Queues[0].Source"},
		{"weight in strict mode", streamq.WorkerConfig{Strict: true, Queues: []streamq.WorkerQueue{{Source: a, Weight: 2}}}, "WorkerConfig.Queues[0].Weight"},
		{"negative weight", streamq.WorkerConfig{Queues: []streamq.WorkerQueue{{Source: a, Weight: -1}}}, "WorkerConfig.Queues[0].Weight"},
		{"weight too large", streamq.WorkerConfig{Queues: []streamq.WorkerQueue{{Source: a, Weight: streamq.MaxQueueWeight + 1}}}, "WorkerConfig.Queues[0].Weight"},
		{"same source twice", streamq.WorkerConfig{Queues: []streamq.WorkerQueue{{Source: a}, {Source: b}, {Source: a}}}, "WorkerConfig.Queues[2].Source"},
		{"same queue twice", streamq.WorkerConfig{Queues: []streamq.WorkerQueue{{Source: a}, {Source: a2}}}, "WorkerConfig.Queues[1].Source"},
		{"source above the budget", streamq.WorkerConfig{Concurrency: 16, Queues: []streamq.WorkerQueue{{Source: big}}}, "WorkerConfig.Queues[0].Source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			orig := len(tt.cfg.Queues)
			_, err := streamq.NewWorker(tt.cfg)
			var ce *streamq.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("err = %v, want a ConfigError for %s", err, tt.field)
			}
			if len(tt.cfg.Queues) != orig {
				t.Error("NewWorker changed the caller's config")
			}
		})
	}
	if _, err := streamq.NewWorker(streamq.WorkerConfig{Concurrency: 32, Queues: []streamq.WorkerQueue{{Source: big, Weight: 3}, {Source: a}}}); err != nil {
		t.Errorf("a valid config: %v", err)
	}
}

func TestWorker_EventsPerQueue(t *testing.T) {
	t.Parallel()
	e := workerSetup(t, 2)
	e.fill(t, 0, 1)
	e.fill(t, 1, 1)
	events := make(chan streamq.Event, 4)
	onEvent := func(_ context.Context, ev streamq.Event) { events <- ev }
	fail := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		return streamq.Permanent(errors.New("no"))
	})
	w, err := streamq.NewWorker(streamq.WorkerConfig{Queues: []streamq.WorkerQueue{
		{Source: e.consumer(t, 0, fail, streamq.ConsumerConfig{OnEvent: onEvent})},
		{Source: e.consumer(t, 1, fail, streamq.ConsumerConfig{OnEvent: onEvent})},
	}})
	if err != nil {
		t.Fatal(err)
	}
	redistest.Background(t, "Worker.Run", workerWait, w.Run)
	got := map[string]streamq.EventKind{}
	for range 2 {
		select {
		case ev := <-events:
			got[ev.Queue] = ev.Kind
		case <-time.After(workerWait):
			t.Fatalf("events so far: %v", got)
		}
	}
	for _, q := range e.qs {
		if got[q.Name()] != streamq.EventDeadLettered {
			t.Errorf("events by queue %v: want a dead letter from %s", got, q.Name())
		}
	}
	if st := w.Stats(); st.DeadLettered != 2 || st.Failed != 2 {
		t.Errorf("Worker.Stats = %+v, want 2 failed and dead-lettered", st)
	}
}
