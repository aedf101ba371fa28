package wire

import (
	"errors"
	"testing"
)

// A reader fails once and stays failed, and Err reports its first error,
// whatever is read after it. Until stop 40 a Bytes read (and so Byte,
// U32, U64 and String) after a failure replaced the error with
// ErrMalformed.
func TestReaderKeepsItsFirstError(t *testing.T) {
	first := errors.New("first")
	for name, read := range map[string]func(*Reader){
		"Byte": func(r *Reader) { r.Byte() }, "U64": func(r *Reader) { r.U64() }, "String": func(r *Reader) { _ = r.String() },
		"Uvarint": func(r *Reader) { r.Uvarint() }, "Count": func(r *Reader) { r.Count(10) },
	} {
		r := NewReader([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
		r.Fail(first)
		read(r)
		if !errors.Is(r.Err(), first) {
			t.Errorf("%s after Fail(first): Err %v, want first", name, r.Err())
		}
	}
	r := NewReader([]byte{1})
	if r.Bytes(2); !errors.Is(r.Err(), ErrMalformed) {
		t.Fatalf("reading past the message: %v, want ErrMalformed", r.Err())
	}
}
