package inspect

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors a caller checks with errors.Is.
var (
	// ErrQueueNotFound: no queue of that name is registered under the prefix.
	ErrQueueNotFound = errors.New("inspect: queue not found")
	// ErrJobNotFound: no job of that ID is in the queue (in any state).
	ErrJobNotFound = errors.New("inspect: job not found")
	// ErrInvalidCursor: ListOptions.Cursor is not a cursor a page of that
	// state returned (see [Page.Cursor]).
	ErrInvalidCursor = errors.New("inspect: invalid cursor")
	// ErrUnknownReason: a dead-letter reason that streamq does not write
	// (see [ParseReason]).
	ErrUnknownReason = errors.New("inspect: unknown dead-letter reason")
	// ErrQueueInUse: DeleteQueue refused a queue whose consumers or
	// workers are live (see [InUseError]).
	ErrQueueInUse = errors.New("inspect: queue in use")
	// ErrInvalidFlowLimits: [Queue.SetFlowLimits] refused limits (a
	// negative cap, an unnamed key, a cap below 1); the error says which.
	ErrInvalidFlowLimits = errors.New("inspect: invalid flow limits")
	// ErrWorkflowNotFound: no workflow of that ID (never enqueued, or
	// expired after its retention).
	ErrWorkflowNotFound = errors.New("inspect: workflow not found")
)

// InUseError says which live consumers and workers kept
// [Inspector.DeleteQueue] from deleting a queue.
type InUseError struct {
	Queue  string
	Live   []Consumer
	Within time.Duration // DeleteQueueOptions.LiveWithin
}

// Error names the live consumers (the first five) and says what to do.
func (e *InUseError) Error() string {
	names := make([]string, 0, 5)
	for i, c := range e.Live {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(e.Live)-5))
			break
		}
		names = append(names, c.Kind+" "+c.Name)
	}
	return fmt.Sprintf("inspect: queue %q has %d live consumers or workers (seen within %s: %s): stop them first, or force the deletion",
		e.Queue, len(e.Live), e.Within, strings.Join(names, ", "))
}

// Is matches [ErrQueueInUse].
func (e *InUseError) Is(target error) bool { return target == ErrQueueInUse }

// NotFoundError says which queue or job was not found, and which names are
// close to it (queues only: the registered names within a small edit
// distance, closest first).
type NotFoundError struct {
	What    string // "queue" or "job"
	Name    string
	Similar []string
}

// Error says what was not found and suggests the similar names.
func (e *NotFoundError) Error() string {
	s := fmt.Sprintf("inspect: %s %q not found", e.What, e.Name)
	if len(e.Similar) > 0 {
		s += "; did you mean " + strings.Join(quoteAll(e.Similar), ", ") + "?"
	}
	return s
}

// Is matches [ErrQueueNotFound] for a queue, [ErrJobNotFound] for a job
// and [ErrWorkflowNotFound] for a workflow.
func (e *NotFoundError) Is(target error) bool {
	switch target {
	case ErrQueueNotFound:
		return e.What == "queue"
	case ErrJobNotFound:
		return e.What == "job"
	case ErrWorkflowNotFound:
		return e.What == "workflow"
	}
	return false
}

// StateError says that an action does not apply to a job in its state.
type StateError struct {
	ID     string
	State  State
	Action string
}

// Error reads like "job 1-0 is running: cannot delete; cancel it first".
func (e *StateError) Error() string {
	s := fmt.Sprintf("inspect: job %s is %s: cannot %s", e.ID, e.State, e.Action)
	switch {
	case e.State == StateRunning && e.Action == "delete":
		s += "; cancel it first"
	case e.Action == "cancel" && e.State != StateDone:
		s += "; only running jobs can be cancelled, delete it instead"
	case e.Action == "run now":
		s += "; only delayed and retrying jobs can be run now"
	}
	return s
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// similar returns the names within edit distance max(2, len(name)/3) of
// name, closest first, at most 5.
func similar(name string, names []string) []string {
	type cand struct {
		s string
		d int
	}
	limit := max(2, len(name)/3)
	var cs []cand
	for _, n := range names {
		d := distance(name, n)
		if d <= limit || (len(name) >= 3 && strings.Contains(n, name)) {
			cs = append(cs, cand{n, d})
		}
	}
	// insertion sort: few candidates
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && (cs[j].d < cs[j-1].d || (cs[j].d == cs[j-1].d && cs[j].s < cs[j-1].s)); j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
	out := make([]string, 0, min(len(cs), 5))
	for i := 0; i < len(cs) && i < 5; i++ {
		out = append(out, cs[i].s)
	}
	return out
}

// distance is the Levenshtein distance of a and b (bytes).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
