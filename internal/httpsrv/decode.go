package httpsrv

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// ErrBadBody is returned (wrapped) by DecodeJSON for a body that is not
// exactly one JSON value.
var ErrBadBody = errors.New("failed to decode request body")

// DecodeJSON decodes exactly one JSON value from r into v: anything after
// it but white space (a second value, a stray brace) is an error, as
// Consul's decoder has it. An *http.MaxBytesError from a bounded body is
// returned as is (callers map it to 413); every other failure wraps
// ErrBadBody.
func DecodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		return decodeErr(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			if mb := maxBytes(err); mb != nil {
				return mb
			}
		}
		return fmt.Errorf("%w: trailing data after the JSON value", ErrBadBody)
	}
	return nil
}

func decodeErr(err error) error {
	if mb := maxBytes(err); mb != nil {
		return mb
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: empty body", ErrBadBody)
	}
	return fmt.Errorf("%w: %w", ErrBadBody, err)
}

func maxBytes(err error) error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return mb
	}
	return nil
}
