package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/workflow"
)

// step are the args of the test jobs: the node's name.
type step struct {
	Name string `json:"name"`
}

func (step) Kind() string { return "wf.step" }

// event is one line of the test's external log: a node started or ended.
type event struct {
	node  string
	start bool
	ok    bool
	at    int // position in the log
}

// env is one test's queues, workflow client and log.
type env struct {
	t      *testing.T
	c      redis.UniversalClient
	prefix string
	qs     []*streamq.Queue
	wc     *workflow.Client

	mu   sync.Mutex
	log  []event
	fail map[string]error // node -> error its job returns
	runs map[string]int   // node -> handler starts
}

// setup returns two queues "a" and "b" under a prefix of the test's own,
// and a workflow client of them.
func setup(t *testing.T, c redis.UniversalClient, cfg *workflow.Config) *env {
	t.Helper()
	prefix := "wf-" + redistest.Name(t)
	redistest.DeleteKeysAtCleanup(t, c, prefix+":*")
	e := &env{t: t, c: c, prefix: prefix, fail: map[string]error{}, runs: map[string]int{}}
	for _, name := range []string{"a", "b"} {
		q, err := streamq.NewQueue(c, name, &streamq.QueueConfig{KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Setup(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.qs = append(e.qs, q)
	}
	var err error
	if e.wc, err = workflow.NewClient(e.qs, cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

// handler runs a test job: logs its start, fails as e.fail says, sets its
// name as its result and logs its end.
func (e *env) handler(ctx context.Context, job *streamq.TypedJob[step]) error {
	n := job.Args.Name
	e.mu.Lock()
	e.log = append(e.log, event{node: n, start: true, at: len(e.log)})
	e.runs[n]++
	err := e.fail[n]
	e.mu.Unlock()
	if err == nil {
		if rerr := workflow.SetResult(ctx, []byte("result of "+n)); rerr != nil {
			return rerr
		}
	}
	e.mu.Lock()
	e.log = append(e.log, event{node: n, ok: err == nil, at: len(e.log)})
	e.mu.Unlock()
	return err
}

// consume runs a consumer on every queue of e with the workflow middleware.
func (e *env) consume(h func(ctx context.Context, job *streamq.TypedJob[step]) error) {
	e.t.Helper()
	if h == nil {
		h = e.handler
	}
	for _, q := range e.qs {
		mux := streamq.NewMux()
		streamq.Register(mux, h)
		cons, err := streamq.NewConsumer(q, mux, &streamq.ConsumerConfig{
			Middleware: []streamq.Middleware{e.wc.Middleware()},
			Block:      100 * time.Millisecond, Concurrency: 8, ShutdownTimeout: 5 * time.Second,
			Backoff: func(int) time.Duration { return time.Millisecond },
		})
		if err != nil {
			e.t.Fatal(err)
		}
		redistest.Background(e.t, "consumer "+q.Name(), 10*time.Second, cons.Run)
	}
}

// waitEnded waits until workflow id has ended and returns it.
func (e *env) waitEnded(id string, timeout time.Duration) *workflow.Info {
	e.t.Helper()
	var info *workflow.Info
	errs := 0
	redistest.WaitFor(e.t, timeout, "workflow "+id+" to end", func() bool {
		i, err := e.wc.Show(context.Background(), id)
		if err != nil {
			// A connection cut by a fault test; a lasting error shows
			// as the timeout, after the log.
			if errs++; errs%50 == 1 {
				e.t.Logf("Show %s: %v", id, err)
			}
			return false
		}
		info = i
		return info.State != workflow.StateRunning
	})
	return info
}

// states returns the state of each node of info.
func states(info *workflow.Info) map[string]workflow.NodeState {
	m := map[string]workflow.NodeState{}
	for _, n := range info.Nodes {
		m[n.Name] = n.State
	}
	return m
}

// checkOrder checks from the log that no node started before each of its
// parents (deps: child -> parents) ended successfully, unless allowed
// says the parent's failure lets it run.
func (e *env) checkOrder(deps map[string][]string, anyway map[string]bool) {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	okAt := map[string]int{}
	endAt := map[string]int{}
	for _, ev := range e.log {
		if !ev.start {
			if _, seen := endAt[ev.node]; !seen {
				endAt[ev.node] = ev.at
			}
			if ev.ok {
				if _, seen := okAt[ev.node]; !seen {
					okAt[ev.node] = ev.at
				}
			}
		}
	}
	for _, ev := range e.log {
		if !ev.start {
			continue
		}
		for _, p := range deps[ev.node] {
			at, ok := okAt[p]
			if anyway[ev.node+"<"+p] {
				at, ok = endAt[p]
			}
			if !ok || at > ev.at {
				e.t.Errorf("node %s started at %d before its parent %s ended as required (%v at %d)", ev.node, ev.at, p, ok, at)
			}
		}
	}
}

var errBoom = errors.New("boom")

// names returns prefix0 ... prefix(n-1).
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}
