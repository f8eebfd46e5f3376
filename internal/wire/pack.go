package wire

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Packed fields: where a job is stored outside a stream (the priority set's
// job hash, the delayed set), its fields are one MessagePack array of
// strings: field, value, field, value, ... It is what Redis's Lua
// cmsgpack.pack makes of a table of strings, so other clients and scripts
// can read it; scripts only store and return it, the packing is done here,
// off Redis's single thread.

var errPacked = fmt.Errorf("%w: corrupt packed job data", ErrMalformed)

// Pack encodes a flat field/value list of strings and byte slices.
func Pack(fields []any) []byte {
	size := 5
	for _, f := range fields {
		size += 5 + fieldLen(f)
	}
	b := make([]byte, 0, size)
	n := len(fields)
	switch {
	case n < 16:
		b = append(b, 0x90|byte(n))
	case n <= 0xffff:
		b = append(b, 0xdc)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xdd)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	for _, f := range fields {
		var s string
		switch v := f.(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		default:
			s = fmt.Sprint(v)
		}
		l := len(s)
		switch {
		case l < 32:
			b = append(b, 0xa0|byte(l))
		case l <= 0xff:
			b = append(b, 0xd9, byte(l))
		case l <= 0xffff:
			b = append(b, 0xda)
			b = binary.BigEndian.AppendUint16(b, uint16(l))
		default:
			b = append(b, 0xdb)
			b = binary.BigEndian.AppendUint32(b, uint32(l))
		}
		b = append(b, s...)
	}
	return b
}

func fieldLen(f any) int {
	switch v := f.(type) {
	case string:
		return len(v)
	case []byte:
		return len(v)
	}
	return 16
}

// Unpack decodes what Pack (or cmsgpack.pack of a table of strings)
// encoded into a field map for [Decode].
func Unpack(s string) (map[string]any, error) {
	n, s, err := arrayLen(s)
	if err != nil || n%2 != 0 || n > len(s) {
		return nil, errPacked
	}
	m := make(map[string]any, n/2)
	var k, v string
	for i := 0; i+1 < n; i += 2 {
		if k, s, err = mpStr(s); err != nil {
			return nil, err
		}
		if v, s, err = mpStr(s); err != nil {
			return nil, err
		}
		m[k] = v
	}
	if len(s) != 0 {
		return nil, errPacked
	}
	return m, nil
}

func arrayLen(s string) (int, string, error) {
	if len(s) == 0 {
		return 0, s, errPacked
	}
	switch c := s[0]; {
	case c&0xf0 == 0x90:
		return int(c & 0x0f), s[1:], nil
	case c == 0xdc && len(s) >= 3:
		return int(binary.BigEndian.Uint16([]byte(s[1:3]))), s[3:], nil
	case c == 0xdd && len(s) >= 5:
		return int(binary.BigEndian.Uint32([]byte(s[1:5]))), s[5:], nil
	}
	return 0, s, errPacked
}

// mpStr decodes a MessagePack string (or binary) and returns it and the rest.
func mpStr(s string) (string, string, error) {
	if len(s) == 0 {
		return "", s, errPacked
	}
	var l, h int
	switch c := s[0]; {
	case c&0xe0 == 0xa0:
		l, h = int(c&0x1f), 1
	case (c == 0xd9 || c == 0xc4) && len(s) >= 2:
		l, h = int(s[1]), 2
	case (c == 0xda || c == 0xc5) && len(s) >= 3:
		l, h = int(binary.BigEndian.Uint16([]byte(s[1:3]))), 3
	case (c == 0xdb || c == 0xc6) && len(s) >= 5:
		l, h = int(binary.BigEndian.Uint32([]byte(s[1:5]))), 5
	default:
		return "", s, errPacked
	}
	if len(s) < h+l {
		return "", s, errPacked
	}
	return s[h : h+l], s[h+l:], nil
}

// packedJID is the jid field's name as MessagePack writes it (a fixstr of 3
// bytes).
const packedJID = "\xa3" + FieldJobID

// PackedJobID returns the jid field of packed job fields, "" when it has
// none. Fields without one cost a search of the bytes, not a decode.
func PackedJobID(s string) string {
	if !strings.Contains(s, packedJID) {
		return ""
	}
	m, err := Unpack(s)
	if err != nil {
		return ""
	}
	id, _ := Str(m[FieldJobID])
	return id
}
