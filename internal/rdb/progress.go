package rdb

import (
	"context"
	"encoding/json"
	"time"
)

// Progress is the stored form of a job's progress.
type Progress struct {
	Percent int    `json:"pct"`
	Message string `json:"msg"`
	At      int64  `json:"at"` // Unix milliseconds
}

// ProgressParams are one progress report.
type ProgressParams struct {
	JobID     string // the job's stable ID
	Percent   int
	Message   string
	Retention time.Duration // how long the report is kept
}

// SetProgress stores the progress of job p.JobID, stamped with the queue's
// clock. A call sent again stores the same report again.
func (q *Queue) SetProgress(ctx context.Context, p ProgressParams) error {
	b, _ := json.Marshal(Progress{Percent: p.Percent, Message: p.Message, At: q.clock.Now().UnixMilli()})
	return q.client.Set(ctx, q.keys.Progress(p.JobID), b, p.Retention).Err()
}

// ResultParams are one result of a job.
type ResultParams struct {
	JobID     string // the job's stable ID
	Result    []byte
	Retention time.Duration // how long the result is kept
}

// SetResult stores the result of job p.JobID. A call sent again stores the
// same result again.
func (q *Queue) SetResult(ctx context.Context, p ResultParams) error {
	return q.client.Set(ctx, q.keys.Result(p.JobID), p.Result, p.Retention).Err()
}
