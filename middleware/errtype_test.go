package middleware

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/streamq/streamq"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cancelled := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want string
	}{
		{"plain", context.Background(), boom, "_OTHER"},
		{"panic", context.Background(), &streamq.PanicError{Value: "x"}, "panic"},
		{"panic beats cancel", cancelled(streamq.ErrShutdown), &streamq.PanicError{Value: "x"}, "panic"},
		{"timeout error", context.Background(), fmt.Errorf("%w: %w", streamq.ErrJobTimeout, context.DeadlineExceeded), "timeout"},
		{"deadline", context.Background(), context.DeadlineExceeded, "timeout"},
		{"shutdown cause", cancelled(streamq.ErrShutdown), context.Canceled, "shutdown"},
		{"claim lost cause", cancelled(streamq.ErrClaimLost), boom, "claim_lost"},
		{"canceled", context.Background(), context.Canceled, "canceled"},
		{"permanent", context.Background(), streamq.Permanent(boom), "permanent"},
		{"retry after", context.Background(), streamq.RetryAfter(time.Second, boom), "retry_after"},
		{"rate limited", context.Background(), streamq.RetryAfter(time.Second, ErrRateLimited), "rate_limited"},
		{"postponed by a rate limit", context.Background(), streamq.Postpone(time.Second, ErrRateLimited), "rate_limited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := classify(tt.ctx, tt.err).String(); got != tt.want {
				t.Errorf("classify(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestPostponement(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cancelled := func(cause error) context.Context {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		return ctx
	}
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"plain error", context.Background(), boom, false},
		{"retry after", context.Background(), streamq.RetryAfter(time.Second, boom), false},
		{"postpone", context.Background(), streamq.Postpone(time.Second, boom), true},
		{"wrapped postpone", context.Background(), fmt.Errorf("x: %w", streamq.Postpone(time.Second, nil)), true},
		{"postpone after a job timeout", cancelled(streamq.ErrJobTimeout), streamq.Postpone(time.Second, boom), true},
		{"postpone during shutdown", cancelled(streamq.ErrShutdown), streamq.Postpone(time.Second, boom), false},
		{"postpone after the claim was lost", cancelled(streamq.ErrClaimLost), streamq.Postpone(time.Second, boom), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, got := postponement(tt.ctx, tt.err); got != tt.want {
				t.Errorf("postponement(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
