package jobspecs

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// eval evaluates an expression, keeping runtime interpolations as text,
// and charges the result to the parse's budget.
func (d *decoder) eval(expr hclsyntax.Expression) (cty.Value, hcl.Diagnostics) {
	if s, ok := expr.(*scopedExpr); ok {
		saved := d.ctx
		d.ctx = s.ctx
		defer func() { d.ctx = saved }()
		expr = s.Expression
	}
	if inner := unwrapCharge(expr); inner != nil {
		expr = inner
	}
	v, diags := d.evalExpr(expr)
	return d.chargeResult(v, expr.Range(), diags)
}

// evalExpr evaluates an expression, keeping runtime interpolations as text.
//
// A runtime reference is any variable whose root is not known at parse time
// (var and local are; NOMAD_*, attr, meta, node, env... are not). Templates
// are rebuilt part by part so that "http://${NOMAD_UPSTREAM_ADDR_api}/x"
// survives verbatim while "${var.x}" parts are evaluated; any other
// expression that touches a runtime reference becomes "${<source text>}".
func (d *decoder) evalExpr(expr hclsyntax.Expression) (cty.Value, hcl.Diagnostics) {
	switch e := expr.(type) {
	case *hclsyntax.TemplateExpr:
		if !d.hasRuntime(e) {
			return e.Value(d.ctx)
		}
		return d.evalTemplate(e)
	case *hclsyntax.TemplateWrapExpr:
		if d.hasRuntime(e.Wrapped) {
			return cty.StringVal(d.interp(e.Wrapped)), nil
		}
		return e.Value(d.ctx)
	case *hclsyntax.TupleConsExpr:
		return d.evalTuple(e)
	case *hclsyntax.ObjectConsExpr:
		return d.evalObject(e)
	}
	if d.hasRuntime(expr) {
		return cty.StringVal(d.interp(expr)), nil
	}
	return expr.Value(d.ctx)
}

// hasRuntime reports whether expr references a variable unknown at parse time.
func (d *decoder) hasRuntime(expr hclsyntax.Expression) bool {
	for _, tr := range exprVariables(expr) {
		if d.ctx == nil || d.ctx.Variables == nil {
			return true
		}
		if _, ok := d.ctx.Variables[tr.RootName()]; !ok {
			return true
		}
	}
	return false
}

// interp renders an expression back as a runtime interpolation.
func (d *decoder) interp(expr hclsyntax.Expression) string {
	return "${" + strings.TrimSpace(string(expr.Range().SliceBytes(d.src))) + "}"
}

func (d *decoder) evalTemplate(e *hclsyntax.TemplateExpr) (cty.Value, hcl.Diagnostics) {
	var b strings.Builder
	var diags hcl.Diagnostics
	for _, part := range e.Parts {
		if lit, ok := part.(*hclsyntax.LiteralValueExpr); ok && lit.Val.Type() == cty.String && !lit.Val.IsNull() {
			b.WriteString(lit.Val.AsString())
			continue
		}
		if d.hasRuntime(part) {
			b.WriteString(d.interp(part))
			continue
		}
		v, hds := part.Value(d.ctx)
		diags = append(diags, hds...)
		if hds.HasErrors() {
			continue
		}
		if !v.IsWhollyKnown() {
			// Only a variable with an already reported error is unknown.
			return cty.DynamicVal, diags
		}
		s, err := convert.Convert(v, cty.String)
		if err != nil || s.IsNull() || !s.IsKnown() {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError, Summary: "Invalid template interpolation value",
				Detail:  "Cannot include this value in a string: a string, number or bool is required.",
				Subject: part.Range().Ptr(),
			})
			continue
		}
		b.WriteString(s.AsString())
	}
	if diags.HasErrors() {
		return cty.DynamicVal, diags
	}
	return cty.StringVal(b.String()), diags
}

func (d *decoder) evalTuple(e *hclsyntax.TupleConsExpr) (cty.Value, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	vals := make([]cty.Value, 0, len(e.Exprs))
	for _, x := range e.Exprs {
		v, hds := d.eval(x)
		diags = append(diags, hds...)
		vals = append(vals, v)
	}
	if diags.HasErrors() {
		return cty.DynamicVal, diags
	}
	return cty.TupleVal(vals), diags
}

func (d *decoder) evalObject(e *hclsyntax.ObjectConsExpr) (cty.Value, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	vals := map[string]cty.Value{}
	for _, item := range e.Items {
		k, hds := item.KeyExpr.Value(d.ctx)
		diags = append(diags, hds...)
		if hds.HasErrors() {
			continue
		}
		ks, err := convert.Convert(k, cty.String)
		if err != nil || ks.IsNull() || !ks.IsKnown() {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError, Summary: "Invalid object key",
				Detail: "A map key must be a string.", Subject: item.KeyExpr.Range().Ptr(),
			})
			continue
		}
		key := ks.AsString()
		if _, dup := vals[key]; dup {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError, Summary: "Duplicate map key",
				Detail: fmt.Sprintf("The key %q is defined more than once.", key), Subject: item.KeyExpr.Range().Ptr(),
			})
			continue
		}
		v, hds := d.eval(item.ValueExpr)
		diags = append(diags, hds...)
		vals[key] = v
	}
	if diags.HasErrors() {
		return cty.DynamicVal, diags
	}
	return cty.ObjectVal(vals), diags
}

// toGo converts a known cty value into plain Go values: string, int (whole
// numbers that fit), float64, bool, []any, map[string]any, nil.
func toGo(v cty.Value) any {
	if v.IsNull() || !v.IsKnown() {
		return nil
	}
	t := v.Type()
	switch {
	case t == cty.String:
		return v.AsString()
	case t == cty.Bool:
		return v.True()
	case t == cty.Number:
		return numberToGo(v.AsBigFloat())
	case t.IsListType() || t.IsTupleType() || t.IsSetType():
		out := make([]any, 0, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			out = append(out, toGo(e))
		}
		return out
	case t.IsMapType() || t.IsObjectType():
		out := make(map[string]any, v.LengthInt())
		for it := v.ElementIterator(); it.Next(); {
			k, e := it.Element()
			out[k.AsString()] = toGo(e)
		}
		return out
	}
	return nil
}

func numberToGo(bf *big.Float) any {
	if bf.IsInt() {
		if i, acc := bf.Int64(); acc == big.Exact && i >= minInt && i <= maxInt {
			return int(i)
		}
	}
	f, _ := bf.Float64()
	return f
}

const (
	maxInt = int64(^uint(0) >> 1)
	minInt = -maxInt - 1
)
