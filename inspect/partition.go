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
	in     *Inspector
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
	p := &Partitioned{in: in, name: name, layout: l}
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
		sum.Completed += o.Completed
		sum.Consumers += o.Consumers
		sum.OldestWaiting = max(sum.OldestWaiting, o.OldestWaiting)
		sum.Estimated = sum.Estimated || o.Estimated
	}
	return sum, nil
}

// Job finds the job id in whichever partition holds it (see [Queue.Job]);
// Job.Queue names the partition and Job.ID is the ID as the partitioned
// producer gave it (it names the partition, "p3~1700000000000-0", when it
// was generated). An id that names its partition costs one [Queue.Job] of
// that partition. Another id (a chosen one, or one from before IDs named
// their partition) is looked for in the partition its hash routes to
// first, where a job with a chosen ID and no other key is, then in the
// others in turn.
func (p *Partitioned) Job(ctx context.Context, id string) (*Job, error) {
	j, _, err := p.find(ctx, id)
	return j, err
}

// find returns the job id and the queue of its partition.
func (p *Partitioned) find(ctx context.Context, id string) (*Job, *Queue, error) {
	bare, ks := rdb.PartitionsToAsk(id, p.layout)
	for _, k := range ks {
		q := p.partition(k)
		j, err := q.Job(ctx, bare)
		if err == nil {
			j.ID = rdb.PartitionJobID(k, j.ID)
			return j, q, nil
		}
		if !errors.Is(err, ErrJobNotFound) {
			return nil, nil, err
		}
	}
	return nil, nil, fmt.Errorf("inspect: job %s of %s: %w", id, p.name, &NotFoundError{What: "job", Name: id})
}

// partition returns the queue of partition k, read or not (an ID may name
// a partition a lowered N dropped, whose finished jobs' results remain).
func (p *Partitioned) partition(k int) *Queue {
	if k < len(p.parts) {
		return p.parts[k]
	}
	return p.in.newQueue(rdb.PartitionName(p.name, k), KindStream)
}

// Jobs lists the jobs of every partition in one state (see [Queue.Jobs]),
// merged in time order (enqueue time for waiting jobs, start for running
// ones, due time for delayed and retrying ones, dead-letter time for dead
// ones; completed ones newest first by finish time, as [Queue.Jobs] lists
// them): a page of up to o.Limit jobs in all, each job's ID naming its
// partition as [Partitioned.Job] gives it. The cursor continues every
// partition's listing where the page left it. A page holds only jobs that
// come before any job a partition has not yet shown, so it may hold fewer
// than o.Limit jobs, even none, while the cursor is not "" (a partition's
// own page stopped at the inspector's ScanLimit, for example). Jobs are
// found again by their place in their partition's listing: when jobs of a
// partition leave the state between two pages, the next page may skip or
// repeat as many of that partition's jobs.
func (p *Partitioned) Jobs(ctx context.Context, o ListOptions) (*Page, error) {
	limit := o.Limit
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 0 || limit > MaxListLimit:
		return nil, fmt.Errorf("inspect: ListOptions.Limit %d: use 1 to %d, or 0 for the default (%d)", o.Limit, MaxListLimit, DefaultListLimit)
	}
	cursors := make([]partCursor, len(p.parts))
	if o.Cursor != "" {
		if err := json.Unmarshal([]byte(o.Cursor), &cursors); err != nil || len(cursors) != len(p.parts) || !validCursors(cursors) {
			return nil, fmt.Errorf("inspect: cursor %q is not one of a listing of the %d partitions of %s: start again with an empty cursor: %w", o.Cursor, len(p.parts), p.name, ErrInvalidCursor)
		}
	}
	// Each partition's next jobs, after those the last page showed.
	type cand struct {
		j *Job
		k int
	}
	var all []cand
	next := make([]string, len(p.parts))
	shown := make([]int, len(p.parts))
	page := &Page{}
	order := listOrder(o.State)
	var frontier *Job // the last job any partition with more to show showed
	bounded := false
	for k, q := range p.parts {
		c := cursors[k]
		if c.Done {
			continue
		}
		po := o
		po.Cursor = c.C
		po.Limit = min(limit+c.Skip, MaxListLimit)
		pp, err := q.Jobs(ctx, po)
		if err != nil {
			return nil, err
		}
		page.Scanned += pp.Scanned
		next[k] = pp.Cursor
		jobs := pp.Jobs[min(c.Skip, len(pp.Jobs)):]
		for i := range jobs {
			jobs[i].ID = rdb.PartitionJobID(k, jobs[i].ID)
			all = append(all, cand{&jobs[i], k})
		}
		shown[k] = len(jobs)
		if pp.Cursor != "" {
			// This partition may hold jobs after its last one here: no job
			// after that one can be shown yet.
			last := &Job{} // none shown: nothing can be
			if len(jobs) > 0 {
				last = &jobs[len(jobs)-1]
			}
			if !bounded || order(last, frontier) < 0 {
				frontier, bounded = last, true
			}
		}
	}
	slices.SortStableFunc(all, func(a, b cand) int { return order(a.j, b.j) })
	used := make([]int, len(p.parts))
	for _, c := range all {
		if len(page.Jobs) == limit || (bounded && order(c.j, frontier) > 0) {
			break
		}
		page.Jobs = append(page.Jobs, *c.j)
		used[c.k]++
	}
	more := false
	for k := range p.parts {
		c := &cursors[k]
		switch {
		case c.Done:
		case used[k] == shown[k]: // every job it had was shown: on to its next page
			*c = partCursor{C: next[k], Done: next[k] == ""}
		default:
			c.Skip += used[k]
		}
		more = more || !c.Done
	}
	if more {
		b, err := json.Marshal(cursors)
		if err != nil {
			return nil, err
		}
		page.Cursor = string(b)
	}
	return page, nil
}

// partCursor is where a partition's listing stands in a cursor of
// [Partitioned.Jobs]: its own cursor C and the jobs of the page from C
// already shown (Skip), or Done when its listing ended.
type partCursor struct {
	C    string `json:"c,omitempty"`
	Skip int    `json:"s,omitempty"`
	Done bool   `json:"d,omitempty"`
}

// validCursors reports whether cs could be a cursor's: a partition's skip
// stays below MaxListLimit (it is less than the jobs of a page read from
// its own cursor), and an ended listing has nothing else.
func validCursors(cs []partCursor) bool {
	for _, c := range cs {
		if c.Skip < 0 || c.Skip >= MaxListLimit || (c.Done && (c.C != "" || c.Skip != 0)) {
			return false
		}
	}
	return true
}

// listOrder returns the order of a listing of jobs in state: by jobTime,
// or newest first by finish time for completed jobs. A job with no time
// (the zero Job) comes before every other in either order.
func listOrder(state State) func(a, b *Job) int {
	if state == StateCompleted {
		return func(a, b *Job) int {
			if a.FinishedAt.IsZero() || b.FinishedAt.IsZero() {
				return a.FinishedAt.Compare(b.FinishedAt) // the zero one first
			}
			return b.FinishedAt.Compare(a.FinishedAt)
		}
	}
	return func(a, b *Job) int { return jobTime(a).Compare(jobTime(b)) }
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
// [Queue.Cancel]), found as [Partitioned.Job] finds it.
func (p *Partitioned) Cancel(ctx context.Context, id string) error {
	j, q, err := p.find(ctx, id)
	if err != nil {
		return err
	}
	_, bare, ok := rdb.SplitPartitionJobID(j.ID)
	if !ok {
		bare = j.ID
	}
	return q.Cancel(ctx, bare)
}
