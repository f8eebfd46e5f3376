package streamq

import "encoding/json"

// Codec encodes the args of typed jobs into payloads and decodes them back
// (see [EnqueueArgs] and [Register]). It must be safe for concurrent use.
// The producer and the workers of a kind must use the same codec.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default [Codec]: encoding/json.
type JSONCodec struct{}

// Marshal returns the JSON encoding of v.
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes the JSON data into v.
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
