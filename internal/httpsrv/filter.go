package httpsrv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	bexpr "github.com/hashicorp/go-bexpr"
)

// ErrBadFilter is returned (wrapped) by FilterAnswer for a ?filter= that
// does not apply to the answer; callers answer 400.
var ErrBadFilter = errors.New("bad filter expression")

type filterKey struct{}

// FilterLists reads Nomad's and Consul's ?filter= on GET requests: a
// go-bexpr expression that does not parse answers 400 before the handler
// runs; one that does is kept in the request's context for FilterAnswer.
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
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), filterKey{}, ev)))
	})
}

// FilterAnswer applies r's filter (FilterLists) to an answer v: v as is
// without one; for a slice, the elements the expression matches, each
// evaluated on its typed value as Nomad and Consul do (Go field names,
// `Status == "running"`, `Service.ID == "web-1"`, `"v1" in Service.Tags`,
// `Meta is empty` for an empty map; fields of an embedded struct through
// the element's JSON form). An element on which the expression
// cannot be evaluated (a key its map lacks) does not match; a selector no
// element has, or an answer that is not a list, is ErrBadFilter.
func FilterAnswer(r *http.Request, v any) (any, error) {
	ev, _ := r.Context().Value(filterKey{}).(*bexpr.Evaluator)
	if ev == nil {
		return v, nil
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		return nil, fmt.Errorf("%w: filter expressions apply to list answers only; this answer is one object", ErrBadFilter)
	}
	out := reflect.MakeSlice(rv.Type(), 0, rv.Len())
	var lastErr error
	failed := 0
	for i := range rv.Len() {
		item := rv.Index(i)
		ok, err := evaluate(ev, item.Interface())
		if err != nil {
			failed++
			lastErr = err
			continue
		}
		if ok {
			out = reflect.Append(out, item)
		}
	}
	if rv.Len() > 0 && failed == rv.Len() {
		return nil, fmt.Errorf("%w: it matches no field of the answer: %s", ErrBadFilter, oneLine(lastErr.Error()))
	}
	return out.Interface(), nil
}

// evaluate evaluates ev on v's typed value, else on its JSON form, where
// the fields of embedded structs are the answer's own (a catalog entry
// embedding consul's CatalogService has ServiceTags).
func evaluate(ev *bexpr.Evaluator, v any) (bool, error) {
	ok, err := ev.Evaluate(v)
	if err == nil {
		return ok, nil
	}
	raw, jerr := json.Marshal(v)
	if jerr != nil {
		return false, err
	}
	var m any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&m) != nil {
		return false, err
	}
	if ok, jerr = ev.Evaluate(m); jerr != nil {
		return false, err
	}
	return ok, nil
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
