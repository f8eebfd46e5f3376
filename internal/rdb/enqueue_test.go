package rdb

import (
	"fmt"
	"strings"
	"testing"

	"github.com/streamq/streamq/internal/wire"
)

// TestEnqueueArgs checks the ARGV layouts of scriptEnqueue (see its header):
// one job with its fields; jobs that differ only by payload as one template
// and their payloads; other jobs each with its field count and fields.
func TestEnqueueArgs(t *testing.T) {
	t.Parallel()
	job := func(payload string, headers map[string]string) *wire.Job {
		return &wire.Job{Payload: []byte(payload), Headers: headers, EnqMillis: 7}
	}
	str := func(args []any) string {
		out := ""
		for _, a := range args[enqueueHead-1:] { // the head but t is the caller's
			switch v := a.(type) {
			case []byte:
				out += fmt.Sprintf("%q ", v)
			default:
				out += fmt.Sprintf("%v ", v)
			}
		}
		return out
	}
	h := map[string]string{"k": "v"}
	for _, tc := range []struct {
		name string
		add  func(a *EnqueueParams)
		want string
	}{
		{"one job", func(a *EnqueueParams) { a.AddJob(job("p", nil)) },
			`0 6 v 1 payload "p" enq 7 `},
		{"template", func(a *EnqueueParams) {
			a.AddJob(job("p1", h))
			a.AddLike([]byte("p2"))
			a.AddLike([]byte("p3"))
		}, `8 v 1 payload  headers "{\"k\":\"v\"}" enq 7 4 "p1" "p2" "p3" `},
		{"own fields", func(a *EnqueueParams) {
			a.AddJob(job("p1", nil))
			a.AddLike([]byte("p2"))
			a.AddJob(job("p3", h))
			a.AddLike([]byte("p4"))
		}, `0 6 v 1 payload "p1" enq 7 6 v 1 payload "p2" enq 7 8 v 1 payload "p3" headers "{\"k\":\"v\"}" enq 7 6 v 1 payload "p4" enq 7 `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var a EnqueueParams
			tc.add(&a)
			if got := str(a.argv()); got != tc.want {
				t.Errorf("ARGV[%d:]\n got %s\nwant %s", enqueueHead, got, tc.want)
			}
		})
	}
}

func TestNewDelayedID_Unique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := NewDelayedID()
		if seen[id] || !strings.HasPrefix(id, "d-") || len(id) != 26 {
			t.Fatalf("ID %q repeated or malformed", id)
		}
		seen[id] = true
	}
}
