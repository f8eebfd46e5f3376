package periodic

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq/internal/core"
	"github.com/streamq/streamq/internal/redistest"
)

// TestScheduler_ClockSkew runs two schedulers of one schedule together, one
// whose clock is 30 s ahead and one 30 s behind: every tick is enqueued
// exactly once, none is skipped (the fast one cannot make the slow one's
// ticks stale), and none before its time by the Redis server's clock (the
// milliseconds of the entry ID, which XADD takes from that clock).
func TestScheduler_ClockSkew(t *testing.T) {
	t.Parallel()
	const (
		every = 200 * time.Millisecond
		ticks = 8
	)
	e := setup(t, nil)
	ctx := context.Background()
	for _, d := range []time.Duration{30 * time.Second, -30 * time.Second} {
		s := e.scheduler(t, nil, Config{Now: func() time.Time { return time.Now().Add(d) }})
		must(t, s.RegisterInterval("skewed", every, []byte("p")))
		redistest.Background(t, "Scheduler.Run", 10*time.Second, s.Run)
	}
	stream := core.Of(e.q).Keys.Stream
	redistest.WaitFor(t, 10*time.Second, strconv.Itoa(ticks)+" periodic jobs", func() bool {
		return e.rdb.XLen(ctx, stream).Val() >= ticks
	})
	js := e.jobs(t)
	for i, j := range js {
		ms, _, _ := strings.Cut(j.id, "-")
		at, _ := strconv.ParseInt(ms, 10, 64)
		if early := j.tick.UnixMilli() - at; early > 0 {
			t.Errorf("tick %v enqueued %d ms early by the server's clock", j.tick, early)
		}
		if i > 0 && !j.tick.Equal(js[i-1].tick.Add(every)) {
			t.Errorf("tick %v follows %v: want each tick once, none skipped", j.tick, js[i-1].tick)
		}
	}
}
