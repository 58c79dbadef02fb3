package idem

import (
	"bytes"
	"maps"
)

// Response is what a completed command answered: replayed byte for byte to
// every later attempt with the same key and request.
type Response struct {
	Status  int
	Headers map[string]string // at most 16, e.g. Content-Type and Location
	Body    []byte
}

// Equal reports whether r and o are the same answer, byte for byte.
func (r Response) Equal(o Response) bool {
	return r.Status == o.Status && bytes.Equal(r.Body, o.Body) && maps.Equal(r.Headers, o.Headers)
}
