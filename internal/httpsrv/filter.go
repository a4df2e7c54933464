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
	"sync/atomic"

	bexpr "github.com/hashicorp/go-bexpr"
)

// ErrBadFilter is returned (wrapped) by FilterAnswer for a ?filter= that
// does not apply to the answer; callers answer 400.
var ErrBadFilter = errors.New("bad filter expression")

type filterKey struct{}

// filterState is a request's filter and whether an answer applied it.
type filterState struct {
	ev      *bexpr.Evaluator
	applied atomic.Bool
}

// FilterLists reads Nomad's and Consul's ?filter= on GET requests: a
// go-bexpr expression that does not parse answers 400 before the handler
// runs; one that does is kept in the request's context for FilterAnswer.
// A 200 answer that did not go through FilterAnswer (an endpoint that does
// not filter) is replaced by a 400, never sent unfiltered.
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
		st := &filterState{ev: ev}
		next.ServeHTTP(&filterGuard{ResponseWriter: w, st: st}, r.WithContext(context.WithValue(r.Context(), filterKey{}, st)))
	})
}

// filterGuard refuses a 200 answer no filter was applied to.
type filterGuard struct {
	http.ResponseWriter
	st      *filterState
	decided bool
	refused bool
}

func (g *filterGuard) WriteHeader(code int) {
	if g.decided {
		return
	}
	g.decided = true
	if code == http.StatusOK && !g.st.applied.Load() {
		g.refused = true
		http.Error(g.ResponseWriter, "this endpoint does not support filter expressions", http.StatusBadRequest)
		return
	}
	g.ResponseWriter.WriteHeader(code)
}

func (g *filterGuard) Write(p []byte) (int, error) {
	if !g.decided {
		g.WriteHeader(http.StatusOK)
	}
	if g.refused {
		return len(p), nil
	}
	return g.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// deadlines).
func (g *filterGuard) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// FilterAnswer applies r's filter (FilterLists) to an answer v: v as is
// without one; for a slice, the elements the expression matches, each
// evaluated on its typed value as Nomad and Consul do (Go field names,
// `Status == "running"`, `Service.ID == "web-1"`, `"v1" in Service.Tags`,
// `Meta is empty` for an empty map; fields of an embedded struct through
// the element's JSON form). An element on which the expression
// cannot be evaluated (a key its map lacks) does not match; a selector no
// element has, or an answer that is not a list, is ErrBadFilter.
func FilterAnswer(r *http.Request, v any) (any, error) {
	st, _ := r.Context().Value(filterKey{}).(*filterState)
	if st == nil {
		return v, nil
	}
	st.applied.Store(true)
	ev := st.ev
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
