package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"
)

func TestJob_RoundTrip(t *testing.T) {
	t.Parallel()
	in := Job{
		Payload:   []byte("hello\x00world\xff"),
		Headers:   map[string]string{"traceparent": "00-abc", "k": "v"},
		EnqMillis: 1_700_000_000_123,
		Attempt:   3,
		Key:       "invoice:42",
		KeyToken:  "d-1",
		FirstFail: 1_700_000_000_500,
		LastError: "boom",
		Crashed:   true,
	}
	got, err := Decode(toValues(t, in.Args()))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(*got, in) {
		t.Errorf("round trip:\n got %+v\nwant %+v", *got, in)
	}
}

func TestJob_MinimalEntry(t *testing.T) {
	t.Parallel()
	j := Job{Payload: []byte{}}
	// v, payload and enq only: headers, attempt, key and the rest are
	// omitted when empty.
	if args := j.Args(); len(args) != 6 {
		t.Fatalf("minimal entry has %d args: %v", len(args), args)
	}
	got, err := Decode(map[string]any{"v": "1", "payload": ""})
	if err != nil {
		t.Fatalf("decode minimal raw entry: %v", err)
	}
	if got.Headers != nil || len(got.Payload) != 0 || got.Attempt != 0 || got.Crashed {
		t.Errorf("minimal job %+v", got)
	}
}

func TestDecode_Malformed(t *testing.T) {
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
		{"negative attempt", map[string]any{"v": "1", "payload": "x", "attempt": "-1"}, "from 0 to 1000000000"},
		{"bad attempt", map[string]any{"v": "1", "payload": "x", "attempt": "two"}, "from 0 to 1000000000"},
		{"attempt near MaxInt64", map[string]any{"v": "1", "payload": "x", "attempt": "9223372036854775807"}, `"attempt"`},
		{"attempt past the bound", map[string]any{"v": "1", "payload": "x", "attempt": "1000000001"}, `"attempt"`},
		{"bad first failure", map[string]any{"v": "1", "payload": "x", "ff": "x"}, "Unix milliseconds"},
		{"headers not UTF-8", map[string]any{"v": "1", "payload": "x", "headers": "{\"a\":\"\xff\"}"}, "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j, err := Decode(tt.values)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want it to mention %q", err, tt.want)
			}
			if j == nil {
				t.Errorf("a malformed entry must still yield a job, got %+v", j)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		payload    string
		headers    map[string]string
		maxP, maxH int64
		want       error
	}{
		{"fits", "1234", map[string]string{"ab": "cd"}, 4, 4, nil},
		{"no limits", strings.Repeat("x", 100), map[string]string{"k": strings.Repeat("v", 100)}, -1, -1, nil},
		{"payload", "12345", nil, 4, 4, ErrTooLarge},
		{"headers", "", map[string]string{"ab": "cde"}, 4, 4, ErrTooLarge},
		{"key", "", map[string]string{"\xff": ""}, -1, -1, ErrInvalidHeader},
		{"value", "", map[string]string{"k": "ok\xc3"}, -1, -1, ErrInvalidHeader},
		{"unicode", "", map[string]string{"clé": "ünïcødé ✓"}, -1, -1, nil},
	} {
		err := Check([]byte(tc.payload), tc.headers, tc.maxP, tc.maxH)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: Check = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestDeadLetterArgs_ParsedBack(t *testing.T) {
	t.Parallel()
	first := time.UnixMilli(1_700_000_000_000)
	now := first.Add(time.Hour)
	raw := map[string]any{"v": "1", "payload": "p", "headers": `{"a":"b"}`, "dl_reason": "stale", "extra": "x"}
	d := DeadLetter{Queue: "q", ID: "5-0", Reason: "permanent", Error: "nope", Attempts: 4, FirstFail: first, Failed: now}
	got, own := ParseDeadLetter(toValues(t, DeadLetterArgs(d, raw, nil)))
	if !reflect.DeepEqual(got, d) {
		t.Errorf("dead letter parsed back as %+v, want %+v", got, d)
	}
	if own["extra"] != "x" || own["payload"] != "p" || own["headers"] != `{"a":"b"}` {
		t.Errorf("the job's own fields: %v", own)
	}
	if _, ok := own["dl_reason"]; ok {
		t.Errorf("a stale dl_ field of the entry was copied: %v", own)
	}
	// Headers given replace the job's (a backend's own headers, such as the
	// priority, are kept in the dead letter).
	_, own = ParseDeadLetter(toValues(t, DeadLetterArgs(DeadLetter{Failed: now}, raw, map[string]string{"p": "7"})))
	if own["headers"] != `{"p":"7"}` {
		t.Errorf("headers = %q, want the given ones", own["headers"])
	}
	// Without a first failure, the dead letter's time is the first.
	got, _ = ParseDeadLetter(toValues(t, DeadLetterArgs(DeadLetter{Failed: now}, raw, nil)))
	if !got.FirstFail.Equal(now) {
		t.Errorf("first failure %v, want %v", got.FirstFail, now)
	}
}

// TestDeadLetterArgs_ManyFields: an entry with more fields than a script
// can pass on in one call keeps them packed in one field (and the wire
// format's own fields plain), and they are parsed back unchanged.
func TestDeadLetterArgs_ManyFields(t *testing.T) {
	t.Parallel()
	raw := map[string]any{"v": "1", "payload": "p", "headers": `{"a":"b"}`, "dl_reason": "stale"}
	for i := range 4000 {
		raw[fmt.Sprint("f", i)] = fmt.Sprint(i)
	}
	args := DeadLetterArgs(DeadLetter{Queue: "q", ID: "1-0", Reason: "malformed", Failed: time.UnixMilli(1)}, raw, nil)
	if len(args) > 2*MaxFields {
		t.Fatalf("%d arguments, want at most %d", len(args), 2*MaxFields)
	}
	values := toValues(t, args)
	if values["payload"] != "p" || values["v"] != "1" || values[FieldDLFields] == nil {
		t.Fatalf("plain fields %v", values)
	}
	d, own := ParseDeadLetter(values)
	if d.Reason != "malformed" || d.ID != "1-0" {
		t.Errorf("dead letter %+v", d)
	}
	if len(own) != len(raw)-1 {
		t.Errorf("%d own fields, want %d", len(own), len(raw)-1)
	}
	for k, v := range raw {
		if k != "dl_reason" && own[k] != v {
			t.Fatalf("field %s = %q, want %q", k, own[k], v)
		}
	}
}

func TestPack_RoundTrip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 70_000)
	fields := []any{"v", "1", "payload", []byte("\x00\xff binary"), "e", "", "f31", strings.Repeat("y", 31),
		"f255", strings.Repeat("z", 255), "f256", strings.Repeat("w", 256), "long", long}
	got, err := Unpack(string(Pack(fields)))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(fields); i += 2 {
		want := fmt.Sprint(fields[i+1])
		if b, ok := fields[i+1].([]byte); ok {
			want = string(b)
		}
		if got[fields[i].(string)] != want {
			t.Errorf("field %s: %q, want %q", fields[i], got[fields[i].(string)], want)
		}
	}
	many := make([]any, 0, 40)
	for i := range 20 {
		many = append(many, fmt.Sprint("k", i), fmt.Sprint(i))
	}
	if got, err := Unpack(string(Pack(many))); err != nil || len(got) != 20 {
		t.Errorf("20 fields: %d back, %v", len(got), err)
	}
	for _, bad := range []string{"", "\x92\xa1", "\xc0", "\x91\xdb\x00\x00\x01\x00x", "\x92\xa1a\xa1bextra"} {
		if _, err := Unpack(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Unpack(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

// FuzzDecode decodes arbitrary field maps: any keys (known, unknown,
// dead-letter fields), any bytes, as string or []byte values. The input is
// split at NUL bytes into key, value, key, value, ... Decoding must never
// panic, must report malformed input as ErrMalformed, and a job that decodes
// must survive a retry, a pack and a dead letter unchanged.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("v\x001\x00payload\x00p\x00ff\x00123\x00err\x00boom\x00kt\x00tok\x00key\x00k"))
	f.Add([]byte("v\x001\x00payload\x00\x00headers\x00{\"a\":\"\xff\"}\x00dl_reason\x00x\x00zzz\x00"))
	f.Add([]byte("v\x001\x00payload\x00p\x00attempt\x00-1\x00enq\x00abc"))
	f.Add([]byte("v\x001\x00payload\x00p\x00crashed\x001\x00attempt\x007"))
	f.Add([]byte("\x00\x00\x00"))
	f.Add([]byte("v\x002\x00payload\x00p\x00kind\x00email.send\x00tags\x00[\"a\",\"b\"]\x00ma\x003\x00to\x001500"))
	f.Add([]byte("v\x002\x00payload\x00p\x00dl\x00123\x00rr\x00-1\x00uk\x002\x00fk\x00t:1\x00tags\x00[1]"))
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
		j, err := Decode(values)
		if j == nil {
			t.Fatal("Decode returned a nil job")
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if j.Attempt < 0 || j.EnqMillis < 0 || j.FirstFail < 0 {
			t.Fatalf("accepted job with invalid state: %+v", j)
		}
		next := *j
		next.Attempt++
		next.LastError = "e"
		again, err := Decode(toValues(t, next.Args()))
		if err != nil {
			t.Fatalf("retried job does not decode: %v", err)
		}
		if !bytes.Equal(again.Payload, j.Payload) || again.Attempt != j.Attempt+1 || again.Key != j.Key || !reflect.DeepEqual(again.Headers, j.Headers) ||
			!reflect.DeepEqual(again.Opts, j.Opts) {
			t.Fatalf("retry changed the job: %+v -> %+v", j, again)
		}
		unpacked, err := Unpack(string(Pack(next.Args())))
		if err != nil {
			t.Fatalf("packed job does not unpack: %v", err)
		}
		if packed, err := Decode(unpacked); err != nil || !reflect.DeepEqual(packed, again) {
			t.Fatalf("packed job decodes as %+v (%v), want %+v", packed, err, again)
		}
		d, own := ParseDeadLetter(toValues(t, DeadLetterArgs(DeadLetter{Queue: "q", ID: "1-0", Reason: "permanent", Failed: time.UnixMilli(1)}, values, nil)))
		if d.Reason != "permanent" || d.ID != "1-0" || own[FieldPayload] != string(j.Payload) {
			t.Fatalf("dead letter lost the job: %+v %v from %+v", d, own, j)
		}
	})
}

// toValues turns XADD arguments into the map go-redis returns for an entry.
func toValues(t testing.TB, args []any) map[string]any {
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

func TestAppendFailure_Bounded(t *testing.T) {
	t.Parallel()
	h := ""
	long := strings.Repeat("é", 400) // 800 bytes of two-byte runes
	for i := 1; i <= 8; i++ {
		h = AppendFailure(h, Failure{At: int64(i), Attempt: i, Error: long})
	}
	got := ParseFailures(h)
	if len(got) != MaxErrors {
		t.Fatalf("%d failures kept, want %d", len(got), MaxErrors)
	}
	for i, f := range got {
		if f.Attempt != 8-MaxErrors+1+i {
			t.Fatalf("failure %d is attempt %d: want the newest last", i, f.Attempt)
		}
		if len(f.Error) > MaxHistoryError || !utf8.ValidString(f.Error) {
			t.Fatalf("failure %d: %d bytes, valid UTF-8 %v", i, len(f.Error), utf8.ValidString(f.Error))
		}
	}
	if ParseFailures("not json") != nil || ParseFailures("") != nil {
		t.Fatal("a malformed or empty history must parse as none")
	}
	if got := ParseFailures(AppendFailure("garbage", Failure{Attempt: 1})); len(got) != 1 {
		t.Fatalf("a malformed history is replaced: got %d failures", len(got))
	}
}

func TestJob_ArgsCarryJobIDAndErrors(t *testing.T) {
	t.Parallel()
	j := Job{Payload: []byte("p"), JobID: "1-0"}
	var back Job
	m := map[string]any{}
	a := j.Args()
	for i := 0; i < len(a); i += 2 {
		m[a[i].(string)] = a[i+1]
	}
	if err := DecodeInto(&back, m); err != nil {
		t.Fatal(err)
	}
	if back.JobID != j.JobID {
		t.Fatalf("round trip: %+v", back)
	}
	for _, v := range (&Job{Payload: []byte("p")}).Args() {
		if v == FieldJobID || v == FieldErrors {
			t.Fatal("a first copy must not carry jid or errs")
		}
	}
}

// TestDecodeView checks that DecodeView shares the payload's bytes where
// DecodeInto copies them, and that both read every field the same way.
func TestDecodeView(t *testing.T) {
	t.Parallel()
	payload := strings.Repeat("p", 64)
	values := map[string]any{FieldVersion: "1", FieldPayload: payload, FieldEnqueued: "1700000000000",
		FieldAttempt: "2", FieldKey: "k", FieldKeyToken: "t", FieldJobID: "j", FieldHeaders: `{"a":"b"}`, "unknown": "x"}
	var copied, viewed Job
	if err := DecodeInto(&copied, values); err != nil {
		t.Fatal(err)
	}
	if err := DecodeView(&viewed, values); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(copied, viewed) {
		t.Fatalf("DecodeView read %+v, DecodeInto %+v", viewed, copied)
	}
	if unsafe.SliceData(viewed.Payload) != unsafe.StringData(payload) {
		t.Error("DecodeView copied the payload")
	}
	if unsafe.SliceData(copied.Payload) == unsafe.StringData(payload) {
		t.Error("DecodeInto shares the payload's bytes")
	}
	for _, decode := range []func(*Job, map[string]any) error{DecodeInto, DecodeView} {
		var j Job
		if err := decode(&j, map[string]any{FieldVersion: "1", FieldPayload: ""}); err != nil || j.Payload == nil || len(j.Payload) != 0 {
			t.Errorf("an empty payload decodes as %#v, %v; want an empty, non-nil slice", j.Payload, err)
		}
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	const mark = "...(truncated)"
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"short", "abc", 3, "abc"},
		{"ascii", "abcdef", 3, "abc" + mark},
		{"before a two-byte rune", "ab\u00e9cd", 3, "ab" + mark},
		{"after a two-byte rune", "ab\u00e9cd", 4, "ab\u00e9" + mark},
		{"inside a four-byte rune", "a\U0001F600b", 3, "a" + mark},
		{"inside the last of two runes", "\u20ac\u20ac", 5, "\u20ac" + mark},
		{"zero", "\u00e9", 0, mark},
		{"not UTF-8", "\x80\x80\x80\x80\x80\x80", 5, "\x80\x80" + mark},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Truncate(tc.s, tc.n)
			if got != tc.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
			if utf8.ValidString(tc.s) && !utf8.ValidString(got) {
				t.Errorf("Truncate(%q, %d) = %q is not valid UTF-8", tc.s, tc.n, got)
			}
			if len(got) > tc.n+len(mark) {
				t.Errorf("Truncate(%q, %d) is %d bytes long, more than %d", tc.s, tc.n, len(got), tc.n+len(mark))
			}
		})
	}
}

func TestPackedJobID(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		job  Job
		want string
	}{
		"none":              {Job{Payload: []byte("p")}, ""},
		"jid":               {Job{Payload: []byte("p"), JobID: "order-1"}, "order-1"},
		"jid in payload":    {Job{Payload: []byte("\xa3jid")}, ""},
		"jid after payload": {Job{Payload: []byte("\xa3jid"), JobID: "1-2"}, "1-2"},
	} {
		if got := PackedJobID(string(Pack(tc.job.Args()))); got != tc.want {
			t.Errorf("%s: PackedJobID = %q, want %q", name, got, tc.want)
		}
	}
}

// BenchmarkPackedJobID is the cost a priority worker pays per job for the
// jid look-up of a job without one (100-byte payload): a search of the bytes.
func BenchmarkPackedJobID(b *testing.B) {
	s := string(Pack((&Job{Payload: bytes.Repeat([]byte("x"), 100), EnqMillis: 1_700_000_000_000}).Args()))
	for b.Loop() {
		if PackedJobID(s) != "" {
			b.Fatal("found a jid")
		}
	}
}

// BenchmarkHeaders writes and reads the headers field of a job with a
// trace context and one more header, as the producer and the engine do.
//
//	go test -run '^$' -bench BenchmarkHeaders ./internal/wire/
func BenchmarkHeaders(b *testing.B) {
	h := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme-42"}
	j := Job{Payload: []byte("p"), Headers: h, EnqMillis: 1}
	values := toValues(b, j.Args())
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_ = marshalHeaders(h)
		}
	})
	b.Run("encode/encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = json.Marshal(h)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		var d Job
		for range b.N {
			if err := DecodeView(&d, values); err != nil {
				b.Fatal(err)
			}
		}
	})
	s := values[FieldHeaders].(string)
	b.Run("decode/encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var m map[string]string
			if err := json.Unmarshal([]byte(s), &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
