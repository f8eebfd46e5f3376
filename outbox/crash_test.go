package outbox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/proctest"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/outbox"
)

// crashRelay is the relay program that stops between its Redis write and
// the rows' removal.
const crashRelay = "github.com/streamq/streamq/outbox/internal/testdata/outbox-crash-relay"

// TestRelay_KilledBeforeRemoval: a relay process is SIGKILLed after Redis
// accepted its batch and before it removed the rows. The rows stay; the
// next relay claims them (on PostgreSQL at once, the dead relay's
// transaction ended with its connection; on SQLite once the lease expired)
// and removes them without enqueueing any again: one job per row.
func TestRelay_KilledBeforeRemoval(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, crashRelay)
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			tb := openTable(t, driver, false)
			c := redistest.NewClient(t)
			q, p := newQueue(t, c)
			want := tb.enqueueN(t, q, "job", 40, nil)
			sent := make(chan string, 1)
			proc := proctest.Start(t, proctest.Options{
				Bin: bin,
				Args: []string{"-redis", redistest.Addr(), "-queue", q.Name(), "-driver", driver,
					"-dsn", tb.dsn, "-table", tb.name, "-lease", "500ms"},
				OnLine: func(line string) {
					if strings.HasPrefix(line, "sent ") {
						sent <- line
					}
				},
			})
			line := proctest.Await(t, proc, sent, time.Minute, "the relay to send its batch")
			proc.Kill()
			if line != "sent 40" {
				t.Fatalf("the relay printed %q, want \"sent 40\"", line)
			}
			checkOnce(t, payloads(t, c, q), want)
			if b, err := tb.store.Backlog(t.Context()); err != nil || b.Rows != 40 {
				t.Fatalf("backlog after the kill: %+v, %v; want the 40 rows", b, err)
			}
			r := newRelay(t, tb.store, outbox.RelayConfig{PollInterval: 50 * time.Millisecond}, p)
			redistest.Background(t, "relay", time.Minute, r.Run)
			tb.waitEmpty(t, 30*time.Second)
			checkOnce(t, payloads(t, c, q), want)
			checkJobIDs(t, c, q)
		})
	}
}
