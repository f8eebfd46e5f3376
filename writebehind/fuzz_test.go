package writebehind_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/writebehind"
)

// FuzzFromMessage decodes arbitrary write-behind entries: the input is split
// at NUL bytes into the payload, then header key, value, key, value, ...
// (any client can write to the stream). FromMessage must never panic, must
// report a bad entry as ErrMalformedChange or a *ChangeError, and a change
// it returns must be one a sink accepts.
func FuzzFromMessage(f *testing.F) {
	f.Add([]byte("value\x00wb-key\x00user:1\x00wb-op\x00set\x00wb-version\x007\x00wb-issued\x001700000000000000"))
	f.Add([]byte("{\"a\":\"b\"}\x00wb-key\x00k\x00wb-op\x00hset\x00wb-version\x009223372036854775807"))
	f.Add([]byte("\x00wb-key\x00k\x00wb-op\x00del\x00wb-version\x001"))
	f.Add([]byte("x\x00wb-key\x00\xff\x00wb-op\x00del\x00wb-version\x00-1\x00wb-issued\x00x"))
	f.Add([]byte("[1,2]\x00wb-key\x00k\x00wb-op\x00hset\x00wb-version\x001e3"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parts := bytes.Split(data, []byte{0})
		msg := &streamq.Message{Payload: parts[0], Headers: map[string]string{}}
		for i := 1; i+1 < len(parts); i += 2 {
			msg.Headers[string(parts[i])] = string(parts[i+1])
		}
		ch, err := writebehind.FromMessage(msg)
		if err != nil {
			var ce *writebehind.ChangeError
			if !errors.Is(err, writebehind.ErrMalformedChange) && !errors.As(err, &ce) {
				t.Fatalf("error %v is neither ErrMalformedChange nor a *ChangeError", err)
			}
			return
		}
		if err := ch.Validate(); err != nil {
			t.Fatalf("FromMessage returned a change a sink refuses: %v", err)
		}
		if ch.Key != msg.Headers[writebehind.HeaderKey] || ch.Version <= 0 || (ch.Deleted && len(ch.Value) > 0) {
			t.Fatalf("change %+v from headers %v", ch, msg.Headers)
		}
		if !ch.Deleted && !bytes.Equal(ch.Value, msg.Payload) {
			t.Fatalf("value %q, want the payload %q", ch.Value, msg.Payload)
		}
	})
}
