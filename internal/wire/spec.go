package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// A Spec is a job stored to be enqueued later, as a workflow stores each
// node's job until its parents allow it: its queue, its kind (for readers),
// and the field/value list of its entry (see [Job.Args]), whose enqueue
// time, at index Enq, is set when the job is enqueued.
//
// A Spec is stored in the compact form [Spec.Append] writes: a version byte
// (specVersion), then the queue, the kind, Enq, the number of fields and
// each field, every string as its length (a uvarint) and its bytes. It is
// read without copying the fields (they share the stored string) and
// without a general-purpose decoder: a workflow's fan-out reads a spec per
// child.
type Spec struct {
	Queue, Kind string
	Fields      []string
	Enq         int
}

// specVersion is the first byte of an encoded Spec.
const specVersion = 1

// NewSpec returns the spec of job j on queue.
func NewSpec(queue string, j *Job) (Spec, error) {
	args := j.Args()
	s := Spec{Queue: queue, Kind: j.Kind, Fields: make([]string, len(args)), Enq: -1}
	for i, a := range args {
		switch v := a.(type) {
		case string:
			s.Fields[i] = v
		case []byte:
			s.Fields[i] = string(v)
		default:
			return Spec{}, fmt.Errorf("wire: field %d of the job is a %T", i, a)
		}
		if i%2 == 1 && s.Fields[i-1] == FieldEnqueued {
			s.Enq = i
		}
	}
	if s.Enq < 0 {
		return Spec{}, errors.New("wire: the job has no enqueue time")
	}
	return s, nil
}

// Append appends the encoding of s to b.
func (s *Spec) Append(b []byte) []byte {
	size := 1 + 3*binary.MaxVarintLen32 + len(s.Queue) + len(s.Kind)
	for _, f := range s.Fields {
		size += binary.MaxVarintLen32 + len(f)
	}
	b = slices.Grow(b, size)
	b = append(b, specVersion)
	b = appendString(b, s.Queue)
	b = appendString(b, s.Kind)
	b = binary.AppendUvarint(b, uint64(s.Enq))
	b = binary.AppendUvarint(b, uint64(len(s.Fields)))
	for _, f := range s.Fields {
		b = appendString(b, f)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// ParseSpec decodes a spec written by [Spec.Append]. The fields share
// the memory of enc.
func ParseSpec(enc string) (Spec, error) {
	if enc == "" || enc[0] != specVersion {
		return Spec{}, fmt.Errorf("%w: a stored job that is not of version %d", ErrMalformed, specVersion)
	}
	r := specReader{s: enc, i: 1}
	var s Spec
	s.Queue = r.str()
	s.Kind = r.str()
	s.Enq = r.num()
	n := r.num()
	if r.err == nil && (n%2 != 0 || n > len(enc)) {
		r.err = fmt.Errorf("%d fields", n)
	}
	if r.err == nil {
		s.Fields = make([]string, n)
		for i := range s.Fields {
			s.Fields[i] = r.str()
		}
	}
	switch {
	case r.err != nil:
	case r.i != len(enc):
		r.err = fmt.Errorf("%d bytes after the fields", len(enc)-r.i)
	case s.Enq%2 != 1 || s.Enq >= n || s.Fields[s.Enq-1] != FieldEnqueued:
		r.err = fmt.Errorf("the enqueue time's index %d does not name field %q", s.Enq, FieldEnqueued)
	}
	if r.err != nil {
		return Spec{}, fmt.Errorf("%w: stored job: %v", ErrMalformed, r.err)
	}
	return s, nil
}

// specReader reads the uvarints and strings of an encoded Spec; the first
// error sticks.
type specReader struct {
	s   string
	i   int
	err error
}

func (r *specReader) num() int {
	if r.err != nil {
		return 0
	}
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if r.i >= len(r.s) || shift > 56 {
			r.err = errors.New("truncated or oversize number")
			return 0
		}
		c := r.s[r.i]
		r.i++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	if v > uint64(len(r.s)) {
		r.err = fmt.Errorf("length %d beyond the end", v)
		return 0
	}
	return int(v)
}

func (r *specReader) str() string {
	n := r.num()
	if r.err != nil {
		return ""
	}
	if n > len(r.s)-r.i {
		r.err = fmt.Errorf("string of %d bytes beyond the end", n)
		return ""
	}
	s := r.s[r.i : r.i+n]
	r.i += n
	return s
}
