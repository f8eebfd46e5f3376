package streamq

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// PartitionedWorkerConfig configures a [PartitionedWorker]. The zero value
// is valid.
type PartitionedWorkerConfig struct {
	// Consumer configures the consumer of every partition (see
	// [ConsumerConfig]); its Concurrency, if set, is one partition's limit
	// within the worker. Defaults to the zero ConsumerConfig.
	Consumer *ConsumerConfig

	// Concurrency is the most jobs the worker runs at once over all the
	// partitions: one budget the partitions share, as in
	// [WorkerConfig.Concurrency]. Defaults to DefaultConcurrency.
	Concurrency int
}

// PartitionedWorker runs the jobs of every partition of a
// [PartitionedQueue] with one budget of handler slots: a [Worker] over one
// [Consumer] per partition, weighted equally. It follows the queue's layout:
// when the number of partitions to read changes, it shuts its Worker down
// gracefully and starts one over the new set. A partition whose Redis master
// is down or failing over does not stop the others: each partition's
// consumer retries its own Redis errors with backoff.
type PartitionedWorker struct {
	pq      *PartitionedQueue
	h       Handler
	cfg     ConsumerConfig
	size    int
	logger  *slog.Logger
	running atomic.Bool

	mu    sync.Mutex
	cons  map[int]*Consumer
	cur   *Worker
	reads int
}

// NewPartitionedWorker returns a worker that runs h for every job of pq.
// cfg may be nil; it is copied and validated, never changed.
func NewPartitionedWorker(pq *PartitionedQueue, h Handler, cfg *PartitionedWorkerConfig) (*PartitionedWorker, error) {
	if pq == nil {
		return nil, configErr("queue", "pq is nil: create one with streamq.NewPartitionedQueue")
	}
	var c PartitionedWorkerConfig
	if cfg != nil {
		c = *cfg
	}
	w := &PartitionedWorker{pq: pq, h: h, size: c.Concurrency, cons: map[int]*Consumer{}}
	if c.Consumer != nil {
		w.cfg = *c.Consumer
	}
	w.logger = w.cfg.Logger
	if w.logger == nil {
		w.logger = slog.Default()
	}
	// Validate everything once, on partition 0.
	if _, err := w.worker(1); err != nil {
		return nil, err
	}
	return w, nil
}

// worker returns a Worker over the consumers of partitions 0..n-1.
func (w *PartitionedWorker) worker(n int) (*Worker, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wc := WorkerConfig{Concurrency: w.size}
	for k := range n {
		c, ok := w.cons[k]
		if !ok {
			q, err := w.pq.Partition(k)
			if err != nil {
				return nil, err
			}
			if c, err = NewConsumer(q, w.h, &w.cfg); err != nil {
				return nil, err
			}
			w.cons[k] = c
		}
		wc.Queues = append(wc.Queues, WorkerQueue{Source: c})
	}
	return NewWorker(wc)
}

// Run runs the jobs of every partition the layout says to read until ctx is
// cancelled, then shuts down as [Worker.Run] does, and returns after every
// handler returned. It reads the layout every PartitionedQueueConfig.Refresh;
// when the number of partitions to read changed, it shuts the running
// Worker down (running jobs finish within ShutdownTimeout; unfinished ones
// stay pending and the same consumers take them up again) and starts one
// over the new partitions. While the layout cannot be read (the master of
// partition 0 is down), it keeps the partitions it reads. It returns an
// error when a partition's run ends with one that retrying cannot fix, and
// [ErrRunning] when it runs already.
func (w *PartitionedWorker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer w.running.Store(false)
	tick := time.NewTicker(w.pq.refresh)
	defer tick.Stop()
	var (
		stop func() error // shuts the current Worker down and returns its error
		done chan struct{}
		n    int
	)
	defer func() {
		if stop != nil {
			_ = stop()
		}
	}()
	for {
		l, err := w.pq.Layout(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			w.logger.WarnContext(ctx, "streamq: read partition layout", "queue", w.pq.name, "err", err)
		case err == nil && l.Read() != n:
			if stop != nil {
				if err := stop(); err != nil {
					stop = nil
					return err
				}
			}
			n = l.Read()
			if stop, done, err = w.start(ctx, n); err != nil {
				return err
			}
		}
		var finished <-chan struct{}
		if done != nil {
			finished = done
		}
		select {
		case <-ctx.Done():
			s := stop
			stop = nil
			if s == nil {
				return nil
			}
			return s()
		case <-finished:
			s := stop
			stop = nil
			return s()
		case <-tick.C:
		}
	}
}

// start runs a Worker over partitions 0..n-1 in a goroutine. stop cancels
// it and returns its error; done is closed when it returned.
func (w *PartitionedWorker) start(ctx context.Context, n int) (stop func() error, done chan struct{}, err error) {
	wk, err := w.worker(n)
	if err != nil {
		return nil, nil, err
	}
	w.mu.Lock()
	w.cur, w.reads = wk, n
	w.mu.Unlock()
	rctx, cancel := context.WithCancel(ctx)
	done = make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = wk.Run(rctx)
	}()
	return func() error {
		cancel()
		<-done
		return runErr
	}, done, nil
}

// Partitions returns the number of partitions the worker reads now (0
// before Run read the layout).
func (w *PartitionedWorker) Partitions() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reads
}

// Stats returns the sum of the counters of every partition's consumer
// since the worker was created.
func (w *PartitionedWorker) Stats() ConsumerStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	var s ConsumerStats
	for _, c := range w.cons {
		s.add(c.Stats())
	}
	return s
}

// Health reports the state of the running Worker (see [Worker.Health]);
// the zero Health before Run started one.
func (w *PartitionedWorker) Health() Health {
	w.mu.Lock()
	cur := w.cur
	w.mu.Unlock()
	if cur == nil {
		return Health{}
	}
	return cur.Health()
}
