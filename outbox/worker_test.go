package outbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/outbox"
)

// TestRelay_InWorker runs a relay inside a worker process the documented
// way (docs/outbox.md, "Relays in workers"): Relay.Run next to
// Consumer.Run in one errgroup under one context. A job committed through
// the outbox reaches the worker's handler, the row is removed, and on
// cancel both return nil.
func TestRelay_InWorker(t *testing.T) {
	t.Parallel()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			tb := openTable(t, driver, driver == "postgres")
			c := redistest.NewClient(t)
			q, p := newQueue(t, c)
			got := make(chan string, 1)
			cons, err := streamq.NewConsumer(q, streamq.HandlerFunc(func(_ context.Context, m *streamq.Message) error {
				got <- string(m.Payload)
				return nil
			}), nil)
			if err != nil {
				t.Fatal(err)
			}
			relay := newRelay(t, tb.store, outbox.RelayConfig{PollInterval: 20 * time.Millisecond}, p)

			ctx, cancel := context.WithCancel(t.Context())
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() error { return cons.Run(gctx) })
			g.Go(func() error { return relay.Run(gctx) })
			stopped := false
			stop := func() error {
				if stopped {
					return nil
				}
				stopped = true
				cancel()
				return g.Wait()
			}
			t.Cleanup(func() { _ = stop() })

			inTx(t, tb.db, true, func(tx *sql.Tx) error {
				_, err := tb.enqueue(t.Context(), tx, q, []byte("order-1"))
				return err
			})
			select {
			case p := <-got:
				if p != "order-1" {
					t.Errorf("handler got %q, want order-1", p)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the committed job did not reach the worker's handler within 30s")
			}
			tb.waitEmpty(t, 30*time.Second)
			if err := stop(); err != nil {
				t.Errorf("worker with relay: Run returned %v, want nil on cancel", err)
			}
		})
	}
}
