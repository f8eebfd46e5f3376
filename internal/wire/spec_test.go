package wire

import (
	"errors"
	"reflect"
	"testing"
)

func specJob() *Job {
	j := &Job{Payload: []byte("pay\x00load\xff with any bytes"), EnqMillis: 1_700_000_000_123, Headers: map[string]string{"streamq-workflow": "wf1"}}
	j.Opts = Opts{Kind: "email.send", MaxAttempts: 5, Timeout: 1500, Tags: []string{"a"}}
	return j
}

func TestSpec_RoundTrip(t *testing.T) {
	t.Parallel()
	j := specJob()
	s, err := NewSpec("orders", j)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSpec(string(s.Append(nil)))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, s)
	}
	if got.Queue != "orders" || got.Kind != "email.send" || got.Fields[got.Enq-1] != FieldEnqueued || got.Fields[got.Enq] != "1700000000123" {
		t.Fatalf("spec = %#v", got)
	}
	// The fields are those of the job's entry: decoding them gives the job.
	values := map[string]any{}
	for i := 0; i < len(got.Fields); i += 2 {
		values[got.Fields[i]] = got.Fields[i+1]
	}
	dec, err := Decode(values)
	if err != nil {
		t.Fatal(err)
	}
	if string(dec.Payload) != string(j.Payload) || dec.Kind != j.Kind || dec.MaxAttempts != 5 || dec.Headers["streamq-workflow"] != "wf1" {
		t.Fatalf("decoded job = %+v", dec)
	}
}

// Every truncation and a few corruptions of an encoded spec are refused
// with ErrMalformed, none panics.
func TestParseSpec_Malformed(t *testing.T) {
	t.Parallel()
	s, err := NewSpec("q", specJob())
	if err != nil {
		t.Fatal(err)
	}
	enc := string(s.Append(nil))
	bad := []string{"", `{"q":"x"}`, enc + "x", "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"}
	for i := range len(enc) {
		bad = append(bad, enc[:i])
	}
	wrongEnq := s
	wrongEnq.Enq = 1
	bad = append(bad, string(wrongEnq.Append(nil)))
	odd := s
	odd.Fields = odd.Fields[:len(odd.Fields)-1]
	bad = append(bad, string(odd.Append(nil)))
	for _, b := range bad {
		if _, err := ParseSpec(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseSpec(%q) = %v, want ErrMalformed", b, err)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	s, _ := NewSpec("orders", specJob())
	f.Add(string(s.Append(nil)))
	f.Add("\x01\x00\x00\x01\x02\x03enq\x011")
	f.Fuzz(func(t *testing.T, enc string) {
		s, err := ParseSpec(enc)
		if err != nil {
			return
		}
		again, err := ParseSpec(string(s.Append(nil)))
		if err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("spec %#v parsed from %q does not survive its encoding: %#v, %v", s, enc, again, err)
		}
	})
}
