package writebehind_test

import (
	"context"
	"errors"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
)

// TestWriter_RejectsBadChanges: the queue's payload and header limits, and
// valid UTF-8 in headers, hold for write-behind changes too; a refused change
// touches neither the cache nor the stream.
func TestWriter_RejectsBadChanges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newQueue(t, &streamq.QueueConfig{MaxPayloadBytes: 4})
	w := newWriter(t, q, &writebehind.WriterConfig{Hooks: []streamq.EnqueueHook{func(_ context.Context, h map[string]string) {
		if h[writebehind.HeaderKey] == "bad-hook" {
			h["trace"] = "\xff"
		}
	}}})
	if _, err := w.Set(ctx, "big", []byte("12345")); !errors.Is(err, streamq.ErrTooLarge) {
		t.Errorf("Set of 5 bytes with a limit of 4: %v, want ErrTooLarge", err)
	}
	if _, err := w.Set(ctx, "bad-hook", []byte("1")); !errors.Is(err, streamq.ErrInvalidHeader) {
		t.Errorf("Set with a hook's invalid UTF-8: %v, want ErrInvalidHeader", err)
	}
	for _, key := range []string{"big", "bad-hook"} {
		if _, found, err := w.Get(ctx, key); err != nil || found {
			t.Errorf("Get(%s) = found %v, %v after a refused change", key, found, err)
		}
	}
	if s, err := q.Stats(ctx); err != nil || s.Length != 0 {
		t.Errorf("stats %+v, %v: want nothing queued", s, err)
	}
}
