package streamq

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Mux is a [Handler] that routes jobs by kind ([Message.Kind], set with
// [WithKind] or by [EnqueueArgs]) to the handler of the kind's route, as
// net/http's ServeMux routes requests by path. Routes are added with
// [Mux.Route], [Mux.RouteFunc] and, for typed jobs, [Register]; each may have
// its own middleware, inside the consumer's.
//
// A job whose kind has no route is not failed: the Mux returns an error
// wrapping [ErrUnknownKind], and the consumer hands the job back without
// charging an attempt, with backoff, so that a worker that knows the kind
// takes it (in a rolling deploy, a kind enqueued before any worker of the
// new version runs). Only when no worker knew it for the job's whole
// attempt budget (MaxAttempts or ConsumerConfig.MaxDeliveries) of such
// hand-backs is it dead-lettered, with [ReasonUnknownKind].
//
// Routes may be added while the Mux serves jobs. It is safe for concurrent
// use.
type Mux struct {
	mu     sync.Mutex                // serialises route changes
	routes atomic.Pointer[muxRoutes] // read without a lock by Handle
	codec  Codec
}

type muxRoutes map[string]Handler

// MuxOption configures a [Mux].
type MuxOption func(*Mux)

// MuxCodec sets the codec that typed routes ([Register]) decode args with.
// Defaults to [JSONCodec].
func MuxCodec(c Codec) MuxOption {
	return func(m *Mux) {
		if c != nil {
			m.codec = c
		}
	}
}

// NewMux returns an empty Mux.
func NewMux(opts ...MuxOption) *Mux {
	m := &Mux{codec: JSONCodec{}}
	for _, o := range opts {
		o(m)
	}
	m.routes.Store(&muxRoutes{})
	return m
}

// Route routes jobs of kind to h, wrapped in mws (the first is the
// outermost). It panics, as http.ServeMux does for a bad pattern, if kind
// is not a valid kind (see [WithKind]) or already has a route, or if h is
// nil: these are programming errors found at start-up.
func (m *Mux) Route(kind string, h Handler, mws ...Middleware) {
	if err := checkName("Mux.Route", "kind", kind, MaxKindLen, `"email.send"`); err != nil {
		panic(err)
	}
	if h == nil {
		panic(fmt.Sprintf("streamq: Mux.Route(%q): the handler is nil", kind))
	}
	for i, mw := range mws {
		if mw == nil {
			panic(fmt.Sprintf("streamq: Mux.Route(%q): middleware %d is nil", kind, i))
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.routes.Load()
	if _, dup := old[kind]; dup {
		panic(fmt.Sprintf("streamq: Mux.Route(%q): the kind already has a route", kind))
	}
	routes := make(muxRoutes, len(old)+1)
	for k, v := range old {
		routes[k] = v
	}
	routes[kind] = Chain(h, mws...)
	m.routes.Store(&routes)
}

// RouteFunc routes jobs of kind to the function f; see [Mux.Route].
func (m *Mux) RouteFunc(kind string, f func(ctx context.Context, msg *Message) error, mws ...Middleware) {
	if f == nil {
		panic(fmt.Sprintf("streamq: Mux.RouteFunc(%q): the function is nil", kind))
	}
	m.Route(kind, HandlerFunc(f), mws...)
}

// Kinds returns the kinds that have a route, sorted.
func (m *Mux) Kinds() []string {
	routes := *m.routes.Load()
	kinds := make([]string, 0, len(routes))
	for k := range routes {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}

// Handle runs the handler of msg's kind, or returns an error wrapping
// [ErrUnknownKind] when the kind has no route.
func (m *Mux) Handle(ctx context.Context, msg *Message) error {
	h, ok := (*m.routes.Load())[msg.Kind]
	if !ok {
		return fmt.Errorf("%w %q: this worker routes %q", ErrUnknownKind, msg.Kind, m.Kinds())
	}
	return h.Handle(ctx, msg)
}
