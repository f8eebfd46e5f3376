package streamq

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/streamq/streamq/internal/engine"
)

func TestMux_Route(t *testing.T) {
	t.Parallel()
	var order []string
	mw := func(name string) Middleware {
		return func(next Handler) Handler {
			return HandlerFunc(func(ctx context.Context, msg *Message) error {
				order = append(order, name)
				return next.Handle(ctx, msg)
			})
		}
	}
	m := NewMux()
	m.RouteFunc("b", func(context.Context, *Message) error { order = append(order, "b"); return nil }, mw("outer"), mw("inner"))
	m.RouteFunc("a", func(context.Context, *Message) error { order = append(order, "a"); return nil })
	if err := m.Handle(context.Background(), &Message{Kind: "b"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order, []string{"outer", "inner", "b"}) {
		t.Errorf("order = %v: route middleware must run first-outermost around its handler only", order)
	}
	if k := m.Kinds(); !slices.Equal(k, []string{"a", "b"}) {
		t.Errorf("Kinds() = %v", k)
	}
	err := m.Handle(context.Background(), &Message{Kind: "c"})
	if !errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), `"c"`) {
		t.Errorf("unknown kind: err = %v", err)
	}
}

func TestMux_RoutePanics(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, *Message) error { return nil }
	tests := []struct {
		name string
		do   func(m *Mux)
		want string
	}{
		{"empty kind", func(m *Mux) { m.RouteFunc("", noop) }, "empty"},
		{"kind with space", func(m *Mux) { m.RouteFunc("a b", noop) }, "space"},
		{"nil handler", func(m *Mux) { m.Route("a", nil) }, "nil"},
		{"nil func", func(m *Mux) { m.RouteFunc("a", nil) }, "nil"},
		{"nil middleware", func(m *Mux) { m.RouteFunc("a", noop, nil) }, "middleware 0 is nil"},
		{"twice", func(m *Mux) { m.RouteFunc("a", noop); m.RouteFunc("a", noop) }, "already has a route"},
		{"register nil", func(m *Mux) { Register[muxArgs](m, nil) }, "nil"},
		{"pointer args", func(m *Mux) { Register(m, func(context.Context, *TypedJob[*muxArgs]) error { return nil }) }, "zero value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(panicText(r), tt.want) {
					t.Errorf("panic %v, want one saying %q", r, tt.want)
				}
			}()
			tt.do(NewMux())
		})
	}
}

type muxArgs struct{ N int }

func (a muxArgs) Kind() string { return "mux.args" }

func panicText(r any) string {
	if err, ok := r.(error); ok {
		return err.Error()
	}
	s, _ := r.(string)
	return s
}

func TestClassify_TypedOutcomes(t *testing.T) {
	t.Parallel()
	x := exec{}
	if o := x.Classify(errors.Join(ErrUnknownKind)); o.Kind != engine.UnknownKind {
		t.Errorf("ErrUnknownKind classified as %v, want UnknownKind", o.Kind)
	}
	if o := x.Classify(errors.Join(ErrMalformed)); o.Kind != engine.Malformed {
		t.Errorf("ErrMalformed classified as %v, want Malformed", o.Kind)
	}
}
