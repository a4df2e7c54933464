package api

import (
	"cmp"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
)

// paginate applies Nomad's ?per_page= and ?next_token= to a list answer v
// whose elements have a string ID: the page is the elements from the
// first ID not before next_token, in ID order, at most per_page of them;
// X-Nomad-NextToken names the first ID of the next page (unset on the
// last). Without either parameter, or for an answer that is not such a
// list, v is returned as is.
func paginate(w http.ResponseWriter, r *http.Request, v any) (any, error) {
	q := r.URL.Query()
	rawPer, token := q.Get("per_page"), q.Get("next_token")
	if r.Method != http.MethodGet || (rawPer == "" && token == "") {
		return v, nil
	}
	perPage := 0
	if rawPer != "" {
		n, err := strconv.Atoi(rawPer)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: per_page %q is not a non-negative number", ErrInvalid, rawPer)
		}
		perPage = n
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice {
		return v, nil
	}
	ids := make([]string, rv.Len())
	order := make([]int, rv.Len())
	for i := range ids {
		id, ok := elementID(rv.Index(i))
		if !ok {
			return v, nil
		}
		ids[i], order[i] = id, i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ids[a], ids[b]) })
	start, _ := slices.BinarySearchFunc(order, token, func(i int, t string) int { return cmp.Compare(ids[i], t) })
	end := len(order)
	if perPage > 0 && start+perPage < end {
		end = start + perPage
		w.Header().Set("X-Nomad-NextToken", ids[order[end]])
	}
	out := reflect.MakeSlice(rv.Type(), 0, end-start)
	for _, i := range order[start:end] {
		out = reflect.Append(out, rv.Index(i))
	}
	return out.Interface(), nil
}

// elementID is a list element's ID field (a struct or a pointer to one).
func elementID(e reflect.Value) (string, bool) {
	for e.Kind() == reflect.Pointer || e.Kind() == reflect.Interface {
		if e.IsNil() {
			return "", false
		}
		e = e.Elem()
	}
	if e.Kind() != reflect.Struct {
		return "", false
	}
	f := e.FieldByName("ID")
	if !f.IsValid() || f.Kind() != reflect.String {
		return "", false
	}
	return f.String(), true
}
