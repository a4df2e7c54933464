package httpsrv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	bexpr "github.com/hashicorp/go-bexpr"
)

// FilterLists applies Nomad's and Consul's ?filter= to the list endpoints
// of next: on a GET with a filter, a 200 answer that is a JSON array keeps
// the elements the go-bexpr expression matches, evaluated on each element
// as its JSON has it (the API's field names: `Status == "running"`,
// `Service.ID == "web-1"`, `"v1" in Service.Tags`). A filter that does
// not parse answers 400 before the handler runs, and so does one whose
// selector names a field no element has; an element that lacks a field
// another has (an omitted empty value) just does not match. A filter on
// an answer that is one JSON object (not a list) answers 400 rather than
// the object unfiltered; other answers (errors) pass unchanged.
func FilterLists(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		expr := r.URL.Query().Get("filter")
		if expr == "" || r.Method != http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		ev, err := bexpr.CreateEvaluator(expr)
		if err != nil {
			http.Error(w, fmt.Sprintf("failed to read filter expression: %s", oneLine(err.Error())), http.StatusBadRequest)
			return
		}
		rec := &recorder{header: http.Header{}, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		body := rec.body.Bytes()
		if rec.code == http.StatusOK {
			trimmed := bytes.TrimSpace(body)
			switch {
			case bytes.HasPrefix(trimmed, []byte("[")):
				filtered, err := filterArray(ev, body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				body = filtered
				rec.header.Del("Content-Length")
			case bytes.HasPrefix(trimmed, []byte("{")):
				// Not a list: answering it whole would look filtered.
				http.Error(w, "filter expressions apply to list answers only; this answer is one object", http.StatusBadRequest)
				return
			}
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.code)
		_, _ = w.Write(body)
	})
}

// filterArray keeps the elements of the JSON array raw that ev matches.
func filterArray(ev *bexpr.Evaluator, raw []byte) ([]byte, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return raw, nil // not a list after all: left as is
	}
	kept := make([]json.RawMessage, 0, len(items))
	var lastErr error
	failed := 0
	for _, item := range items {
		var v any
		dec := json.NewDecoder(bytes.NewReader(item))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("failed to filter the answer: %w", err)
		}
		ok, err := ev.Evaluate(v)
		if err != nil {
			failed++
			lastErr = err
			continue
		}
		if ok {
			kept = append(kept, item)
		}
	}
	if len(items) > 0 && failed == len(items) {
		return nil, fmt.Errorf("filter expression matches no field of the answer: %s", oneLine(lastErr.Error()))
	}
	out, err := json.Marshal(kept)
	if err != nil {
		return nil, fmt.Errorf("failed to filter the answer: %w", err)
	}
	return append(out, '\n'), nil
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// recorder keeps a handler's answer for FilterLists.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	return r.body.Write(p)
}
