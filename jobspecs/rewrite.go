package jobspecs

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// boundBody rewrites every expression in body so that evaluating it is
// charged to the parse's budget: HCL builds templates, tuples, objects,
// for expressions and arithmetic itself, out of reach of the function
// table, so each place where a value can grow gets a call to an identity
// function that measures what passes through it:
//
//   - template parts, tuple elements and object values (a list of the same
//     big local a thousand times costs it a thousand times);
//   - the collection of a for expression (charged by length on every
//     evaluation, so nested loops multiply) and each value it produces;
//   - the operands of binary operators (numbers out of range, and the
//     size of what == compares) and index keys; where HCL converts them
//     to numbers, strings too long to be a number in range are refused
//     (parsing a million digits takes seconds and gigabytes).
//
// Wrappers keep the wrapped expression's range, so diagnostics and
// runtime interpolations ("${...}" kept as source text) are unchanged.
// Number literals out of range are reported here. Variable type
// constraints are left alone: they are read as syntax, not evaluated.
func boundBody(body *hclsyntax.Body) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, a := range body.Attributes {
		diags = append(diags, boundExpr(a.Expr)...)
	}
	for _, b := range body.Blocks {
		if b.Type == "variable" {
			for name, a := range b.Body.Attributes {
				if name != "type" {
					diags = append(diags, boundExpr(a.Expr)...)
				}
			}
			for _, nb := range b.Body.Blocks {
				diags = append(diags, boundBody(nb.Body)...)
			}
			continue
		}
		diags = append(diags, boundBody(b.Body)...)
	}
	return diags
}

func boundExpr(expr hclsyntax.Expression) hcl.Diagnostics {
	types := typeArgs(expr) // syntax, not evaluated: left alone
	return hclsyntax.VisitAll(expr, func(n hclsyntax.Node) hcl.Diagnostics {
		if len(types) > 0 && inAnyRange(n.Range(), types) {
			return nil
		}
		switch e := n.(type) {
		case *hclsyntax.LiteralValueExpr:
			if err := checkNumber(e.Val); err != nil {
				return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: limitSummary,
					Detail: limitDetail(err), Subject: e.SrcRange.Ptr()}}
			}
		case *hclsyntax.TemplateExpr:
			for i, p := range e.Parts {
				if _, lit := p.(*hclsyntax.LiteralValueExpr); !lit {
					e.Parts[i] = wrapCall(chargeFunc, p)
				}
			}
		case *hclsyntax.TupleConsExpr:
			for i := range e.Exprs {
				e.Exprs[i] = wrapCall(chargeFunc, e.Exprs[i])
			}
		case *hclsyntax.ObjectConsExpr:
			for i := range e.Items {
				e.Items[i].ValueExpr = wrapCall(chargeFunc, e.Items[i].ValueExpr)
			}
		case *hclsyntax.ForExpr:
			e.CollExpr = wrapCall(iterFunc, e.CollExpr)
			if e.KeyExpr != nil {
				e.KeyExpr = wrapCall(chargeFunc, e.KeyExpr)
			}
			e.ValExpr = wrapCall(chargeFunc, e.ValExpr)
		case *hclsyntax.BinaryOpExpr:
			fn := chargeFunc
			if e.Op != hclsyntax.OpEqual && e.Op != hclsyntax.OpNotEqual && e.Op != hclsyntax.OpLogicalAnd && e.Op != hclsyntax.OpLogicalOr {
				fn = numFunc // arithmetic and comparisons convert to numbers
			}
			e.LHS = wrapCall(fn, e.LHS)
			e.RHS = wrapCall(fn, e.RHS)
		case *hclsyntax.IndexExpr:
			e.Key = wrapCall(numFunc, e.Key)
		}
		return nil
	})
}

// wrapCall returns name(expr) with expr's range.
func wrapCall(name string, expr hclsyntax.Expression) hclsyntax.Expression {
	if isWrapper(expr) {
		return expr
	}
	rng := expr.Range()
	return &hclsyntax.FunctionCallExpr{Name: name, Args: []hclsyntax.Expression{expr},
		NameRange: rng, OpenParenRange: rng, CloseParenRange: rng}
}

func isWrapper(expr hclsyntax.Expression) bool {
	fc, ok := expr.(*hclsyntax.FunctionCallExpr)
	return ok && (fc.Name == chargeFunc || fc.Name == iterFunc || fc.Name == numFunc) && len(fc.Args) == 1
}

// unwrapCharge returns the expression a charge wrapper holds, or nil.
func unwrapCharge(expr hclsyntax.Expression) hclsyntax.Expression {
	if fc, ok := expr.(*hclsyntax.FunctionCallExpr); ok && fc.Name == chargeFunc && len(fc.Args) == 1 {
		return fc.Args[0]
	}
	return nil
}

// chargeResult charges a value evaluated outside HCL's function calls;
// a value over the limits becomes an error at rng.
func (d *decoder) chargeResult(v cty.Value, rng hcl.Range, diags hcl.Diagnostics) (cty.Value, hcl.Diagnostics) {
	if diags.HasErrors() {
		return v, diags
	}
	if err := d.budget.charge(v); err != nil {
		return cty.DynamicVal, append(diags, &hcl.Diagnostic{Severity: hcl.DiagError,
			Summary: limitSummary, Detail: limitDetail(err), Subject: rng.Ptr()})
	}
	return v, diags
}
