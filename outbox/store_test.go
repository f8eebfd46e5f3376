package outbox_test

import (
	"slices"
	"testing"

	"github.com/streamq/streamq/internal/redistest"
	"github.com/streamq/streamq/outbox"
)

// TestClaim_Finish: Finish removes the rows done, puts back the failed
// ones with one more attempt and their error, and the others untouched;
// the next claim takes those back (a failure with Retry 0 is due at once).
func TestClaim_Finish(t *testing.T) {
	t.Parallel()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			tb := openTable(t, driver, false)
			c := redistest.NewClient(t)
			q, _ := newQueue(t, c)
			tb.enqueueN(t, q, "job", 3, nil)
			claim, err := tb.store.Claim(t.Context(), 10)
			if err != nil {
				t.Fatal(err)
			}
			rows := claim.Rows()
			if len(rows) != 3 {
				t.Fatalf("claimed %d rows, want 3", len(rows))
			}
			if got := payloadsOf(rows); !slices.Equal(got, []string{"job-0", "job-1", "job-2"}) {
				t.Errorf("claimed %v, want the rows in commit order", got)
			}
			removed, err := claim.Finish(t.Context(), []string{rows[0].ID}, []outbox.Failure{{ID: rows[1].ID, Error: "boom"}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(removed, []string{rows[0].ID}) {
				t.Errorf("removed %v, want [%s]", removed, rows[0].ID)
			}
			b, err := tb.store.Backlog(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if b.Rows != 2 || b.Failing != 1 || b.Queues[0].LastError != "boom" {
				t.Errorf("backlog %+v, want 2 rows, 1 failing with boom", b)
			}
			if b.Lag > b.Oldest {
				t.Errorf("backlog lag %s, want at most the oldest age %s", b.Lag, b.Oldest)
			}
			again, err := tb.store.Claim(t.Context(), 10)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = again.Release(t.Context()) }()
			attempts := map[string]int{}
			for _, r := range again.Rows() {
				attempts[string(r.Payload)] = r.Attempts
			}
			if len(attempts) != 2 || attempts["job-1"] != 1 || attempts["job-2"] != 0 {
				t.Errorf("claimed again %v (payload: attempts), want job-1: 1 and job-2: 0", attempts)
			}
		})
	}
}

// payloadsOf returns the payloads of rows.
func payloadsOf(rows []outbox.Row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = string(r.Payload)
	}
	return out
}
