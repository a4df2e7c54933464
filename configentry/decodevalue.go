package configentry

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// The reflective decoder: it walks a JSON- or HCL1-decoded value along
// the consul/api type it fills, so that
//   - keys match a field by name, by its `alias` tag or as snake_case
//     (default_subset → DefaultSubset), case-insensitively;
//   - unknown keys are errors naming the key's path;
//   - HCL1's lists of one map (blocks, `X = { ... }`) become objects
//     where the target is a struct or a map;
//   - durations take "5s" (or nanoseconds), times RFC 3339, numbers and
//     bools also come as strings (Consul decodes weakly, too).

var (
	durationType = reflect.TypeOf(time.Duration(0))
	timeType     = reflect.TypeOf(time.Time{})
)

func valueOf(e Entry) reflect.Value { return reflect.ValueOf(e).Elem() }

func decodeValue(path string, in any, out reflect.Value) error {
	if in == nil {
		return nil
	}
	t := out.Type()
	switch {
	case t == durationType:
		return decodeDuration(path, in, out)
	case t == timeType:
		s, ok := firstOfList(in).(string)
		if !ok {
			return typeError(path, "an RFC 3339 time", in)
		}
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return invalidf("%s: bad time %q: %v", pathName(path), s, err)
		}
		out.Set(reflect.ValueOf(tm))
		return nil
	}
	switch t.Kind() {
	case reflect.Interface:
		out.Set(reflect.ValueOf(in))
		return nil
	case reflect.Pointer:
		v := reflect.New(t.Elem())
		if err := decodeValue(path, in, v.Elem()); err != nil {
			return err
		}
		out.Set(v)
		return nil
	case reflect.Struct:
		return decodeStruct(path, in, out)
	case reflect.Map:
		return decodeMap(path, in, out)
	case reflect.Slice:
		return decodeSlice(path, in, out)
	}
	return decodeScalar(path, firstOfList(in), out)
}

// asObject returns in as a map, unwrapping HCL1's lists of maps (a block
// decodes as a one-element list; repeated blocks of an object are merged).
func asObject(path string, in any) (map[string]any, error) {
	switch v := in.(type) {
	case map[string]any:
		return v, nil
	case []map[string]any:
		return mergeObjects(path, v)
	case []any:
		ms := make([]map[string]any, 0, len(v))
		for _, x := range v {
			m, ok := x.(map[string]any)
			if !ok {
				return nil, typeError(path, "an object", in)
			}
			ms = append(ms, m)
		}
		return mergeObjects(path, ms)
	}
	return nil, typeError(path, "an object", in)
}

func mergeObjects(path string, ms []map[string]any) (map[string]any, error) {
	if len(ms) == 1 {
		return ms[0], nil
	}
	out := map[string]any{}
	for _, m := range ms {
		for k, v := range m {
			if _, dup := out[k]; dup {
				return nil, invalidf("%s: key %q given twice", pathName(path), k)
			}
			out[k] = v
		}
	}
	return out, nil
}

func decodeStruct(path string, in any, out reflect.Value) error {
	m, err := asObject(path, in)
	if err != nil {
		return err
	}
	seen := map[int]string{}
	for k, v := range m {
		i := fieldIndex(out.Type(), k)
		if i < 0 {
			return &keyError{key: k, err: invalidf("%s: unknown key %q", pathName(path), k)}
		}
		if prev, dup := seen[i]; dup {
			return invalidf("%s: keys %q and %q name the same field", pathName(path), prev, k)
		}
		seen[i] = k
		f := out.Type().Field(i)
		if err := decodeValue(joinPath(path, f.Name), v, out.Field(i)); err != nil {
			var ke *keyError
			if !errors.As(err, &ke) {
				err = &keyError{key: k, err: err}
			}
			return err
		}
	}
	return nil
}

// fieldIndex finds the exported field a key names: its Go name, its json
// or alias tag, or the key without underscores, ignoring case.
func fieldIndex(t reflect.Type, key string) int {
	squashed := strings.ReplaceAll(key, "_", "")
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if strings.EqualFold(f.Name, key) || strings.EqualFold(f.Name, squashed) {
			return i
		}
		if a := f.Tag.Get("alias"); a != "" && a == key {
			return i
		}
		if j, _, _ := strings.Cut(f.Tag.Get("json"), ","); j != "" && j != "-" && strings.EqualFold(j, key) {
			return i
		}
	}
	return -1
}

// keyError is a decode error about the value of one key (the deepest),
// so that parse can point at the key's line.
type keyError struct {
	key string
	err error
}

func (e *keyError) Error() string { return e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

func decodeMap(path string, in any, out reflect.Value) error {
	t := out.Type()
	if t.Key().Kind() != reflect.String {
		return invalidf("%s: unsupported map key type", pathName(path))
	}
	m, err := asObject(path, in)
	if err != nil {
		return err
	}
	res := reflect.MakeMapWithSize(t, len(m))
	for k, v := range m {
		ev := reflect.New(t.Elem()).Elem()
		if err := decodeValue(joinPath(path, k), v, ev); err != nil {
			return err
		}
		res.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), ev)
	}
	out.Set(res)
	return nil
}

func decodeSlice(path string, in any, out reflect.Value) error {
	var items []any
	switch v := in.(type) {
	case []any:
		items = v
	case []map[string]any:
		for _, m := range v {
			items = append(items, m)
		}
	default:
		items = []any{in}
	}
	res := reflect.MakeSlice(out.Type(), len(items), len(items))
	for i, x := range items {
		if err := decodeValue(fmt.Sprintf("%s[%d]", path, i), x, res.Index(i)); err != nil {
			return err
		}
	}
	out.Set(res)
	return nil
}

func decodeDuration(path string, in any, out reflect.Value) error {
	in = firstOfList(in)
	if s, ok := in.(string); ok {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return invalidf("%s: bad duration %q (want e.g. \"5s\")", pathName(path), s)
		}
		out.SetInt(int64(d))
		return nil
	}
	n, ok := number(in)
	if !ok || n != math.Trunc(n) {
		return typeError(path, "a duration", in)
	}
	out.SetInt(int64(n))
	return nil
}

func decodeScalar(path string, in any, out reflect.Value) error {
	switch out.Kind() {
	case reflect.String:
		switch v := in.(type) {
		case string:
			out.SetString(v)
		case bool, int, int64, float64, json.Number:
			out.SetString(fmt.Sprint(v))
		default:
			return typeError(path, "a string", in)
		}
	case reflect.Bool:
		switch v := in.(type) {
		case bool:
			out.SetBool(v)
		case string:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return typeError(path, "a bool", in)
			}
			out.SetBool(b)
		default:
			return typeError(path, "a bool", in)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := number(in)
		if !ok || n != math.Trunc(n) || out.OverflowInt(int64(n)) {
			return typeError(path, "an integer", in)
		}
		out.SetInt(int64(n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := number(in)
		if !ok || n != math.Trunc(n) || n < 0 || out.OverflowUint(uint64(n)) {
			return typeError(path, "a non-negative integer", in)
		}
		out.SetUint(uint64(n))
	case reflect.Float32, reflect.Float64:
		n, ok := number(in)
		if !ok {
			return typeError(path, "a number", in)
		}
		out.SetFloat(n)
	default:
		return invalidf("%s: unsupported field type %s", pathName(path), out.Type())
	}
	return nil
}

func number(in any) (float64, bool) {
	switch v := in.(type) {
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case float64:
		return v, true
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return f, err == nil
	}
	return 0, false
}

// firstOfList unwraps a one-element list (HCL1 wraps some values).
func firstOfList(in any) any {
	switch v := in.(type) {
	case []any:
		if len(v) == 1 {
			return v[0]
		}
	case []map[string]any:
		if len(v) == 1 {
			return v[0]
		}
	}
	return in
}

func typeError(path, want string, got any) error {
	return invalidf("%s: expected %s, got %s", pathName(path), want, typeName(got))
}

func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("bool %v", x)
	case int, int64, float64, json.Number:
		return fmt.Sprintf("number %v", x)
	case map[string]any:
		return "an object"
	case []any, []map[string]any:
		return "a list"
	}
	return fmt.Sprintf("%T", v)
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func pathName(path string) string {
	if path == "" {
		return "entry"
	}
	return path
}
