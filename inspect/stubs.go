package inspect

import (
	"context"
	"errors"
	"time"
)

var errTODO = errors.New("inspect: not implemented yet")

// Overview reads the queue's counts.
func (q *Queue) Overview(ctx context.Context) (*Overview, error) { return nil, errTODO }

// Throughput returns the processed and failed counts of the last minutes
// (at most MaxThroughputMinutes), one Point per minute, oldest first.
func (q *Queue) Throughput(ctx context.Context, minutes int) ([]Point, error) { return nil, errTODO }

// Jobs lists jobs in one state.
func (q *Queue) Jobs(ctx context.Context, o ListOptions) (*Page, error) { return nil, errTODO }

// Job returns one job by ID.
func (q *Queue) Job(ctx context.Context, id string) (*Job, error) { return nil, errTODO }

// Consumers lists consumers or workers.
func (q *Queue) Consumers(ctx context.Context) ([]Consumer, error) { return nil, errTODO }

// PruneConsumers deletes idle consumers without pending jobs.
func (q *Queue) PruneConsumers(ctx context.Context, idle time.Duration) ([]string, error) {
	return nil, errTODO
}

// Schedules lists periodic schedules.
func (in *Inspector) Schedules(ctx context.Context, queue string) ([]Schedule, error) {
	return nil, errTODO
}

// Levels lists priority levels.
func (q *Queue) Levels(ctx context.Context) ([]Level, error) { return nil, errTODO }

// WriteBehind reads the write-behind status.
func (q *Queue) WriteBehind(ctx context.Context) (*WriteBehindStatus, error) { return nil, errTODO }

// Pause pauses the queue.
func (q *Queue) Pause(ctx context.Context) error { return errTODO }

// Resume resumes the queue.
func (q *Queue) Resume(ctx context.Context) error { return errTODO }

// Delete deletes a job.
func (q *Queue) Delete(ctx context.Context, id string) error { return errTODO }

// RunNow runs a delayed or retrying job now.
func (q *Queue) RunNow(ctx context.Context, id string) error { return errTODO }

// Cancel asks for a running job to be cancelled.
func (q *Queue) Cancel(ctx context.Context, id string) error { return errTODO }

// CountDead counts dead letters matching f.
func (q *Queue) CountDead(ctx context.Context, f DeadFilter) (int, error) { return 0, errTODO }

// RequeueDead requeues dead letters matching f.
func (q *Queue) RequeueDead(ctx context.Context, f DeadFilter, progress func(done int)) (int, error) {
	return 0, errTODO
}

// PurgeDead deletes dead letters matching f.
func (q *Queue) PurgeDead(ctx context.Context, f DeadFilter, progress func(done int)) (int, error) {
	return 0, errTODO
}
