package streamq

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/streamq/streamq/internal/engine"
	"github.com/streamq/streamq/internal/wire"
)

// TestMessage_Size guards the size of a Message, which the engine keeps in
// every job's slot (one allocation per job): the per-job options stay
// behind a pointer, so a plain job's slot stays in its size class (see
// TestSlot_Size in internal/engine and docs/performance.md).
func TestMessage_Size(t *testing.T) {
	t.Parallel()
	if got, limit := unsafe.Sizeof(Message{}), uintptr(engine.SlotMessageBytes); got > limit {
		t.Fatalf("Message is %d bytes, more than the %d a plain job's slot has room for: keep rare per-job fields behind Message.opts", got, limit)
	}
}

func TestMessageOpts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		opts     wire.Opts
		wantRare bool
	}{
		{"plain", wire.Opts{}, false},
		{"kind and tags", wire.Opts{Kind: "k", Tags: []string{"a"}}, false},
		{"every option", wire.Opts{Kind: "k", MaxAttempts: 3, Timeout: 1000, Deadline: 2000, Retention: 3000,
			Tags: []string{"a", "b"}, FlowKey: "f", UnknownKind: 1}, true},
		{"one rare option", wire.Opts{Timeout: 5}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := engine.Run{Queue: "q", ID: "1-1", Job: wire.Job{Payload: []byte("p"), Opts: tt.opts}, Attempt: 1}
			m := newMessage(&r, "g")
			if (m.opts != nil) != tt.wantRare {
				t.Fatalf("opts held: %v, want %v", m.opts != nil, tt.wantRare)
			}
			if m.Kind != tt.opts.Kind || !reflect.DeepEqual(m.Tags, tt.opts.Tags) {
				t.Fatalf("Kind %q Tags %q, want %q %q", m.Kind, m.Tags, tt.opts.Kind, tt.opts.Tags)
			}
			if got := messageOpts(m); !reflect.DeepEqual(got, tt.opts) {
				t.Fatalf("messageOpts = %+v, want %+v", got, tt.opts)
			}
		})
	}
	if got := messageOpts("not a message"); !reflect.DeepEqual(got, wire.Opts{}) {
		t.Fatalf("messageOpts of a non-message = %+v, want none", got)
	}
}
