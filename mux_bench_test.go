package streamq_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/streamq/streamq"
)

// BenchmarkMux_Handle measures the handler side of a typed job (Mux lookup,
// JSON decoding of ~100-byte args, the TypedJob) against a plain handler
// of the same message, without Redis: the CPU a typed job adds per job.
func BenchmarkMux_Handle(b *testing.B) {
	args := benchArgs{Customer: "cus_4f9a2b7c1d", Order: 1234567, Amount: 129900, Currency: "EUR", Note: "gift wrap, deliver after 5pm"}
	payload, err := json.Marshal(args)
	if err != nil {
		b.Fatal(err)
	}
	msg := &streamq.Message{Kind: args.Kind(), Payload: payload}
	ctx := context.Background()
	b.Run("handler=plain", func(b *testing.B) {
		h := streamq.HandlerFunc(func(context.Context, *streamq.Message) error { return nil })
		b.ReportAllocs()
		for b.Loop() {
			_ = h.Handle(ctx, msg)
		}
	})
	b.Run("handler=typed", func(b *testing.B) {
		mux := streamq.NewMux()
		streamq.Register(mux, func(context.Context, *streamq.TypedJob[benchArgs]) error { return nil })
		b.ReportAllocs()
		for b.Loop() {
			if err := mux.Handle(ctx, msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Logf("payload %d bytes", len(payload))
}
