package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// counter counts handled jobs and closes done when want of them were handled.
// A job handled twice (a redelivery) counts twice: the run ends when the
// handler returned want times.
type counter struct {
	n    atomic.Int64
	want int64
	once sync.Once
	done chan struct{}
}

func newCounter(want int) *counter {
	return &counter{want: int64(want), done: make(chan struct{})}
}

func (c *counter) add() {
	if c.n.Add(1) >= c.want {
		c.once.Do(func() { close(c.done) })
	}
}

// wait returns when want jobs were handled, or an error when ctx ends first.
func (c *counter) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("handled %d of %d jobs: %w", c.n.Load(), c.want, context.Cause(ctx))
	}
}

// phaseTimeout bounds one phase: ctx with the run's timeout and a cause that
// says which phase ran out of time.
func phaseTimeout(ctx context.Context, o *options, peer, phase string) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, o.timeout,
		fmt.Errorf("%s %s took longer than -timeout %s", peer, phase, o.timeout))
}

// backend is one peer's queue, set up for one or two phases.
type backend interface {
	// enqueue inserts o.jobs jobs.
	enqueue(ctx context.Context) error
	// start starts workers whose no-op handler calls c.add, and returns a
	// function that stops them.
	start(ctx context.Context, c *counter) (stop func() error, err error)
}

// opener sets up a fresh backend (a new server, schema or queue) and returns
// it with a function that tears it down.
type opener func(ctx context.Context, o *options) (b backend, closeFn func() error, err error)

// phases times the three phases of peer name: enqueue and process on one
// fresh backend, concurrent on another.
func phases(ctx context.Context, o *options, name string, open opener) ([]result, error) {
	var rs []result
	add := func(phase string, d time.Duration) {
		rs = append(rs, result{peer: name, phase: phase, jobs: o.jobs, d: d})
	}
	err := withBackend(ctx, o, open, func(b backend) error {
		pctx, cancel := phaseTimeout(ctx, o, name, phaseEnqueue)
		defer cancel()
		t0 := time.Now()
		if err := b.enqueue(pctx); err != nil {
			return fmt.Errorf("%s: %w", phaseEnqueue, err)
		}
		add(phaseEnqueue, time.Since(t0))
		d, err := processed(ctx, o, name, phaseProcess, b, false)
		add(phaseProcess, d)
		return err
	})
	if err != nil {
		return nil, err
	}
	err = withBackend(ctx, o, open, func(b backend) error {
		d, err := processed(ctx, o, name, phaseConcurrent, b, true)
		add(phaseConcurrent, d)
		return err
	})
	return rs, err
}

// onRedis makes an opener of a Redis peer: a fresh private redis-server, and
// the backend open makes on it, torn down before the server stops.
func onRedis(open func(ctx context.Context, o *options, addr string) (backend, func() error, error)) opener {
	return func(ctx context.Context, o *options) (backend, func() error, error) {
		srv, err := startRedis(ctx, o)
		if err != nil {
			return nil, nil, err
		}
		b, closeFn, err := open(ctx, o, srv.addr)
		if err != nil {
			srv.stop()
			return nil, nil, err
		}
		return b, func() error {
			err := closeFn()
			srv.stop()
			return err
		}, nil
	}
}

func withBackend(ctx context.Context, o *options, open opener, f func(backend) error) (err error) {
	b, closeFn, err := open(ctx, o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeFn()) }()
	return f(b)
}

// processed times workers handling o.jobs jobs, from their start until the
// handler had returned for all of them; with enqueue, the jobs are inserted
// once the workers run, otherwise they are already waiting. Stopping the
// workers is not timed.
func processed(ctx context.Context, o *options, name, phase string, b backend, enqueue bool) (d time.Duration, err error) {
	ctx, cancel := phaseTimeout(ctx, o, name, phase)
	defer cancel()
	c := newCounter(o.jobs)
	t0 := time.Now()
	stop, err := b.start(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("%s: start workers: %w", phase, err)
	}
	defer func() {
		if serr := stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("%s: stop workers: %w", phase, serr))
		}
	}()
	if enqueue {
		if err := b.enqueue(ctx); err != nil {
			return 0, fmt.Errorf("%s: %w", phase, err)
		}
	}
	if err := c.wait(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", phase, err)
	}
	return time.Since(t0), nil
}

// redisServer is a private redis-server on a free loopback port, without
// persistence, started for one phase and stopped by its PID.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan error
}

// startRedis starts a redis-server and waits until it answers PING.
func startRedis(ctx context.Context, o *options) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.redisServer,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (install redis-server or give its path with -redis-server): %w", o.redisServer, err)
	}
	s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case werr := <-s.done:
			return nil, fmt.Errorf("redis-server on port %d exited: %v", port, werr)
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer PING within 10 s: %w", port, err)
		}
	}
}

// stop kills the server and waits for it to exit.
func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
