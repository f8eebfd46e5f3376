package streamq

import (
	"context"

	"github.com/streamq/streamq/internal/engine"
)

// MaxProgressMessage bounds the message of [SetProgress], in bytes.
const MaxProgressMessage = engine.MaxProgressMessage

// SetProgress records the progress of the running job whose handler got
// ctx (or a context derived from it): percent from 0 to 100 and a short
// message (at most [MaxProgressMessage] bytes, else an error wrapping
// [ErrTooLarge]). Operators read it by the job's stable ID
// ([Message.ID]) with the inspect package while the job runs and for
// ConsumerConfig.ResultRetention after. Each call is one SET; report
// progress at human pace (every few seconds), not per item. It works the
// same in priority workers.
func SetProgress(ctx context.Context, percent int, msg string) error {
	return engine.SetProgress(ctx, percent, msg)
}

// SetResult records a small result of the running job whose handler got ctx
// (or a context derived from it), kept for ConsumerConfig.ResultRetention
// and read by the job's stable ID with the inspect package. It must be at
// most ConsumerConfig.MaxResultBytes, else the error wraps [ErrTooLarge];
// store large results elsewhere and record a reference. A later call
// replaces the result. It works the same in priority workers.
func SetResult(ctx context.Context, result []byte) error {
	return engine.SetResult(ctx, result)
}
