package streamqtype_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/streamq/streamq/streamqtype"
)

func TestNotReplicatedError(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("enqueue: %w", &streamqtype.NotReplicatedError{Acked: 1, Want: 2, Timeout: time.Second})
	if !errors.Is(err, streamqtype.ErrNotReplicated) {
		t.Errorf("errors.Is(%v, ErrNotReplicated) = false", err)
	}
	var nr *streamqtype.NotReplicatedError
	if !errors.As(err, &nr) || nr.Acked != 1 || nr.Want != 2 || nr.Timeout != time.Second {
		t.Fatalf("errors.As(%v) = %+v", err, nr)
	}
	const want = "streamq: write not replicated: 1 of 2 replicas acknowledged it within 1s; it is stored on the master, which may lose it if it fails over now"
	if got := nr.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
