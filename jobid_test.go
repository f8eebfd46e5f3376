package streamq_test

import (
	"strings"
	"testing"
	"time"

	"github.com/streamq/streamq"
)

// TestDedupOptions checks what each ID and dedup option sets, and that
// misuse is an error naming the option (applied without Redis: the
// combinations are checked by Enqueue, see integration/jobid_test.go).
func TestDedupOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		opt   streamq.EnqueueOption
		check func(o *streamq.EnqueueOptions) bool
		err   string // a part of the error, "" for none
	}{
		{"job ID", streamq.WithJobID("order-1"), func(o *streamq.EnqueueOptions) bool { return o.JobID == "order-1" }, ""},
		{"generated-looking ID", streamq.WithJobID("1-2"), nil, "WithJobID"},
		{"location-looking ID", streamq.WithJobID("s:x"), nil, "explicit location"},
		{"unique while", streamq.UniqueWhile("k", time.Minute, streamq.UniqueWaiting, streamq.UniqueRunning), func(o *streamq.EnqueueOptions) bool {
			return o.UniqueKey == "k" && len(o.UniqueStates) == 2
		}, ""},
		{"unique while, bad state", streamq.UniqueWhile("k", time.Minute, "done"), nil, "unknown state"},
		{"unique while, bad ttl", streamq.UniqueWhile("k", 0), nil, "Unique ttl"},
		{"by args", streamq.UniqueByArgs(time.Minute), func(o *streamq.EnqueueOptions) bool { return o.UniqueByArgs && o.UniqueTTL == time.Minute }, ""},
		{"by args, bad ttl", streamq.UniqueByArgs(0), nil, "UniqueByArgs ttl"},
		{"throttle", streamq.Throttle("k", time.Minute), func(o *streamq.EnqueueOptions) bool { return o.ThrottleKey == "k" && o.ThrottleWindow == time.Minute }, ""},
		{"throttle, empty key", streamq.Throttle("", time.Minute), nil, "Throttle key"},
		{"throttle, long key", streamq.Throttle(strings.Repeat("k", streamq.MaxUniqueKeyLen+1), time.Minute), nil, "at most"},
		{"throttle, bad window", streamq.Throttle("k", 0), nil, "Throttle window"},
		{"debounce", streamq.Debounce("k", time.Second), func(o *streamq.EnqueueOptions) bool { return o.DebounceKey == "k" && o.DebounceQuiet == time.Second }, ""},
		{"debounce, bad quiet", streamq.Debounce("k", 0), nil, "Debounce quiet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var o streamq.EnqueueOptions
			err := tc.opt(&o)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one with %q", err, tc.err)
			case tc.check != nil && !tc.check(&o):
				t.Fatalf("options %+v", o)
			}
		})
	}
}
