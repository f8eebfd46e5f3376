package streamq

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestJobFields_RoundTrip(t *testing.T) {
	t.Parallel()
	enq := time.UnixMilli(1_700_000_000_123)
	in := jobFields{
		payload:   []byte("hello\x00world\xff"),
		headers:   map[string]string{"traceparent": "00-abc", "k": "v"},
		enqMillis: enq.UnixMilli(),
		attempt:   3,
		key:       "invoice:42",
		keyToken:  "d-1",
		firstFail: 1_700_000_000_500,
		lastErr:   "boom",
	}
	m, err := decodeMessage("q", "1-0", toValues(t, in.args()))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if string(m.Payload) != string(in.payload) {
		t.Errorf("payload = %q, want %q", m.Payload, in.payload)
	}
	if m.Headers["traceparent"] != "00-abc" || m.Headers["k"] != "v" || len(m.Headers) != 2 {
		t.Errorf("headers = %v", m.Headers)
	}
	if !m.EnqueuedAt.Equal(enq) || m.Attempt != 3 || m.Key != "invoice:42" || m.keyToken != "d-1" || m.LastError != "boom" {
		t.Errorf("decoded %+v", m)
	}
	if m.FirstFailedAt.UnixMilli() != in.firstFail {
		t.Errorf("first failure = %v", m.FirstFailedAt)
	}
	back := jobFromMessage(m)
	if got, want := len(back.args()), len(in.args()); got != want {
		t.Errorf("re-encoded %d args, want %d", got, want)
	}
}

func TestJobFields_MinimalEntry(t *testing.T) {
	t.Parallel()
	j := jobFields{payload: []byte{}}
	args := j.args()
	// v, payload and enq only: headers, attempt and key are omitted when empty.
	if len(args) != 6 {
		t.Fatalf("minimal entry has %d args: %v", len(args), args)
	}
	m, err := decodeMessage("q", "1-0", map[string]any{"v": "1", "payload": ""})
	if err != nil {
		t.Fatalf("decode minimal raw entry: %v", err)
	}
	if m.Headers == nil || len(m.Payload) != 0 || m.Attempts() != 1 {
		t.Errorf("minimal message %+v, attempts %d", m, m.Attempts())
	}
}

func TestDecodeMessage_Malformed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"deleted entry", nil, "no fields"},
		{"missing version", map[string]any{"payload": "x"}, `missing field "v"`},
		{"unknown version", map[string]any{"v": "9", "payload": "x"}, "unsupported format version"},
		{"missing payload", map[string]any{"v": "1"}, `missing field "payload"`},
		{"headers not json", map[string]any{"v": "1", "payload": "x", "headers": "{"}, "JSON object"},
		{"headers not strings", map[string]any{"v": "1", "payload": "x", "headers": `{"a":1}`}, "JSON object"},
		{"bad enq", map[string]any{"v": "1", "payload": "x", "enq": "yesterday"}, "Unix milliseconds"},
		{"negative attempt", map[string]any{"v": "1", "payload": "x", "attempt": "-1"}, "non-negative"},
		{"bad attempt", map[string]any{"v": "1", "payload": "x", "attempt": "two"}, "non-negative"},
		{"bad first failure", map[string]any{"v": "1", "payload": "x", "ff": "x"}, "Unix milliseconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := decodeMessage("q", "1-0", tt.values)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want it to mention %q", err, tt.want)
			}
			if m == nil || m.ID != "1-0" || m.Headers == nil {
				t.Errorf("a malformed entry must still yield a message to dead-letter, got %+v", m)
			}
		})
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add("1", "payload", `{"a":"b"}`, "123", "2", "k")
	f.Add("", "", "", "", "", "")
	f.Add("1", "\xff\x00", "null", "-5", "x", "")
	f.Add("2", "p", "[1,2]", "9999999999999999999999", "1e3", "{}")
	f.Fuzz(func(t *testing.T, v, payload, headers, enq, attempt, key string) {
		values := map[string]any{}
		for k, s := range map[string]string{"v": v, "payload": payload, "headers": headers, "enq": enq, "attempt": attempt, "key": key} {
			if s != "" {
				values[k] = s
			}
		}
		m, err := decodeMessage("q", "1-0", values)
		if m == nil {
			t.Fatal("decodeMessage returned a nil message")
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
		if err == nil {
			if m.Headers == nil || m.Attempt < 0 {
				t.Fatalf("accepted message with invalid state: %+v", m)
			}
			// What decodes must re-encode and decode to the same job.
			again, err := decodeMessage("q", "1-0", toValues(t, jobFromMessage(m).args()))
			if err != nil {
				t.Fatalf("re-encoded message does not decode: %v", err)
			}
			if string(again.Payload) != string(m.Payload) || again.Attempt != m.Attempt || again.Key != m.Key {
				t.Fatalf("round trip changed the job: %+v -> %+v", m, again)
			}
		}
	})
}

// FuzzDecodeFields decodes arbitrary field maps: any keys (known, unknown,
// dead-letter fields), any bytes, as string or []byte values. The input is
// split at NUL bytes into key, value, key, value, ... Decoding must never
// panic, must report malformed input as ErrMalformed, and a job that decodes
// must survive a retry and a dead letter unchanged.
func FuzzDecodeFields(f *testing.F) {
	f.Add([]byte("v\x001\x00payload\x00p\x00ff\x00123\x00err\x00boom\x00kt\x00tok\x00key\x00k"))
	f.Add([]byte("v\x001\x00payload\x00\x00headers\x00{\"a\":\"\xff\"}\x00dl_reason\x00x\x00zzz\x00"))
	f.Add([]byte("v\x001\x00payload\x00p\x00attempt\x00-1\x00enq\x00abc"))
	f.Add([]byte("\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parts := bytes.Split(data, []byte{0})
		values := map[string]any{}
		for i := 0; i+1 < len(parts); i += 2 {
			if i%4 == 0 {
				values[string(parts[i])] = string(parts[i+1])
			} else {
				values[string(parts[i])] = parts[i+1]
			}
		}
		m, err := DecodeMessage("q", "1-0", values, 1)
		if m == nil {
			t.Fatal("DecodeMessage returned a nil message")
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		now := time.UnixMilli(1_700_000_000_000)
		again, err := DecodeMessage("q", "2-0", toValues(t, RetryFields(m, errors.New("e"), true, now)), 1)
		if err != nil {
			t.Fatalf("retried job does not decode: %v", err)
		}
		if !bytes.Equal(again.Payload, m.Payload) || again.Attempt != m.Attempt+1 || again.Key != m.Key || !reflect.DeepEqual(again.Headers, m.Headers) {
			t.Fatalf("retry changed the job: %+v -> %+v", m, again)
		}
		dl := parseDeadLetter(redis.XMessage{ID: "3-0", Values: toValues(t, DeadLetterFields(m, ReasonPermanent, err, 1, now))})
		if !bytes.Equal(dl.Payload, m.Payload) || dl.Reason != ReasonPermanent || dl.OriginalID != "1-0" {
			t.Fatalf("dead letter lost the job: %+v from %+v", dl, m)
		}
	})
}

// toValues turns XADD arguments into the map go-redis returns for an entry.
func toValues(t *testing.T, args []any) map[string]any {
	t.Helper()
	v := make(map[string]any, len(args)/2)
	for i := 0; i+1 < len(args); i += 2 {
		k := args[i].(string)
		switch x := args[i+1].(type) {
		case string:
			v[k] = x
		case []byte:
			v[k] = string(x)
		default:
			t.Fatalf("unexpected arg type %T", x)
		}
	}
	return v
}
