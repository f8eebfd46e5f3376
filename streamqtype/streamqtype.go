// Package streamqtype holds the types that streamq's packages share with
// its users and with each other: a small leaf package that imports nothing
// from streamq, so that internal packages can return these types and the
// root package can alias them (streamq.NotReplicatedError is
// streamqtype.NotReplicatedError), with their fields shown in godoc.
//
// Users rarely import it: the root package exports the same names.
package streamqtype

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotReplicated is what a write that waits for replicas returns, wrapped
// in a [*NotReplicatedError], when fewer replicas than asked acknowledged it
// in time. The root package exports it as streamq.ErrNotReplicated.
var ErrNotReplicated = errors.New("streamq: write not replicated")

// NotReplicatedError says how many replicas acknowledged a write that
// waited for more: the write is stored on the master, which may lose it if
// it fails over before replicating it. errors.Is(err, [ErrNotReplicated])
// reports it.
type NotReplicatedError struct {
	// Acked is the number of replicas that acknowledged the write in time.
	Acked int
	// Want is the number that had to (ProducerConfig.MinReplicas).
	Want int
	// Timeout is how long the write waited for them.
	Timeout time.Duration
}

// Error says how many replicas acknowledged the write and what that means.
func (e *NotReplicatedError) Error() string {
	return fmt.Sprintf("%s: %d of %d replicas acknowledged it within %s; it is stored on the master, which may lose it if it fails over now", ErrNotReplicated, e.Acked, e.Want, e.Timeout)
}

// Unwrap returns [ErrNotReplicated].
func (e *NotReplicatedError) Unwrap() error { return ErrNotReplicated }
