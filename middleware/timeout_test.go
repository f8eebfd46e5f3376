package middleware_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/middleware"
)

// blockUntilDone returns a handler that waits for its context to end and
// reports the context's cause on causes.
func blockUntilDone(causes chan<- error) streamq.Handler {
	return streamq.HandlerFunc(func(ctx context.Context, _ *streamq.Message) error {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
}

func TestTimeout_Expires(t *testing.T) {
	t.Parallel()
	causes := make(chan error, 1)
	h := streamq.Chain(blockUntilDone(causes), middleware.Timeout(10*time.Millisecond))
	err := h.Handle(context.Background(), &streamq.Message{})
	if !errors.Is(err, streamq.ErrJobTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want ErrJobTimeout wrapping context.DeadlineExceeded", err)
	}
	if cause := <-causes; !errors.Is(cause, streamq.ErrJobTimeout) {
		t.Errorf("context.Cause = %v, want ErrJobTimeout", cause)
	}
}

func TestTimeout_KeepsErrorTypes(t *testing.T) {
	t.Parallel()
	h := streamq.Chain(streamq.HandlerFunc(func(ctx context.Context, _ *streamq.Message) error {
		<-ctx.Done()
		return streamq.Permanent(ctx.Err())
	}), middleware.Timeout(time.Millisecond))
	err := h.Handle(context.Background(), &streamq.Message{})
	var perm *streamq.PermanentError
	if !errors.As(err, &perm) || !errors.Is(err, streamq.ErrJobTimeout) {
		t.Errorf("err = %v, want a PermanentError and ErrJobTimeout", err)
	}
}

func TestTimeout_ParentCancelled(t *testing.T) {
	t.Parallel()
	causes := make(chan error, 1)
	h := streamq.Chain(blockUntilDone(causes), middleware.Timeout(time.Hour))
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(streamq.ErrShutdown)
	err := h.Handle(ctx, &streamq.Message{})
	if errors.Is(err, streamq.ErrJobTimeout) {
		t.Errorf("err = %v: a cancelled parent is not a timeout", err)
	}
	if cause := <-causes; !errors.Is(cause, streamq.ErrShutdown) {
		t.Errorf("context.Cause = %v, want ErrShutdown", cause)
	}
}

func TestTimeout_Disabled(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Second} {
		h := streamq.Chain(streamq.HandlerFunc(func(ctx context.Context, _ *streamq.Message) error {
			if _, ok := ctx.Deadline(); ok {
				return errors.New("context has a deadline")
			}
			return nil
		}), middleware.Timeout(d))
		if err := h.Handle(context.Background(), &streamq.Message{}); err != nil {
			t.Errorf("Timeout(%s): %v", d, err)
		}
	}
}
