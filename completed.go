package streamq

import (
	"context"
	"log/slog"
	"time"

	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
)

// Completed jobs (QueueConfig.CompletedRetention): the records a consumer
// hands to its acknowledgement, which writes them in the same script.

// completedJobs returns the records of the jobs of done, for a queue that
// keeps completed jobs: what the deliveries' fields say of each, and how
// long ago its handler started (the acknowledgement turns that into a
// start time on Redis's clock).
func completedJobs(done []engine.Finished) []rdb.CompletedJob {
	out := make([]rdb.CompletedJob, len(done))
	now := time.Now()
	for i := range done {
		f := &done[i]
		c := &out[i]
		c.Entry, c.JobID, c.Attempt = f.Key, f.ID, f.Attempt
		if !f.Started.IsZero() {
			c.Ran = max(now.Sub(f.Started), 0)
		}
		if f.D == nil {
			continue
		}
		c.JobID = f.D.StableID()
		c.Kind, _ = wire.Str(f.D.Fields[wire.FieldKind])
		c.Enq, _ = wire.Str(f.D.Fields[wire.FieldEnqueued])
		payload, _ := wire.Str(f.D.Fields[wire.FieldPayload])
		c.Size = len(payload)
		if c.Size <= CompletedPayloadMax {
			c.Payload = payload
		}
	}
	return out
}

// noteCompleted notes the queue's retention of completed jobs for the
// inspector (or removes the note when it keeps none), when a consumer
// starts. A failure only leaves the inspector's note stale: it is logged.
func noteCompleted(ctx context.Context, q *Queue, log *slog.Logger) {
	if err := q.db.NoteCompleted(ctx); err != nil {
		log.WarnContext(ctx, "streamq: cannot note the retention of completed jobs for the inspector", "queue", q.name, "error", err)
	}
}
