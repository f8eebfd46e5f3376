package streamq

import (
	"context"
	"errors"
	"runtime/debug"

	"github.com/streamq/streamq/internal/engine"
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

// callHandler calls h.Handle and turns a panic into a [*PanicError] with the
// stack, so that one bad job cannot crash the worker.
func callHandler(ctx context.Context, h Handler, msg *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h.Handle(ctx, msg)
}

// exec is the engine's view of a handler.
type exec struct {
	h     Handler
	group string
}

func (x exec) Call(ctx context.Context, r engine.Run, m *Message) error {
	fillMessage(m, &r, x.group)
	return callHandler(ctx, x.h, m)
}

// Classify says what a handler error asks for: [Postpone], [Permanent],
// [RetryAfter], a kind no route knows ([ErrUnknownKind]), args that do not
// decode ([ErrMalformed]), or a plain failure.
func (exec) Classify(err error) engine.Outcome {
	if pe, ok := errors.AsType[*PostponeError](err); ok {
		return engine.Outcome{Kind: engine.Postpone, Delay: pe.Delay}
	}
	if _, ok := errors.AsType[*PermanentError](err); ok {
		return engine.Outcome{Kind: engine.Permanent}
	}
	if ra, ok := errors.AsType[*RetryAfterError](err); ok {
		return engine.Outcome{Kind: engine.RetryAfter, Delay: ra.Delay}
	}
	if errors.Is(err, ErrUnknownKind) {
		return engine.Outcome{Kind: engine.UnknownKind}
	}
	if errors.Is(err, ErrMalformed) {
		return engine.Outcome{Kind: engine.Malformed}
	}
	return engine.Outcome{Kind: engine.Fail}
}

// newEngine returns the engine of every consumer and worker (see
// internal/core): h is a Handler, onEvent a func(context.Context, Event) or
// nil.
func newEngine(h any, onEvent any, group string, cfg engine.Config) engine.Runner {
	cfg.ShutdownCause, cfg.LostCause, cfg.TimeoutCause, cfg.CancelCause = ErrShutdown, ErrClaimLost, ErrJobTimeout, ErrCancelled
	if fn, ok := onEvent.(func(context.Context, Event)); ok && fn != nil {
		cfg.OnEvent = func(ctx context.Context, e engine.Event) { fn(ctx, newEvent(e, group)) }
	}
	return engine.New[Message](cfg, exec{h: h.(Handler), group: group})
}
