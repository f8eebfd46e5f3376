package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzUnpack decodes arbitrary bytes as packed job data (what the priority
// set's job hash and the delayed set hold, which any client can write).
// Unpack must never panic, must report bad data as ErrMalformed, and data
// that unpacks must pack and unpack back to the same fields.
func FuzzUnpack(f *testing.F) {
	f.Add(Pack([]any{"v", "1", "payload", "p", "headers", `{"a":"b"}`}))
	f.Add(Pack([]any{"k", strings.Repeat("x", 300), "l", strings.Repeat("y", 70_000)}))
	f.Add([]byte("\xdd\xff\xff\xff\xff\xa1a"))
	f.Add([]byte("\x92\xc4\x01a\xc5\x00\x01b"))
	f.Add([]byte("\x81\xa1v\xa11"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Unpack(string(data))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		fields := make([]any, 0, 2*len(m))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fields = append(fields, k, m[k])
		}
		again, err := Unpack(string(Pack(fields)))
		if err != nil || !maps.Equal(again, m) {
			t.Fatalf("packed again: %v, %v; want %v", again, err, m)
		}
	})
}

// FuzzParseDeadLetter parses arbitrary dead-letter entries (the input is
// split at NUL bytes into field, value, field, value, ...; the dead-letter
// stream can be written by any client). ParseDeadLetter must never panic,
// must keep every field it does not own (the job's fields), and the job's
// fields must survive being dead-lettered again.
func FuzzParseDeadLetter(f *testing.F) {
	f.Add([]byte("dl_queue\x00q\x00dl_id\x001-0\x00dl_reason\x00permanent\x00dl_attempts\x003\x00dl_failed\x00123\x00v\x001\x00payload\x00p"))
	f.Add([]byte("dl_attempts\x00-9\x00dl_first_failed\x00x\x00dl_fields\x00\x92\xa1a\xa1b"))
	f.Add([]byte("dl_fields\x00\x92\xa7dl_evil\xa1b\x00dl_other\x00x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parts := bytes.Split(data, []byte{0})
		values := map[string]any{}
		for i := 0; i+1 < len(parts); i += 2 {
			values[string(parts[i])] = string(parts[i+1])
		}
		_, own := ParseDeadLetter(values)
		for k, v := range values {
			switch k {
			case FieldDLQueue, FieldDLID, FieldDLReason, FieldDLError, FieldDLAttempts, FieldDLFirstFail, FieldDLFailed, FieldDLFields:
				continue
			}
			if own[k] != v {
				t.Fatalf("field %q: own %q, want %q", k, own[k], v)
			}
		}
		raw := make(map[string]any, len(own))
		for k, v := range own {
			if !strings.HasPrefix(k, DLPrefix) {
				raw[k] = v
			}
		}
		d := DeadLetter{Queue: "q", ID: "1-0", Reason: "malformed", Attempts: 2, FirstFail: time.UnixMilli(3), Failed: time.UnixMilli(5)}
		back, again := ParseDeadLetter(toValues(t, DeadLetterArgs(d, raw, nil)))
		if back != d {
			t.Fatalf("dead letter %+v parsed back as %+v", d, back)
		}
		for k, v := range raw {
			if again[k] != v {
				t.Fatalf("field %q dead-lettered again: %q, want %q", k, again[k], v)
			}
		}
	})
}

// FuzzPlainHeaders checks the fast path of the headers field against
// encoding/json: whatever it accepts, encoding/json accepts and reads the
// same (an empty object as no headers).
func FuzzPlainHeaders(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"b"}`, `{"traceparent":"00-4bf9-00f0-01","k":""}`, `{"a":"b",}`, `{"a":"\u00e9"}`, `{"a":1}`, `{"a":"b","a":"c"}`, ` {"a":"b"}`, `{"é":"ü"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h, ok := plainHeaders(s)
		if !ok || !utf8.ValidString(s) {
			return
		}
		var want map[string]string
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("plainHeaders accepts %q, encoding/json refuses it: %v", s, err)
		}
		if (len(h) > 0 || len(want) > 0) && !reflect.DeepEqual(h, want) { // nil and empty: no headers alike
			t.Fatalf("plainHeaders(%q) = %v, encoding/json reads %v", s, h, want)
		}
	})
}

func TestPlainHeaders(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		`{}`: true, `{"a":"b"}`: true, `{"a":"b","c":"d"}`: true,
		`{"a":"b\"c"}`: false, `{"a": "b"}`: false, `{"a":1}`: false, `null`: false, `{"a":"b",}`: false, `{"a":"b"`: false, `{"a"}`: false,
	} {
		if _, ok := plainHeaders(s); ok != want {
			t.Errorf("plainHeaders(%q) ok = %v, want %v", s, ok, want)
		}
	}
}

// FuzzMarshalHeaders checks the headers field against json.Marshal.
func FuzzMarshalHeaders(f *testing.F) {
	f.Add("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "b", "")
	f.Add("<a>", "é\u2028", "q\"", "back\\slash\x01")
	f.Add("a", "b", "a", "c")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := map[string]string{k1: v1, k2: v2}
		want, _ := json.Marshal(h)
		if got := marshalHeaders(h); !bytes.Equal(got, want) {
			t.Fatalf("marshalHeaders(%q) = %s, json.Marshal writes %s", h, got, want)
		}
	})
}
