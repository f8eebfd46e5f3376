package middleware

import (
	"context"
	"runtime/debug"

	"github.com/streamq/streamq"
)

// Recover returns middleware that turns a panic in the rest of the chain into
// a returned [*streamq.PanicError] holding the panic value and the stack of
// the panicking goroutine, so that one bad job cannot crash the process.
//
// A [streamq.Consumer] already recovers panics in its handlers; Recover is for
// running handlers elsewhere (tests, another runtime), and as the outermost
// middleware it also catches panics raised by other middleware.
func Recover() streamq.Middleware {
	return func(next streamq.Handler) streamq.Handler {
		return streamq.HandlerFunc(func(ctx context.Context, msg *streamq.Message) (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = &streamq.PanicError{Value: r, Stack: debug.Stack()}
				}
			}()
			return next.Handle(ctx, msg)
		})
	}
}
