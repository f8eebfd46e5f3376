package rdb

import (
	"context"
	"encoding/json"
	"time"

	"github.com/redis/go-redis/v9"
)

// Progress is the stored form of a job's progress.
type Progress struct {
	Percent int    `json:"pct"`
	Message string `json:"msg"`
	At      int64  `json:"at"` // Unix milliseconds
}

// SetProgress stores the progress of job id for retention.
func SetProgress(ctx context.Context, c redis.Cmdable, k Keys, id string, p Progress, retention time.Duration) error {
	b, _ := json.Marshal(p)
	return c.Set(ctx, k.Progress(id), b, retention).Err()
}

// SetResult stores the result of job id for retention.
func SetResult(ctx context.Context, c redis.Cmdable, k Keys, id string, result []byte, retention time.Duration) error {
	return c.Set(ctx, k.Result(id), result, retention).Err()
}
