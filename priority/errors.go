package priority

import "errors"

// Sentinel errors. Check them with [errors.Is].
var (
	// ErrInvalidPriority marks a priority outside [MinPriority, MaxPriority],
	// or a [HeaderPriority] header that is not a decimal integer in that
	// range. [Queue.Push] returns it (wrapped) and pushes nothing; [Forward]
	// returns it wrapped in [streamq.Permanent], so the stream consumer
	// dead-letters the job with the reason.
	ErrInvalidPriority = errors.New("priority: invalid priority")

	// ErrWrongQueue is returned (wrapped in [streamq.Permanent]) by the
	// handler of [Forward] for a job of another queue: a job can only be
	// forwarded into the priority set of its own queue, whose keys share the
	// stream's hash tag.
	ErrWrongQueue = errors.New("priority: job belongs to another queue")
)
