package streamq

import (
	"context"
	"runtime/debug"
)

// Handler runs one job. Returning nil acknowledges the job; returning an error
// retries it with backoff (see [RetryAfter] and [Permanent]) until
// ConsumerConfig.MaxDeliveries is reached, then dead-letters it.
//
// ctx is cancelled when the job times out, when the consumer's shutdown drain
// deadline passes, or when another consumer took the job over;
// [context.Cause] tells which ([ErrJobTimeout], [ErrShutdown], [ErrClaimLost]).
// Handlers must be safe for concurrent use.
type Handler interface {
	Handle(ctx context.Context, msg *Message) error
}

// HandlerFunc adapts an ordinary function to [Handler].
type HandlerFunc func(ctx context.Context, msg *Message) error

// Handle calls f(ctx, msg).
func (f HandlerFunc) Handle(ctx context.Context, msg *Message) error { return f(ctx, msg) }

// Middleware wraps a Handler with behaviour that runs around it (logging,
// tracing, rate limiting, ...).
type Middleware func(Handler) Handler

// Chain wraps h with the middleware so that the first one is the outermost:
// Chain(h, a, b) runs a, then b, then h.
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// CallHandler calls h.Handle and turns a panic into a [*PanicError] with the
// stack, so that one bad job cannot crash the worker. Consumers call every
// handler through it; adapters that run handlers themselves should too.
func CallHandler(ctx context.Context, h Handler, msg *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h.Handle(ctx, msg)
}
