package wire

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestJob_V2RoundTrip(t *testing.T) {
	t.Parallel()
	in := Job{
		Payload:   []byte(`{"a":1}`),
		EnqMillis: 1_700_000_000_123,
	}
	in.Opts = Opts{
		Kind:        "email.send",
		MaxAttempts: 3,
		Timeout:     1500,
		Deadline:    1_700_000_100_000,
		Retention:   60_000,
		Tags:        []string{"tenant:7", "urgent"},
		FlowKey:     "tenant:7",
		UnknownKind: 2,
	}
	args := in.Args()
	if args[1] != "2" {
		t.Fatalf("version = %v, want 2 for an entry with fields of version 2", args[1])
	}
	if args[PayloadArg-1] != FieldPayload || !reflect.DeepEqual(args[PayloadArg], in.Payload) {
		t.Fatalf("payload not at index PayloadArg: %v", args)
	}
	got, err := Decode(toValues(t, args))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(*got, in) {
		t.Errorf("round trip:\n got %+v\nwant %+v", *got, in)
	}
}

func TestJob_V1WithoutNewFields(t *testing.T) {
	t.Parallel()
	j := Job{Payload: []byte("x"), EnqMillis: 1, Attempt: 2, JobID: "1-0"}
	args := j.Args()
	if args[1] != "1" {
		t.Fatalf("version = %v, want 1 when no field of version 2 is used", args[1])
	}
	for i := 0; i < len(args); i += 2 {
		switch args[i] {
		case FieldKind, FieldMaxAttempts, FieldTimeout, FieldDeadline, FieldRetention, FieldTags, FieldFlowKey, FieldUnknownKind:
			t.Errorf("unused field %v written", args[i])
		}
	}
}

func TestDecode_MalformedV2(t *testing.T) {
	t.Parallel()
	base := func(k, v string) map[string]any { return map[string]any{"v": "2", "payload": "x", k: v} }
	tests := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"max attempts not a number", base("ma", "three"), `"ma"`},
		{"negative max attempts", base("ma", "-1"), `"ma"`},
		{"timeout not a number", base("to", "1s"), `"to"`},
		{"negative deadline", base("dl", "-5"), `"dl"`},
		{"retention not a number", base("rr", "x"), `"rr"`},
		{"tags not an array", base("tags", `{"a":1}`), "JSON array of strings"},
		{"tags not strings", base("tags", `[1,2]`), "JSON array of strings"},
		{"tags not UTF-8", base("tags", "[\"\xff\"]"), "UTF-8"},
		{"unknown-kind count not a number", base("uk", "x"), `"uk"`},
		{"version 3", map[string]any{"v": "3", "payload": "x"}, "reads versions 1 and 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Decode(tt.values)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrMalformed saying %q", err, tt.want)
			}
		})
	}
}

// TestDecode_Fixtures010 decodes entries as streamq 0.1.0 wrote them (kept
// in testdata/v0.1.0): they decode as version 1, with kind "" and no field
// of version 2, and a job written again from them stays version 1.
func TestDecode_Fixtures010(t *testing.T) {
	t.Parallel()
	want := map[string]Job{
		"plain.json":   {Payload: []byte(`{"order":42}`), EnqMillis: 1764000000123},
		"headers.json": {Payload: []byte("hello"), EnqMillis: 1764000000123, Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		"retried.json": {Payload: []byte("x"), EnqMillis: 1764000000123, Attempt: 2, FirstFail: 1764000001000, LastError: "boom", JobID: "1764000000123-0"},
		"unique-crashed.json": {Payload: []byte{}, EnqMillis: 1764000000123, Key: "invoice:42", KeyToken: "d-0123456789abcdef",
			Crashed: true, JobID: "d-fedcba9876543210"},
	}
	files, err := filepath.Glob("testdata/v0.1.0/*.json")
	if err != nil || len(files) != len(want)+1 {
		t.Fatalf("fixtures: %v (%d files, want %d)", err, len(files), len(want)+1)
	}
	for _, f := range files {
		values := readFixture(t, f)
		name := filepath.Base(f)
		if name == "deadletter.json" {
			d, own := ParseDeadLetter(values)
			if d.Reason != "max_deliveries" || d.Attempts != 10 || d.ID != "1764000003000-0" {
				t.Errorf("%s: dead letter %+v", name, d)
			}
			ownAny := make(map[string]any, len(own))
			for k, v := range own {
				ownAny[k] = v
			}
			j, err := Decode(ownAny)
			if err != nil || j.Kind != "" || j.Attempt != 9 || j.V2() {
				t.Errorf("%s: job %+v, %v", name, j, err)
			}
			continue
		}
		j, err := Decode(values)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !reflect.DeepEqual(*j, want[name]) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, *j, want[name])
		}
		if a := j.Args(); a[1] != "1" {
			t.Errorf("%s written again as version %v, want 1", name, a[1])
		}
	}
}

func readFixture(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	values := make(map[string]any, len(m))
	for k, v := range m {
		values[k] = v
	}
	return values
}
