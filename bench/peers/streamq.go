package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/streamq/streamq"
)

// streamqBackend is a streamq stream queue on a private redis-server:
// EnqueueBatch of o.batch jobs, a Consumer with o.concurrency handler slots
// and its default settings otherwise.
type streamqBackend struct {
	o   *options
	q   *streamq.Queue
	p   *streamq.Producer
	job []byte
}

func openStreamq(ctx context.Context, o *options, addr string) (backend, func() error, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: o.concurrency + 10})
	b, err := newStreamqBackend(ctx, o, rdb)
	if err != nil {
		return nil, nil, errors.Join(err, rdb.Close())
	}
	return b, rdb.Close, nil
}

func newStreamqBackend(ctx context.Context, o *options, rdb *redis.Client) (*streamqBackend, error) {
	q, err := streamq.NewQueue(rdb, "peers", nil)
	if err != nil {
		return nil, err
	}
	if err := q.Setup(ctx); err != nil {
		return nil, err
	}
	p, err := streamq.NewProducer(q, nil)
	if err != nil {
		return nil, err
	}
	return &streamqBackend{o: o, q: q, p: p, job: payload(o.payload)}, nil
}

func (b *streamqBackend) enqueue(ctx context.Context) error {
	jobs := make([]streamq.Job, b.o.batch)
	for i := range jobs {
		jobs[i].Payload = b.job
	}
	return batches(b.o.jobs, b.o.batch, func(lo, hi int) error {
		_, err := b.p.EnqueueBatch(ctx, jobs[:hi-lo])
		return err
	})
}

func (b *streamqBackend) start(ctx context.Context, c *counter) (func() error, error) {
	h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error {
		c.add()
		return nil
	})
	cons, err := streamq.NewConsumer(b.q, h, &streamq.ConsumerConfig{Name: "peers", Concurrency: b.o.concurrency})
	if err != nil {
		return nil, err
	}
	return runUntilStopped(ctx, cons.Run), nil
}

// runUntilStopped runs run in a goroutine and returns a function that cancels
// it and returns its error (nil if it stopped because of the cancel).
func runUntilStopped(ctx context.Context, run func(context.Context) error) func() error {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	errc := make(chan error, 1)
	go func() { errc <- run(rctx) }()
	return func() error {
		cancel()
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("run: %w", err)
		}
		return nil
	}
}
