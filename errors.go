package streamq

import (
	"errors"
	"fmt"
	"time"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/rdb"
	"github.com/streamq/streamq/internal/wire"
	"github.com/streamq/streamq/streamqtype"
)

// Sentinel errors. Check them with [errors.Is].
var (
	// ErrQueueFull is returned by [Producer.Enqueue] and [Producer.EnqueueBatch]
	// (and wrapped by the write-behind Writer and the periodic scheduler) when
	// a consumer group has QueueConfig.MaxLen jobs it has not acknowledged yet
	// (pending or not yet delivered), or the stream has no group and holds
	// MaxLen entries. The refused jobs were not enqueued.
	ErrQueueFull = rdb.ErrQueueFull

	// ErrNotReplicated is returned (wrapped in a [*NotReplicatedError]) by
	// a write configured to wait for replicas (ProducerConfig.MinReplicas,
	// and writebehind's WriterConfig.MinReplicas) when fewer of them
	// acknowledged it in time. The write is stored on the master and its
	// result (the job's ID, the change's version) is returned with the
	// error; it may be lost if the master fails over before replicating it.
	ErrNotReplicated = streamqtype.ErrNotReplicated

	// ErrMalformed marks a stream entry that does not follow the wire format.
	// Consumers dead-letter such entries with the reason instead of running them.
	// A handler error that wraps it (the args of a typed job that do not
	// decode, see [Register]) dead-letters the job at once with
	// [ReasonMalformed].
	ErrMalformed = wire.ErrMalformed

	// ErrTooLarge is returned (wrapped) by [Producer.Enqueue] and every other
	// way of adding a job (priority pushes, write-behind changes, periodic
	// jobs) for a payload above QueueConfig.MaxPayloadBytes or headers above
	// QueueConfig.MaxHeaderBytes. Nothing was enqueued.
	ErrTooLarge = wire.ErrTooLarge

	// ErrInvalidHeader is returned (wrapped) like [ErrTooLarge] for a header
	// key or value that is not valid UTF-8: headers are stored as JSON, which
	// would replace the invalid bytes silently. Nothing was enqueued.
	ErrInvalidHeader = wire.ErrInvalidHeader

	// ErrDuplicate is returned by Enqueue when a job with the same unique key is
	// still pending or running. The returned ID is the existing job's ID.
	ErrDuplicate = errors.New("streamq: duplicate unique job")

	// ErrUnknownKind is returned by a [Mux] for a job whose kind it has no
	// route for. The job is handed back without charging an attempt, with
	// backoff, so that a worker that knows the kind can take it (a rolling
	// deploy); after its attempt budget of such hand-backs it is
	// dead-lettered with [ReasonUnknownKind].
	ErrUnknownKind = errors.New("streamq: unknown job kind")

	// ErrShutdown is the cause of a handler's context when the consumer's
	// ShutdownTimeout ran out before the handler returned.
	ErrShutdown = errors.New("streamq: consumer shut down before the job finished")

	// ErrJobTimeout is the cause of a handler's context when the job ran longer
	// than ConsumerConfig.JobTimeout.
	ErrJobTimeout = errors.New("streamq: job timeout")

	// ErrClaimLost is the cause of a handler's context when another consumer took
	// the job over (this consumer could not keep its claim alive in time).
	ErrClaimLost = errors.New("streamq: job was claimed by another consumer")

	// ErrCancelled is the cause of a handler's context when an operator
	// cancelled the running job (inspect's Queue.Cancel). A job whose handler
	// then returns an error is dead-lettered with [ReasonCancelled], never
	// retried; one whose handler returns nil anyway is done.
	ErrCancelled = errors.New("streamq: job cancelled")

	// ErrRunning is returned by Run ([Consumer.Run], and the Run of a priority
	// worker or a periodic scheduler) when it is already running.
	ErrRunning = core.ErrRunning

	// ErrNotFound is returned when a job or dead letter does not exist.
	ErrNotFound = errors.New("streamq: not found")
)

// NotReplicatedError says how many replicas acknowledged a write that
// waited for more ([ErrNotReplicated]). It is [streamqtype.NotReplicatedError],
// whose documentation lists its fields.
type NotReplicatedError = streamqtype.NotReplicatedError

// ConfigError reports an invalid configuration value and how to fix it.
type ConfigError struct {
	Field  string // the offending field or argument, e.g. "ConsumerConfig.Concurrency"
	Reason string // what is wrong and how to fix it
}

// Error says which field is wrong and how to fix it.
func (e *ConfigError) Error() string {
	return "streamq: invalid " + e.Field + ": " + e.Reason
}

func configErr(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// PermanentError wraps an error that must not be retried: a handler returning it
// sends the job straight to the dead-letter stream. Create it with [Permanent].
type PermanentError struct{ Err error }

// Error returns the wrapped error's text after "permanent: ".
func (e *PermanentError) Error() string { return "permanent: " + errString(e.Err) }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as not retryable. A handler returns Permanent(err) when
// retrying cannot help (invalid payload, a resource that no longer exists): the
// job is dead-lettered at once with err as the reason.
func Permanent(err error) error { return &PermanentError{Err: err} }

// RetryAfterError asks for a retry after a chosen delay instead of the
// consumer's backoff. Create it with [RetryAfter].
type RetryAfterError struct {
	Delay time.Duration
	Err   error
}

// Error returns the wrapped error's text with the requested delay.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %s", e.Delay, errString(e.Err))
}

// Unwrap returns the wrapped error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter makes the job be retried after d (for example the value of a
// remote service's Retry-After header) instead of after the consumer's backoff.
// The retry still counts towards MaxDeliveries.
func RetryAfter(d time.Duration, err error) error { return &RetryAfterError{Delay: d, Err: err} }

// PostponeError asks for a job to run again later without counting the
// attempt. Create it with [Postpone].
type PostponeError struct {
	Delay time.Duration
	Err   error
}

// Error returns the wrapped error's text with the postponement.
func (e *PostponeError) Error() string {
	return fmt.Sprintf("postponed for %s: %s", e.Delay, errString(e.Err))
}

// Unwrap returns the wrapped error.
func (e *PostponeError) Unwrap() error { return e.Err }

// Postpone hands the job back to run again after d without charging an
// attempt: the job did not fail, it could not start yet (a rate limit, a
// resource that is busy). It is not counted as failed, is not recorded as
// the job's last error, and does not count towards MaxDeliveries, so a job
// that is postponed forever never reaches the dead-letter stream: use it for
// conditions that pass. reason says why (it may be nil).
func Postpone(d time.Duration, reason error) error { return &PostponeError{Delay: d, Err: reason} }

// PanicError is the failure recorded when a handler panics. The panic is
// recovered at the library boundary so one bad job cannot crash the worker.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the goroutine's stack at the panic
}

// Error returns the panic's value after "panic: ".
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
