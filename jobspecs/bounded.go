package jobspecs

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"

	"github.com/hashicorp/hcl/v2/ext/tryfunc"
)

// stdFunctions are the HCL functions a jobspec may call at parse time,
// before they are bounded.
var stdFunctions = map[string]function.Function{
	"coalesce":   stdlib.CoalesceFunc,
	"concat":     stdlib.ConcatFunc,
	"format":     stdlib.FormatFunc,
	"join":       stdlib.JoinFunc,
	"jsonencode": stdlib.JSONEncodeFunc,
	"lower":      stdlib.LowerFunc,
	"max":        stdlib.MaxFunc,
	"merge":      stdlib.MergeFunc,
	"min":        stdlib.MinFunc,
	"replace":    stdlib.ReplaceFunc,
	"split":      stdlib.SplitFunc,
	"tonumber":   stdlib.MakeToFunc(cty.Number),
	"tostring":   stdlib.MakeToFunc(cty.String),
	"trimspace":  stdlib.TrimSpaceFunc,
	"upper":      stdlib.UpperFunc,
}

// preChecks estimate a call's result before the function allocates it.
// Functions without one cannot produce much more than their arguments
// (lower and upper at most triple a string); every result is still
// checked and charged after the call.
var preChecks = map[string]func(b *budget, args []cty.Value) error{
	"format":     checkFormat,
	"tonumber":   func(_ *budget, args []cty.Value) error { return checkNumberText(args[0]) },
	"join":       checkJoin,
	"split":      checkSplit,
	"replace":    checkReplace,
	"concat":     checkCollections("concat"),
	"merge":      checkCollections("merge"),
	"jsonencode": checkJSONEncode,
}

// Names of the internal functions the AST rewrite inserts (see rewrite.go).
const (
	chargeFunc = "__meshlet_charge"
	iterFunc   = "__meshlet_iter"
	// numFunc wraps what HCL converts to a number (operands of
	// arithmetic and comparisons, index keys).
	numFunc = "__meshlet_num"
)

// functions returns the function table of one parse, every function bounded
// by b.
func (b *budget) functions() map[string]function.Function {
	out := make(map[string]function.Function, len(stdFunctions)+len(moreFunctions)+len(nomadFunctions)+12)
	for name, f := range stdFunctions {
		out[name] = b.bound(f, preChecks[name])
	}
	for name, f := range moreFunctions {
		out[name] = b.bound(f, moreChecks[name])
	}
	for name, f := range nomadFunctions {
		if check := nomadTypeChecks[name]; check != nil {
			f = b.checkedType(f, check)
		}
		out[name] = b.bound(f, nomadChecks[name])
	}
	// try and can take expressions, not values: what they evaluate is
	// bounded by the rewrite's charges like any expression.
	out["try"], out["can"] = tryfunc.TryFunc, tryfunc.CanFunc
	if b.fileDir != "" {
		maps.Copy(out, b.fsFunctions(b.fileDir))
	}
	b.addInternal(out)
	b.tables = append(b.tables, out)
	return out
}

func (b *budget) addInternal(table map[string]function.Function) {
	table[chargeFunc] = b.passThrough(b.charge)
	table[iterFunc] = b.passThrough(b.chargeIterations)
	table[numFunc] = b.passThrough(func(v cty.Value) error {
		if err := checkNumberText(v); err != nil {
			return err
		}
		return b.charge(v)
	})
}

// internal returns a table of the internal functions only (for values
// that may not call functions: -var values, variables files); empty once
// the budget is exhausted, and emptied when it runs out.
func (b *budget) internal() map[string]function.Function {
	out := map[string]function.Function{}
	if !b.exhausted {
		b.addInternal(out)
	}
	b.tables = append(b.tables, out)
	return out
}

// bound wraps f: pre (if any) runs on known arguments before f, and f's
// result is checked and charged. Number parameters take any type in the
// wrapper, so that HCL does not convert a string of a million digits
// before the wrapper sees it; f converts what passed the check.
func (b *budget) bound(f function.Function, pre func(*budget, []cty.Value) error) function.Function {
	params, varParam := f.Params(), f.VarParam()
	for i := range params {
		relaxNumber(&params[i])
	}
	if varParam != nil {
		relaxNumber(varParam)
	}
	return function.New(&function.Spec{
		Description: f.Description(),
		Params:      params,
		VarParam:    varParam,
		Type: func(args []cty.Value) (cty.Type, error) {
			args, _ = numberArgs(f, args)
			return f.ReturnTypeForValues(args)
		},
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			args, err := numberArgs(f, args)
			if err != nil {
				return cty.DynamicVal, err
			}
			if pre != nil && allKnown(args) {
				if err := pre(b, args); err != nil {
					return cty.DynamicVal, err
				}
			}
			v, err := f.Call(args)
			if err != nil {
				return v, err
			}
			if err := b.charge(v); err != nil {
				return cty.DynamicVal, err
			}
			return v, nil
		},
	})
}

// relaxNumber lets a number parameter take any type.
func relaxNumber(p *function.Parameter) {
	if p.Type == cty.Number {
		p.Type = cty.DynamicPseudoType
	}
}

// numberArgs converts the arguments of f's number parameters to numbers,
// as HCL would have before the call, refusing strings too long to be one
// (they are typed as unknown numbers, with the error).
func numberArgs(f function.Function, args []cty.Value) ([]cty.Value, error) {
	var out []cty.Value
	var firstErr error
	for i, a := range args {
		if paramType(f, i) != cty.Number || a.Type() == cty.Number {
			continue
		}
		if out == nil {
			out = slices.Clone(args)
		}
		if err := checkNumberText(a); err != nil {
			out[i] = cty.UnknownVal(cty.Number)
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		if n, err := convert.Convert(a, cty.Number); err == nil {
			out[i] = n
		}
	}
	if out == nil {
		return args, nil
	}
	return out, firstErr
}

// paramType is the type f declares for its i-th argument.
func paramType(f function.Function, i int) cty.Type {
	if params := f.Params(); i < len(params) {
		return params[i].Type
	}
	if vp := f.VarParam(); vp != nil {
		return vp.Type
	}
	return cty.NilType
}

// passThrough is an identity function that runs check on its argument.
func (b *budget) passThrough(check func(cty.Value) error) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "value", Type: cty.DynamicPseudoType,
			AllowNull: true, AllowUnknown: true, AllowDynamicType: true, AllowMarked: true}},
		Type: func(args []cty.Value) (cty.Type, error) { return args[0].Type(), nil },
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if err := check(args[0]); err != nil {
				return cty.DynamicVal, err
			}
			return args[0], nil
		},
	})
}

// chargeIterations charges a for expression's collection by its length
// (each evaluation of the for expression, so nested loops multiply).
func (b *budget) chargeIterations(v cty.Value) error {
	v, _ = v.Unmark()
	if v.IsNull() || !v.IsKnown() || !v.CanIterateElements() {
		return nil
	}
	n := v.LengthInt()
	if n > b.lim.MaxCollectionLen {
		return limitErr("A for expression over %d elements is longer than the limit of %d", n, b.lim.MaxCollectionLen)
	}
	return b.spend(int64(n) * elemCost)
}

func allKnown(args []cty.Value) bool {
	for _, a := range args {
		if !a.IsWhollyKnown() || a.IsNull() {
			return false
		}
	}
	return true
}

func (b *budget) checkString(fn string, n int64) error {
	if n > int64(b.lim.MaxStringBytes) {
		return limitErr("%s would produce a string of %d bytes or more; the limit is %d bytes", fn, n, b.lim.MaxStringBytes)
	}
	return nil
}

// checkJoin: join(sep, lists...) is the elements plus a separator
// between each two.
func checkJoin(b *budget, args []cty.Value) error {
	sep := int64(len(args[0].AsString()))
	var total, n int64
	for _, l := range args[1:] {
		for it := l.ElementIterator(); it.Next(); {
			_, e := it.Element()
			if n > 0 {
				total += sep
			}
			n++
			if s, _ := e.Unmark(); s.Type() == cty.String && !s.IsNull() {
				total += int64(len(s.AsString()))
			}
			if total > int64(b.lim.MaxStringBytes) {
				return b.checkString("join", total)
			}
		}
	}
	return nil
}

// checkSplit: split(sep, str) has one element more than sep occurs.
func checkSplit(b *budget, args []cty.Value) error {
	str, sep := args[1].AsString(), args[0].AsString()
	n := strings.Count(str, sep) + 1
	if sep == "" {
		n = utf8.RuneCountInString(str)
	}
	if n > b.lim.MaxCollectionLen {
		return limitErr("split would produce %d elements; the limit is %d", n, b.lim.MaxCollectionLen)
	}
	return nil
}

// checkReplace: replace(str, substr, replacement) of a plain substring.
func checkReplace(b *budget, args []cty.Value) error {
	s, sub, repl := args[0].AsString(), args[1].AsString(), args[2].AsString()
	n := int64(strings.Count(s, sub))
	return b.checkString("replace", int64(len(s))+n*int64(len(repl)-len(sub)))
}

// checkCollections: concat and merge produce the sum of their arguments'
// lengths.
func checkCollections(fn string) func(*budget, []cty.Value) error {
	return func(b *budget, args []cty.Value) error {
		total := 0
		for _, a := range args {
			if a.CanIterateElements() {
				total += a.LengthInt()
			}
		}
		if total > b.lim.MaxCollectionLen {
			return limitErr("%s would produce %d elements; the limit is %d", fn, total, b.lim.MaxCollectionLen)
		}
		return nil
	}
}

func checkJSONEncode(b *budget, args []cty.Value) error {
	return b.checkString("jsonencode", jsonSize(args[0], int64(b.lim.MaxStringBytes)+1))
}

// jsonSize is an upper bound of v's JSON encoding, stopping past limit.
func jsonSize(v cty.Value, limit int64) int64 {
	v, _ = v.Unmark()
	if v.IsNull() || !v.IsKnown() {
		return 4
	}
	t := v.Type()
	switch {
	case t == cty.String:
		return jsonStringSize(v.AsString())
	case t == cty.Number:
		return numberTextSize(v)
	case t == cty.Bool:
		return 5
	case v.CanIterateElements():
		total := int64(2)
		for it := v.ElementIterator(); it.Next() && total <= limit; {
			k, e := it.Element()
			if k.Type() == cty.String && (t.IsMapType() || t.IsObjectType()) {
				total += jsonStringSize(k.AsString()) + 1
			}
			total += jsonSize(e, limit-total) + 1
		}
		return total
	}
	return 4
}

// jsonStringSize is the length of s quoted as JSON: Go escapes <, > and &
// and control characters as \u00XX, invalid UTF-8 as \ufffd.
func jsonStringSize(s string) int64 {
	n := int64(2)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			n += 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 6
		case c < utf8.RuneSelf:
			n++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				n += 6
			} else {
				n += int64(size)
			}
			i += size
			continue
		}
		i++
	}
	return n
}

// numberTextSize bounds the length of a number written out in full: its
// decimal exponent plus the 512-bit mantissa's 155 digits and a sign,
// point and exponent.
func numberTextSize(v cty.Value) int64 {
	bf := v.AsBigFloat()
	if bf.IsInf() || bf.Sign() == 0 {
		return 4
	}
	e := int64(bf.MantExp(nil))
	if e < 0 {
		e = -e
	}
	return e*302/1000 + 170
}
