package inspect_test

import (
	"context"
	"testing"
	"time"

	"github.com/streamq/streamq/inspect"
	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/periodic"
)

func TestInspector_Schedules(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	s, err := periodic.New(e.p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterInterval("beat", 100*time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Register("nightly", "0 2 * * *", nil); err != nil {
		t.Fatal(err)
	}
	r := redistest.Background(t, "scheduler", 10*time.Second, s.Run)
	var got []inspect.Schedule
	redistest.WaitFor(t, 10*time.Second, "a tick of beat", func() bool {
		got, err = e.in.Schedules(ctx, "")
		// The schedulers record the next tick right after the tick.
		return err == nil && len(got) == 2 && !got[0].LastTick.IsZero() && got[0].NextTick.After(got[0].LastTick)
	})
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	beat, nightly := got[0], got[1]
	if beat.Name != "beat" || beat.Queue != e.name || beat.Spec != "every 100ms" {
		t.Errorf("beat %+v", beat)
	}
	if nightly.Name != "nightly" || nightly.Spec != "0 2 * * *" || nightly.NextTick.IsZero() || !nightly.LastTick.IsZero() {
		t.Errorf("nightly %+v", nightly)
	}
	if none, err := e.in.Schedules(ctx, "other"); err != nil || len(none) != 0 {
		t.Errorf("Schedules(other) = %v, %v", none, err)
	}
}
