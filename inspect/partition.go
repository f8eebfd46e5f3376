package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/streamq/streamq/internal/rdb"
)

// Partitioned reads and controls a partitioned queue (see
// streamq.PartitionedQueue) as one queue: counts summed over its
// partitions, listings merged in time order, a job found by its ID alone.
// It reads the partitions the layout says workers read, the draining ones
// too. It is cheap and safe for concurrent use; its layout is the one read
// when it was made.
type Partitioned struct {
	name   string
	layout rdb.Layout
	parts  []*Queue
}

// Partitioned returns the partitioned queue called name (a queue without a
// layout is one of a single partition, the queue name itself).
func (in *Inspector) Partitioned(ctx context.Context, name string) (*Partitioned, error) {
	l, err := rdb.ReadLayout(ctx, in.rdb, rdb.PartitionKey(in.opts.Prefix, name))
	if err != nil {
		return nil, fmt.Errorf("inspect: partitions of %s: %w", name, err)
	}
	p := &Partitioned{name: name, layout: l}
	for k := range l.Read() {
		p.parts = append(p.parts, in.newQueue(rdb.PartitionName(name, k), KindStream))
	}
	return p, nil
}

// Name returns the queue's base name.
func (p *Partitioned) Name() string { return p.name }

// Partitions returns the number of partitions producers write to, and the
// number read (more while dropped partitions drain).
func (p *Partitioned) Partitions() (write, read int) { return p.layout.N, p.layout.Read() }

// Epoch returns the number of changes of the number of partitions.
func (p *Partitioned) Epoch() int64 { return p.layout.Epoch }

// Queues returns the queue of every partition read, partition 0 first.
func (p *Partitioned) Queues() []*Queue { return slices.Clone(p.parts) }

// Overview returns the sum of the partitions' overviews: Paused only when
// every partition is, OldestWaiting the oldest of any, Estimated when any
// is. Name is the base name.
func (p *Partitioned) Overview(ctx context.Context) (*Overview, error) {
	sum := &Overview{Name: p.name, Kind: KindStream, Paused: true}
	for _, q := range p.parts {
		o, err := q.Overview(ctx)
		if err != nil {
			return nil, err
		}
		sum.Paused = sum.Paused && o.Paused
		sum.WriteBehind = sum.WriteBehind || o.WriteBehind
		sum.Length += o.Length
		sum.Waiting += o.Waiting
		sum.Running += o.Running
		sum.Delayed += o.Delayed
		sum.Retrying += o.Retrying
		sum.Dead += o.Dead
		sum.Cancelled += o.Cancelled
		sum.Consumers += o.Consumers
		sum.OldestWaiting = max(sum.OldestWaiting, o.OldestWaiting)
		sum.Estimated = sum.Estimated || o.Estimated
	}
	return sum, nil
}

// Job finds the job id in whichever partition holds it (see [Queue.Job]);
// Job.Queue names the partition. It asks the partitions in turn, so a
// look-up costs up to one [Queue.Job] per partition.
func (p *Partitioned) Job(ctx context.Context, id string) (*Job, error) {
	for _, q := range p.parts {
		j, err := q.Job(ctx, id)
		if err == nil {
			return j, nil
		}
		if !errors.Is(err, ErrJobNotFound) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("inspect: job %s of %s: %w", id, p.name, &NotFoundError{What: "job", Name: id})
}

// Jobs lists the jobs of every partition in one state (see [Queue.Jobs]):
// a page of up to o.Limit jobs of each partition, merged in time order
// (enqueue time for waiting jobs, start for running ones, due time for
// delayed and retrying ones, dead-letter time for dead ones). The cursor
// continues every partition's listing at once.
func (p *Partitioned) Jobs(ctx context.Context, o ListOptions) (*Page, error) {
	cursors := make([]string, len(p.parts))
	if o.Cursor != "" {
		if err := json.Unmarshal([]byte(o.Cursor), &cursors); err != nil || len(cursors) != len(p.parts) {
			return nil, fmt.Errorf("inspect: cursor %q is not one of a listing of the %d partitions of %s: start again with an empty cursor", o.Cursor, len(p.parts), p.name)
		}
	}
	out := &Page{}
	more := false
	for k, q := range p.parts {
		if o.Cursor != "" && cursors[k] == "" {
			continue // this partition's listing ended
		}
		po := o
		po.Cursor = cursors[k]
		page, err := q.Jobs(ctx, po)
		if err != nil {
			return nil, err
		}
		out.Jobs = append(out.Jobs, page.Jobs...)
		out.Scanned += page.Scanned
		cursors[k] = page.Cursor
		more = more || page.Cursor != ""
	}
	slices.SortStableFunc(out.Jobs, func(a, b Job) int { return jobTime(&a).Compare(jobTime(&b)) })
	if more {
		c, err := json.Marshal(cursors)
		if err != nil {
			return nil, err
		}
		out.Cursor = string(c)
	}
	return out, nil
}

// jobTime is the time a listing of j's state is ordered by.
func jobTime(j *Job) time.Time {
	for _, t := range []time.Time{j.DeadAt, j.DueAt, j.StartedAt} {
		if !t.IsZero() {
			return t
		}
	}
	return j.EnqueuedAt
}

// Pause pauses every partition (see [Queue.Pause]): once it returns, no
// job of the queue starts until [Partitioned.Resume]. A partition added
// later starts unpaused.
func (p *Partitioned) Pause(ctx context.Context) error {
	for _, q := range p.parts {
		if err := q.Pause(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Resume resumes every partition (see [Queue.Resume]).
func (p *Partitioned) Resume(ctx context.Context) error {
	for _, q := range p.parts {
		if err := q.Resume(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Cancel cancels the job id in whichever partition holds it (see
// [Queue.Cancel]).
func (p *Partitioned) Cancel(ctx context.Context, id string) error {
	j, err := p.Job(ctx, id)
	if err != nil {
		return err
	}
	for _, q := range p.parts {
		if q.name == j.Queue {
			return q.Cancel(ctx, id)
		}
	}
	return fmt.Errorf("inspect: job %s is in %s, which is not a partition of %s", id, j.Queue, p.name)
}
