package jobspecs

import (
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// durationError is a conversion failure reported as "Invalid duration".
type durationError struct{ msg string }

func (e durationError) Error() string { return e.msg }

// attrValue evaluates the argument name of c (if present and not null),
// converts it with conv and records its range at p.attr(name).
func attrValue[T any](d *decoder, c content, p path, name string, conv func(cty.Value) (T, error)) (T, bool) {
	var zero T
	a := c.attrs[name]
	if a == nil {
		return zero, false
	}
	key := p.attr(name).key
	d.ranges[key] = a.Expr.Range()
	v, hds := d.eval(a.Expr)
	d.addHCL(key, hds)
	if hds.HasErrors() || v.IsNull() || !v.IsWhollyKnown() {
		// Unknown values come from variables whose error is already reported.
		return zero, false
	}
	out, err := conv(v)
	if err != nil {
		if errors.As(err, new(durationError)) {
			d.errAt(key, a.Expr.Range(), "Invalid duration", fmt.Sprintf(
				"Inappropriate value for attribute %q: %v; use a Go duration such as \"30s\", \"5m\" or \"1h\".", name, err))
		} else {
			d.errAt(key, a.Expr.Range(), "Incorrect attribute value type", fmt.Sprintf(
				"Inappropriate value for attribute %q: %v.", name, err))
		}
		return zero, false
	}
	return out, true
}

func (d *decoder) setStr(c content, p path, name string, dst *string) {
	if v, ok := attrValue(d, c, p, name, convString); ok {
		*dst = v
	}
}

func (d *decoder) setStrPtr(c content, p path, name string, dst **string) {
	if v, ok := attrValue(d, c, p, name, convString); ok {
		*dst = &v
	}
}

func (d *decoder) setInt(c content, p path, name string, dst *int) {
	if v, ok := attrValue(d, c, p, name, convInt); ok {
		*dst = v
	}
}

func (d *decoder) setIntPtr(c content, p path, name string, dst **int) {
	if v, ok := attrValue(d, c, p, name, convInt); ok {
		*dst = &v
	}
}

func (d *decoder) setBool(c content, p path, name string, dst *bool) {
	if v, ok := attrValue(d, c, p, name, convBool); ok {
		*dst = v
	}
}

func (d *decoder) setBoolPtr(c content, p path, name string, dst **bool) {
	if v, ok := attrValue(d, c, p, name, convBool); ok {
		*dst = &v
	}
}

func (d *decoder) setDur(c content, p path, name string, dst *time.Duration) {
	if v, ok := attrValue(d, c, p, name, convDuration); ok {
		*dst = v
	}
}

func (d *decoder) setDurPtr(c content, p path, name string, dst **time.Duration) {
	if v, ok := attrValue(d, c, p, name, convDuration); ok {
		*dst = &v
	}
}

func (d *decoder) setStrs(c content, p path, name string, dst *[]string) {
	if v, ok := attrValue(d, c, p, name, convStrings); ok {
		*dst = v
	}
}

func convString(v cty.Value) (string, error) {
	s, err := convert.Convert(v, cty.String)
	if err != nil || !s.IsKnown() || s.IsNull() {
		return "", errors.New("a string is required")
	}
	return s.AsString(), nil
}

func convInt(v cty.Value) (int, error) {
	if checkNumberText(v) != nil {
		return 0, errors.New("a number is required")
	}
	n, err := convert.Convert(v, cty.Number)
	if err != nil || !n.IsKnown() || n.IsNull() {
		return 0, errors.New("a number is required")
	}
	bf := n.AsBigFloat()
	i, acc := bf.Int64()
	if !bf.IsInt() || acc != big.Exact || i > 1<<31-1 || i < -(1<<31) {
		return 0, fmt.Errorf("a whole number is required, got %s", bf.Text('g', 10))
	}
	return int(i), nil
}

func convBool(v cty.Value) (bool, error) {
	b, err := convert.Convert(v, cty.Bool)
	if err != nil || !b.IsKnown() || b.IsNull() {
		return false, errors.New("a bool is required")
	}
	return b.True(), nil
}

func convDuration(v cty.Value) (time.Duration, error) {
	if v.Type() == cty.Number {
		if n, err := convInt(v); err == nil && n == 0 {
			return 0, nil
		}
		return 0, durationError{"a number has no unit"}
	}
	s, err := convString(v)
	if err != nil {
		return 0, durationError{"a duration string is required"}
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		return 0, durationError{fmt.Sprintf("%q is not a duration", s)}
	}
	return dur, nil
}

func convStrings(v cty.Value) ([]string, error) {
	t := v.Type()
	if !t.IsListType() && !t.IsTupleType() && !t.IsSetType() {
		return nil, errors.New("a list of strings is required")
	}
	out := make([]string, 0, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		s, err := convString(e)
		if err != nil {
			return nil, errors.New("a list of strings is required")
		}
		out = append(out, s)
	}
	return out, nil
}

func convInts(v cty.Value) ([]int, error) {
	t := v.Type()
	if !t.IsListType() && !t.IsTupleType() && !t.IsSetType() {
		return nil, errors.New("a list of numbers is required")
	}
	out := make([]int, 0, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		n, err := convInt(e)
		if err != nil {
			return nil, fmt.Errorf("a list of whole numbers is required: %w", err)
		}
		out = append(out, n)
	}
	return out, nil
}

func convStringMap(v cty.Value) (map[string]string, error) {
	t := v.Type()
	if !t.IsMapType() && !t.IsObjectType() {
		return nil, errors.New("a map of strings is required")
	}
	out := make(map[string]string, v.LengthInt())
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		s, err := convString(e)
		if err != nil {
			return nil, fmt.Errorf("element %q: a string is required", k.AsString())
		}
		out[k.AsString()] = s
	}
	return out, nil
}

func convFreeform(v cty.Value) (map[string]any, error) {
	t := v.Type()
	if !t.IsMapType() && !t.IsObjectType() {
		return nil, errors.New("a map is required")
	}
	m, _ := toGo(v).(map[string]any)
	return m, nil
}

// strMap decodes a map-ish block or argument (env, meta) into strings.
func (d *decoder) strMap(c content, p path, name string) map[string]string {
	if c.attrs[name] != nil {
		m, _ := attrValue(d, c, p, name, convStringMap)
		return m
	}
	b := d.one(c, name)
	if b == nil {
		return nil
	}
	d.ranges[p.attr(name).key] = b.DefRange()
	if !d.labels(b) {
		return nil
	}
	for _, nb := range b.Body.Blocks {
		d.add(SeverityError, nb.TypeRange, "Unexpected block in "+name,
			fmt.Sprintf("%s takes key = value arguments only; %q is a block.", name, nb.Type))
	}
	out := map[string]string{}
	for _, a := range sortedAttrs(b.Body) {
		key := p.attr(name).key + "." + a.Name
		v, hds := d.eval(a.Expr)
		d.addHCL(key, hds)
		if hds.HasErrors() || v.IsNull() || !v.IsWhollyKnown() {
			continue
		}
		s, err := convString(v)
		if err != nil {
			d.errAt(key, a.Expr.Range(), "Incorrect attribute value type",
				fmt.Sprintf("Inappropriate value for %s key %q: %v.", name, a.Name, err))
			continue
		}
		out[a.Name] = s
	}
	return out
}

// freeform decodes a map-ish block or argument (config) keeping its nested
// structure.
func (d *decoder) freeform(c content, p path, name string) map[string]any {
	if c.attrs[name] != nil {
		m, _ := attrValue(d, c, p, name, convFreeform)
		return m
	}
	b := d.one(c, name)
	if b == nil {
		return nil
	}
	d.ranges[p.attr(name).key] = b.DefRange()
	if !d.labels(b) {
		return nil
	}
	errs := len(d.diags.Errs())
	m := d.freeformBody(b.Body)
	if len(d.diags.Errs()) > errs {
		// Validation would otherwise report what failed to evaluate
		// as missing.
		d.failed[p.attr(name).key] = true
	}
	return m
}

// freeformBody decodes any body: arguments become values, a nested block
// type used once becomes a map, one used several times a []any of maps;
// block labels nest ("a" "b" {} → {"a": {"b": {...}}}).
func (d *decoder) freeformBody(body *hclsyntax.Body) map[string]any {
	body = d.expandDynamic(body, spec{free: true})
	out := map[string]any{}
	for _, a := range sortedAttrs(body) {
		v, hds := d.eval(a.Expr)
		d.addHCL("", hds)
		if !hds.HasErrors() {
			out[a.Name] = toGo(v)
		}
	}
	byType := map[string][]any{}
	var order []*hclsyntax.Block // first block of each type
	for _, b := range body.Blocks {
		var m any = d.freeformBody(b.Body)
		for i := len(b.Labels) - 1; i >= 0; i-- {
			m = map[string]any{b.Labels[i]: m}
		}
		if _, seen := byType[b.Type]; !seen {
			order = append(order, b)
		}
		byType[b.Type] = append(byType[b.Type], m)
	}
	for _, first := range order {
		t := first.Type
		if _, dup := out[t]; dup {
			d.add(SeverityError, first.TypeRange, "Duplicate key "+t,
				fmt.Sprintf("%q is defined both as an argument and as a block.", t))
			continue
		}
		if len(byType[t]) == 1 {
			out[t] = byType[t][0]
		} else {
			out[t] = byType[t]
		}
	}
	return out
}
