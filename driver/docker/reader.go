package docker

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// reader reads typed values from a config map, collecting errors.
type reader struct {
	m    map[string]any
	errs []error
}

func (r *reader) fail(format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf(format, args...))
}

// str reads an optional string.
func (r *reader) str(key string) string {
	switch v := r.m[key].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		r.fail("%s must be a string, got %T", key, v)
		return ""
	}
}

// boolean reads an optional bool.
func (r *reader) boolean(key string) bool {
	switch v := r.m[key].(type) {
	case nil:
		return false
	case bool:
		return v
	default:
		r.fail("%s must be a bool, got %T", key, v)
		return false
	}
}

// integer reads an optional whole number.
func (r *reader) integer(key string) int64 {
	switch v := r.m[key].(type) {
	case nil:
		return 0
	case int:
		return int64(v)
	case int64:
		return v
	case float64:
		if v == float64(int64(v)) {
			return int64(v)
		}
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return n
		}
	}
	r.fail("%s must be a whole number, got %v", key, r.m[key])
	return 0
}

// strs reads an optional list of strings; with scalars, numbers and bools
// are taken as their text (as args are).
func (r *reader) strs(key string, scalars bool) []string {
	var list []any
	switch v := r.m[key].(type) {
	case nil:
		return nil
	case []string:
		return append([]string(nil), v...)
	case []any:
		list = v
	default:
		r.fail("%s must be a list of strings, got %T", key, v)
		return nil
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok && scalars {
			s, ok = scalarText(e)
		}
		if !ok {
			r.fail("%s[%d] must be a string, got %T", key, i, e)
			continue
		}
		out = append(out, s)
	}
	return out
}

// strMap reads an optional map of strings (labels, logging config); a
// block form (a list of one map) is accepted.
func (r *reader) strMap(v any, key string) map[string]string {
	m := subBlock(v)
	if m == nil {
		if v != nil {
			r.fail("%s must be a map of strings, got %T", key, v)
		}
		return nil
	}
	out := make(map[string]string, len(m))
	for k, e := range m {
		s, ok := scalarText(e)
		if !ok {
			r.fail("%s.%s must be a string, got %T", key, k, e)
			continue
		}
		out[k] = s
	}
	return out
}

// block reads an optional block (a map, or a list holding one map)
// taking only keys.
func (r *reader) block(key string, keys []string) map[string]any {
	v := r.m[key]
	if v == nil {
		return nil
	}
	b := subBlock(v)
	if b == nil {
		r.fail("%s must be a block, got %T", key, v)
		return nil
	}
	if err := onlyKeys(b, key, keys...); err != nil {
		r.errs = append(r.errs, err)
		return nil
	}
	return b
}

// subBlock is v as one map: a map, or a list of exactly one map.
func subBlock(v any) map[string]any {
	switch x := v.(type) {
	case map[string]any:
		return x
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, s := range x {
			out[k] = s
		}
		return out
	case []any:
		if len(x) == 1 {
			return subBlock(x[0])
		}
	case []map[string]any:
		if len(x) == 1 {
			return x[0]
		}
	}
	return nil
}

// blockList is v as a list of maps (repeated blocks).
func blockList(v any) []map[string]any {
	switch x := v.(type) {
	case map[string]any:
		return []map[string]any{x}
	case []map[string]any:
		return x
	case []any:
		out := make([]map[string]any, 0, len(x))
		for _, e := range x {
			if m := subBlock(e); m != nil {
				out = append(out, m)
			}
		}
		return out
	}
	return nil
}

// onlyKeys rejects keys of b not in keys.
func onlyKeys(b map[string]any, name string, keys ...string) error {
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if !slices.Contains(keys, k) {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: unknown key(s) %s; it takes %s", name, strings.Join(bad, ", "), strings.Join(keys, ", "))
	}
	return nil
}

func scalarText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case json.Number:
		return x.String(), true
	}
	return "", false
}
