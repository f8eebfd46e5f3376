package middleware_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/middleware"
)

func panicky(v any) streamq.Handler {
	return streamq.HandlerFunc(func(context.Context, *streamq.Message) error { panic(v) })
}

func TestRecover(t *testing.T) {
	t.Parallel()
	cause := errors.New("disk on fire")
	tests := []struct {
		name    string
		h       streamq.Handler
		wantErr error // nil: the handler's result passes through
		panics  bool
	}{
		{name: "returns nil", h: streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })},
		{name: "returns error", h: streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return cause }), wantErr: cause},
		{name: "panics with error", h: panicky(cause), wantErr: cause, panics: true},
		{name: "panics with string", h: panicky("boom"), panics: true},
		{name: "panics with nil", h: panicky(nil), panics: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := streamq.Chain(tt.h, middleware.Recover()).Handle(context.Background(), &streamq.Message{ID: "1-0"})
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			var pe *streamq.PanicError
			if got := errors.As(err, &pe); got != tt.panics {
				t.Fatalf("errors.As(*PanicError) = %v, want %v (err %v)", got, tt.panics, err)
			}
			if tt.panics && !strings.Contains(string(pe.Stack), "panicky") {
				t.Errorf("stack does not show the panicking function:\n%s", pe.Stack)
			}
			if !tt.panics && tt.wantErr == nil && err != nil {
				t.Errorf("err = %v, want nil", err)
			}
		})
	}
}
