package middleware

import (
	"context"
	"errors"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/priority"
)

// errClass is a low-cardinality classification of a job failure, reported as
// the error.type attribute of spans and metrics and the error_type log key.
type errClass uint8

const (
	classOther errClass = iota
	classPanic
	classTimeout
	classShutdown
	classClaimLost
	classCanceled
	classPermanent
	classRetryAfter
	classRateLimited
	numClasses
)

// String returns the error.type value. "_OTHER" is the OpenTelemetry
// semantic conventions' value for errors without a better name.
func (c errClass) String() string {
	switch c {
	case classPanic:
		return "panic"
	case classTimeout:
		return "timeout"
	case classShutdown:
		return "shutdown"
	case classClaimLost:
		return "claim_lost"
	case classCanceled:
		return "canceled"
	case classPermanent:
		return "permanent"
	case classRetryAfter:
		return "retry_after"
	case classRateLimited:
		return "rate_limited"
	}
	return "_OTHER"
}

// classify names the failure err of a handler that ran with ctx. A cancelled
// context explains the failure better than the error the handler returned
// (usually just context.Canceled).
// It allocates nothing: Metrics classifies every failed job.
func classify(ctx context.Context, err error) errClass {
	if has[*streamq.PanicError](err) {
		return classPanic
	}
	if errors.Is(err, ErrRateLimited) {
		return classRateLimited
	}
	if ctx.Err() != nil {
		if c := causeClass(context.Cause(ctx)); c != classOther {
			return c
		}
	}
	if c := causeClass(err); c != classOther {
		return c
	}
	if has[*streamq.PermanentError](err) {
		return classPermanent
	}
	if has[*streamq.RetryAfterError](err) {
		return classRetryAfter
	}
	return classOther
}

// has reports whether err's tree holds an error of type T. Unlike
// errors.As with a local target, which then escapes to the heap, it
// allocates nothing.
func has[T error](err error) bool {
	_, ok := errors.AsType[T](err)
	return ok
}

// postponement returns the [*streamq.PostponeError] in err when the consumer
// settles err, returned by a handler that ran with ctx, as a postponement (the
// job runs again later, no attempt is charged, it is not a failure) rather
// than as a failure. A shutdown or a lost claim overrides the postponement:
// the consumer counts those as failures whatever the handler returned, and
// so do Metrics, Logging and Tracing.
func postponement(ctx context.Context, err error) (*streamq.PostponeError, bool) {
	pe, ok := errors.AsType[*streamq.PostponeError](err)
	if !ok {
		return nil, false
	}
	if ctx.Err() != nil {
		if c := causeClass(context.Cause(ctx)); c == classShutdown || c == classClaimLost {
			return nil, false
		}
	}
	return pe, true
}

func causeClass(err error) errClass {
	switch {
	case errors.Is(err, streamq.ErrJobTimeout), errors.Is(err, context.DeadlineExceeded):
		return classTimeout
	case errors.Is(err, streamq.ErrShutdown):
		return classShutdown
	case errors.Is(err, streamq.ErrClaimLost):
		return classClaimLost
	case errors.Is(err, context.Canceled):
		return classCanceled
	}
	return classOther
}

// sendClass names the error err of an enqueue (a send), for the error.type
// attribute of send spans and metrics.
func sendClass(err error) string {
	switch {
	case errors.Is(err, streamq.ErrDuplicate):
		return "duplicate"
	case errors.Is(err, streamq.ErrQueueFull):
		return "queue_full"
	case errors.Is(err, streamq.ErrNotReplicated):
		return "not_replicated"
	case errors.Is(err, streamq.ErrTooLarge):
		return "too_large"
	case errors.Is(err, streamq.ErrInvalidHeader):
		return "invalid_header"
	case errors.Is(err, priority.ErrInvalidPriority):
		return "invalid_priority"
	case has[*streamq.ConfigError](err):
		return "invalid_config"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return classOther.String()
}
