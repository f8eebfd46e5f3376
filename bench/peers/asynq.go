package main

import (
	"context"
	"sync/atomic"

	"github.com/hibiken/asynq"
	"golang.org/x/sync/errgroup"
)

// asynqBackend is asynq on a private redis-server (its keys have no prefix
// option, so it gets a server of its own like every peer): a Client that
// enqueues one task per call from o.concurrency goroutines (asynq has no bulk
// enqueue), and a Server with o.concurrency workers and its default
// settings otherwise.
type asynqBackend struct {
	o    *options
	addr string
	c    *asynq.Client
	job  []byte
}

const asynqTask = "peers:noop"

func openAsynq(_ context.Context, o *options, addr string) (backend, func() error, error) {
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: addr, PoolSize: o.concurrency + 10})
	return &asynqBackend{o: o, addr: addr, c: c, job: payload(o.payload)}, c.Close, nil
}

func (b *asynqBackend) enqueue(ctx context.Context) error {
	var left atomic.Int64
	left.Store(int64(b.o.jobs))
	g, ctx := errgroup.WithContext(ctx)
	for range b.o.concurrency {
		g.Go(func() error {
			for left.Add(-1) >= 0 {
				if _, err := b.c.EnqueueContext(ctx, asynq.NewTask(asynqTask, b.job)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

func (b *asynqBackend) start(_ context.Context, c *counter) (func() error, error) {
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: b.addr, PoolSize: b.o.concurrency + 10}, asynq.Config{
		Concurrency: b.o.concurrency,
		LogLevel:    asynq.ErrorLevel,
	})
	h := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		c.add()
		return nil
	})
	if err := srv.Start(h); err != nil {
		return nil, err
	}
	return func() error { srv.Shutdown(); return nil }, nil
}
