package httpsrv

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDecodeJSON(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		ok         bool
	}{
		{"one object", `{"A":1}`, true},
		{"trailing white space", "{\"A\":1}\n\t ", true},
		{"second object", `{"A":1}{"A":2}`, false},
		{"stray brace", `{"A":1}}`, false},
		{"stray bracket", `{"A":1}]`, false},
		{"trailing text", `{"A":1} garbage`, false},
		{"empty", ``, false},
		{"not json", `A=1`, false},
		{"wrong type", `{"A":"x"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v struct{ A int }
			err := DecodeJSON(strings.NewReader(tc.body), &v)
			if tc.ok && err != nil {
				t.Fatalf("DecodeJSON(%q): %v", tc.body, err)
			}
			if !tc.ok && !errors.Is(err, ErrBadBody) {
				t.Fatalf("DecodeJSON(%q) = %v, want ErrBadBody", tc.body, err)
			}
		})
	}
}

// A body over its bound is a MaxBytesError (413), not a bad body (400).
func TestDecodeJSONTooLarge(t *testing.T) {
	body := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(`{"A":"`+strings.Repeat("x", 100)+`"}`)), 10)
	var v struct{ A string }
	err := DecodeJSON(body, &v)
	var mb *http.MaxBytesError
	if !errors.As(err, &mb) || errors.Is(err, ErrBadBody) {
		t.Fatalf("DecodeJSON over the limit = %v, want only a MaxBytesError", err)
	}
}
