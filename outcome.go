package streamq

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// This file holds the rules that decide what happens to a job after an
// attempt, and the fields a job carries from one attempt to the next. The
// [Consumer] applies them to stream entries; adapters that run jobs from
// other structures (the priority package's sorted sets) apply the very same
// rules through the exported functions below, so a job is retried,
// dead-lettered and recorded alike wherever it runs.

// maxErrorLen bounds the error text stored with a retried or dead-lettered job.
const maxErrorLen = 4096

// DecodeMessage parses job fields in the wire format (version 1), as stored
// in a stream entry or by an adapter, into a Message. id is the job's ID and
// deliveries how many times this copy of the job has been handed to a worker
// (1 on the first). The error wraps [ErrMalformed] and says which field is
// wrong; the Message is never nil, so that a malformed job can still be
// dead-lettered with [DeadLetterFields] (which keeps its raw fields).
func DecodeMessage(queue, id string, fields map[string]any, deliveries int) (*Message, error) {
	msg, err := decodeMessage(queue, id, fields)
	msg.Deliveries = deliveries
	return msg, err
}

// Verdict is what happens to a job after a failed or abandoned attempt.
type Verdict struct {
	// DeadLetter is true when the job goes to the dead-letter stream now;
	// otherwise it is retried after Delay.
	DeadLetter bool
	// Reason is the dead-letter reason: [ReasonPermanent] or [ReasonMaxDeliveries].
	Reason string
	// Attempts is the number of attempts made, as recorded in a dead letter.
	Attempts int
	// Delay is how long the job waits before its retry.
	Delay time.Duration
	// Postponed is true when the handler asked for the job to be postponed
	// ([Postpone]): it is retried after Delay and the attempt is not charged.
	Postponed bool
}

// Decide applies the retry rules to an attempt of msg that failed with err:
// a [Permanent] error, or a failure on attempt number maxDeliveries,
// dead-letters the job; otherwise it is retried after backoff(attempt), or
// after the delay of a [RetryAfter] error. A [Postpone] error retries it
// after its delay without charging the attempt.
func Decide(msg *Message, err error, maxDeliveries int, backoff BackoffFunc) Verdict {
	n := msg.Attempts()
	if pe, ok := errors.AsType[*PostponeError](err); ok {
		return Verdict{Attempts: n - 1, Delay: max(pe.Delay, 0), Postponed: true}
	}
	if _, ok := errors.AsType[*PermanentError](err); ok {
		return Verdict{DeadLetter: true, Reason: ReasonPermanent, Attempts: n}
	}
	if n >= maxDeliveries {
		return Verdict{DeadLetter: true, Reason: ReasonMaxDeliveries, Attempts: n}
	}
	if ra, ok := errors.AsType[*RetryAfterError](err); ok {
		return Verdict{Attempts: n, Delay: max(ra.Delay, 0)}
	}
	return Verdict{Attempts: n, Delay: backoff(n)}
}

// Exhausted reports whether msg arrived for one more attempt than
// maxDeliveries allows. That happens when its earlier deliveries ended
// without a verdict: the workers running it crashed, hung or were cut off.
// The job must then be dead-lettered without running, with the returned
// verdict and cause.
func Exhausted(msg *Message, maxDeliveries int) (Verdict, error, bool) {
	if msg.Attempts() <= maxDeliveries {
		return Verdict{}, nil, false
	}
	made := msg.Attempts() - 1 // this delivery does not run
	cause := fmt.Errorf("attempted %d times without finishing (workers crashed or lost it)", made)
	if msg.LastError != "" {
		cause = fmt.Errorf("%w; last error: %s", cause, msg.LastError)
	}
	return Verdict{DeadLetter: true, Reason: ReasonMaxDeliveries, Attempts: made}, cause, true
}

// LastAttemptAfterCrash reports whether a job whose earlier runs were cut
// short (it was taken over from a worker that died, hung or was cut off:
// deliveries > 1, or a copy handed back without charge after such runs,
// which carries the "crashed" mark) is about to make the last attempt
// maxDeliveries allows. fields are the job's raw wire fields. Such an
// attempt must run alone: the worker that died may have been killed by
// another job running beside it (a poison job that crashes the process
// takes its neighbours down too, and they are taken over together), and a
// job should only be dead-lettered for crashes if it crashed a worker on its
// own.
func LastAttemptAfterCrash(fields map[string]any, deliveries, maxDeliveries int) bool {
	if deliveries < 2 && !isCrashed(fields) {
		return false
	}
	attempt := 0
	if a, ok := str(fields[fieldAttempt]); ok {
		n, err := strconv.Atoi(a)
		if err != nil {
			return false // malformed: dead-lettered without running
		}
		attempt = n
	}
	return attempt+deliveries == maxDeliveries
}

// RetryFields returns the wire fields of msg for its next attempt, as a flat
// field/value list. If charged, the attempt that failed with cause counts
// towards MaxDeliveries and is recorded as the last error; otherwise (the
// job was handed back because of a shutdown) only the deliveries before this
// one are counted. Redis's delivery counter restarts at 1 for the new copy,
// so the deliveries of this copy are carried over into the attempt field;
// an uncharged copy of a job whose runs were cut short by crashes is marked
// "crashed", so that [LastAttemptAfterCrash] still knows it. A charged
// failure ends that streak: the job ran to the end.
func RetryFields(msg *Message, cause error, charged bool, now time.Time) []any {
	j := jobFromMessage(msg)
	j.crashed = !charged && (msg.crashed || msg.Deliveries >= 2)
	if charged {
		j.attempt = msg.Attempts()
		if j.firstFail == 0 {
			j.firstFail = millis(now)
		}
		j.lastErr = truncate(errString(cause), maxErrorLen)
	} else {
		j.attempt = msg.Attempts() - 1
	}
	return j.args()
}

// DeadLetterFields returns the fields of a dead letter for msg, as a flat
// field/value list for XADD to the queue's dead-letter stream: the reason,
// the error, the attempts made, the first and last failure times and the
// job's original fields, in the format [DeadLetters] reads.
func DeadLetterFields(msg *Message, reason string, cause error, attempts int, now time.Time) []any {
	first := msg.FirstFailedAt
	if first.IsZero() {
		first = now
	}
	args := make([]any, 0, 14+2*len(msg.fields))
	args = append(args,
		dlQueue, msg.Queue,
		dlID, msg.ID,
		dlReason, reason,
		dlError, truncate(errString(cause), maxErrorLen),
		dlAttempts, strconv.Itoa(attempts),
		dlFirstFail, strconv.FormatInt(millis(first), 10),
		dlFailed, strconv.FormatInt(millis(now), 10),
	)
	for k, v := range msg.fields {
		if strings.HasPrefix(k, dlFieldsPref) {
			continue // a requeued dead letter never carries these; a raw entry might
		}
		args = append(args, k, v)
	}
	return args
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "...(truncated)"
}
