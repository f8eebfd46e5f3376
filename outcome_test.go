package streamq

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	backoff := func(attempt int) time.Duration { return time.Duration(attempt) * time.Second }
	boom := errors.New("boom")
	tests := []struct {
		name       string
		attempt    int // retries so far
		deliveries int
		err        error
		want       Verdict
	}{
		{"first failure retries with backoff", 0, 1, boom, Verdict{Attempts: 1, Delay: time.Second}},
		{"redelivered after a crash counts", 0, 2, boom, Verdict{Attempts: 2, Delay: 2 * time.Second}},
		{"retry-after overrides backoff", 1, 1, RetryAfter(7*time.Second, boom), Verdict{Attempts: 2, Delay: 7 * time.Second}},
		{"negative retry-after means now", 1, 1, RetryAfter(-time.Second, boom), Verdict{Attempts: 2}},
		{"permanent dead-letters at once", 0, 1, Permanent(boom), Verdict{DeadLetter: true, Reason: ReasonPermanent, Attempts: 1}},
		{"wrapped permanent too", 0, 1, errors.Join(boom, Permanent(boom)), Verdict{DeadLetter: true, Reason: ReasonPermanent, Attempts: 1}},
		{"last attempt dead-letters", 2, 1, boom, Verdict{DeadLetter: true, Reason: ReasonMaxDeliveries, Attempts: 3}},
		{"last attempt beats retry-after", 2, 1, RetryAfter(time.Second, boom), Verdict{DeadLetter: true, Reason: ReasonMaxDeliveries, Attempts: 3}},
		{"postpone is not charged, even on the last attempt", 2, 1, Postpone(time.Second, boom), Verdict{Attempts: 2, Delay: time.Second, Postponed: true}},
		{"postpone after a crash charges only the crash", 0, 2, Postpone(0, nil), Verdict{Attempts: 1, Postponed: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg := &Message{Attempt: tt.attempt, Deliveries: tt.deliveries}
			if got := Decide(msg, tt.err, 3, backoff); got != tt.want {
				t.Errorf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestExhausted(t *testing.T) {
	t.Parallel()
	if _, _, over := Exhausted(&Message{Attempt: 1, Deliveries: 2}, 3); over {
		t.Error("attempt 3 of 3 reported exhausted")
	}
	v, cause, over := Exhausted(&Message{Attempt: 1, Deliveries: 3, LastError: "disk full"}, 3)
	if !over {
		t.Fatal("attempt 4 of 3 not reported exhausted")
	}
	if want := (Verdict{DeadLetter: true, Reason: ReasonMaxDeliveries, Attempts: 3}); v != want {
		t.Errorf("verdict %+v, want %+v", v, want)
	}
	if !strings.Contains(cause.Error(), "attempted 3 times") || !strings.Contains(cause.Error(), "disk full") {
		t.Errorf("cause %q does not name the attempts and the last error", cause)
	}
}

// TestRetryFields_RoundTrip checks that a retried job decodes to the same
// job with the attempt counters carried over.
func TestRetryFields_RoundTrip(t *testing.T) {
	t.Parallel()
	enq := time.UnixMilli(1_700_000_000_000)
	orig := jobFields{payload: []byte("p"), headers: map[string]string{"h": "1"}, enqMillis: enq.UnixMilli(), key: "k", keyToken: "tok"}
	msg, err := DecodeMessage("q", "1-1", toValues(t, orig.args()), 2)
	if err != nil {
		t.Fatal(err)
	}
	now := enq.Add(time.Minute)
	// msg was delivered twice: its first run was cut short by a crash.
	fresh, err := DecodeMessage("q", "1-2", toValues(t, orig.args()), 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		msg         *Message
		charged     bool
		wantAttempt int
		wantErr     string
		wantFirst   time.Time
		wantCrashed bool // the crashed mark: the crash streak goes on
	}{
		{"charged", msg, true, 2, "boom", now, false},
		{"handed back after a crash", msg, false, 1, "", time.Time{}, true},
		{"handed back, never crashed", fresh, false, 0, "", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fields := toValues(t, RetryFields(tt.msg, errors.New("boom"), tt.charged, now))
			next, err := DecodeMessage("q", "2-1", fields, 1)
			if err != nil {
				t.Fatal(err)
			}
			if next.Attempt != tt.wantAttempt || next.LastError != tt.wantErr || !next.FirstFailedAt.Equal(tt.wantFirst) {
				t.Errorf("attempt=%d err=%q first=%v, want %d %q %v", next.Attempt, next.LastError, next.FirstFailedAt, tt.wantAttempt, tt.wantErr, tt.wantFirst)
			}
			if next.crashed != tt.wantCrashed {
				t.Errorf("crashed mark %v, want %v (fields %v)", next.crashed, tt.wantCrashed, fields)
			}
			if tt.wantCrashed {
				// A second hand-back of the copy keeps the mark.
				again, err := DecodeMessage("q", "3-1", toValues(t, RetryFields(next, nil, false, now)), 1)
				if err != nil || !again.crashed || again.Attempt != tt.wantAttempt {
					t.Errorf("handed back again: crashed=%v attempt=%d err=%v; want the mark and attempt %d kept", again.crashed, again.Attempt, err, tt.wantAttempt)
				}
			}
			if string(next.Payload) != "p" || !reflect.DeepEqual(next.Headers, msg.Headers) || !next.EnqueuedAt.Equal(enq) ||
				next.Key != "k" || next.keyToken != "tok" {
				t.Errorf("job changed by the retry: %+v", next)
			}
		})
	}
}

func TestDeadLetterFields_ParsedBack(t *testing.T) {
	t.Parallel()
	first := time.UnixMilli(1_700_000_000_000)
	now := first.Add(time.Hour)
	values := map[string]any{"v": "1", "payload": "p", "headers": `{"a":"b"}`, "dl_reason": "stale", "extra": "x"}
	msg, err := DecodeMessage("q", "5-0", values, 1)
	if err != nil {
		t.Fatal(err)
	}
	msg.FirstFailedAt = first
	dl := parseDeadLetter(redis.XMessage{ID: "9-0", Values: toValues(t, DeadLetterFields(msg, ReasonPermanent, errors.New("nope"), 4, now))})
	if dl.Queue != "q" || dl.OriginalID != "5-0" || dl.Reason != ReasonPermanent || dl.Error != "nope" || dl.Attempts != 4 ||
		!dl.FirstFailedAt.Equal(first) || !dl.FailedAt.Equal(now) || string(dl.Payload) != "p" || dl.Headers["a"] != "b" {
		t.Errorf("dead letter parsed back as %+v", dl)
	}
	if dl.Fields["extra"] != "x" {
		t.Errorf("original field lost: %v", dl.Fields)
	}
	if _, ok := dl.Fields["dl_reason"]; ok {
		t.Errorf("a stale dl_ field of the entry was copied: %v", dl.Fields)
	}
}
