package redistest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// recordingTB records the failures and cleanups of a Runner under test.
type recordingTB struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recordingTB) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *recordingTB) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestBackground(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name     string
		run      func(ctx context.Context) error
		stop     bool // the test calls Stop itself
		wantErr  error
		wantFail int // failures reported by the end of the test
	}{
		{"stops on cancel", func(ctx context.Context) error { <-ctx.Done(); return nil }, true, nil, 0},
		{"stopped by the test's end", func(ctx context.Context) error { <-ctx.Done(); return nil }, false, nil, 0},
		{"error on cancel is a failure", func(ctx context.Context) error { <-ctx.Done(); return boom }, true, boom, 1},
		{"ignores cancel", func(ctx context.Context) error { time.Sleep(200 * time.Millisecond); return nil }, true, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := &recordingTB{TB: t}
			r := Background(tb, "run", 50*time.Millisecond, tt.run)
			if tt.stop {
				if err := r.Stop(); !errors.Is(err, tt.wantErr) {
					t.Errorf("Stop = %v, want %v", err, tt.wantErr)
				}
				if err := r.Stop(); !errors.Is(err, tt.wantErr) {
					t.Errorf("second Stop = %v, want %v", err, tt.wantErr)
				}
			}
			tb.end()
			if len(tb.errs) != tt.wantFail {
				t.Errorf("failures %q, want %d", tb.errs, tt.wantFail)
			}
			select {
			case <-r.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the run never returned")
			}
		})
	}
}
