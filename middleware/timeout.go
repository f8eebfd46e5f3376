package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/streamq/streamq"
)

// Timeout returns middleware that bounds each job to d: the handler's context
// is cancelled after d with cause [streamq.ErrJobTimeout] (see
// [context.Cause]). When the handler then returns an error, Timeout wraps it
// so that errors.Is(err, streamq.ErrJobTimeout) holds; [errors.As] still finds
// the handler's own error types.
//
// Like the consumer's JobTimeout, Timeout cannot stop a handler that ignores
// its context: it waits for the handler to return, so a job never runs twice
// at once. A d of zero or less returns the handler unchanged (no timeout).
func Timeout(d time.Duration) streamq.Middleware {
	return func(next streamq.Handler) streamq.Handler {
		if d <= 0 {
			return next
		}
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) error {
			tctx, cancel := context.WithTimeoutCause(ctx, d, streamq.ErrJobTimeout)
			defer cancel()
			err := next.Handle(tctx, msg)
			if err != nil && ctx.Err() == nil &&
				errors.Is(context.Cause(tctx), streamq.ErrJobTimeout) &&
				!errors.Is(err, streamq.ErrJobTimeout) {
				err = fmt.Errorf("%w after %s: %w", streamq.ErrJobTimeout, d, err)
			}
			return err
		})
	}
}
