package jobspecs

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// typeArgs returns the type-expression arguments in expr: the second
// argument of convert(value, type), which HCL reads as syntax (string,
// list(number), object({...})), not as an expression. Its keywords are
// no variables, and the rewrite must not wrap what is inside it.
func typeArgs(expr hclsyntax.Expression) []hclsyntax.Expression {
	var out []hclsyntax.Expression
	hclsyntax.VisitAll(expr, func(n hclsyntax.Node) hcl.Diagnostics {
		if fc, ok := n.(*hclsyntax.FunctionCallExpr); ok && fc.Name == "convert" && len(fc.Args) == 2 {
			out = append(out, fc.Args[1])
		}
		return nil
	})
	return out
}

// exprVariables is expr.Variables() without the type keywords of its
// type-expression arguments.
func exprVariables(expr hclsyntax.Expression) []hcl.Traversal {
	vars := expr.Variables()
	types := typeArgs(expr)
	if len(types) == 0 {
		return vars
	}
	out := vars[:0:0]
	for _, tr := range vars {
		if !inAnyRange(tr.SourceRange(), types) {
			out = append(out, tr)
		}
	}
	return out
}

func inAnyRange(r hcl.Range, exprs []hclsyntax.Expression) bool {
	for _, e := range exprs {
		er := e.Range()
		if r.Filename == er.Filename && r.Start.Byte >= er.Start.Byte && r.End.Byte <= er.End.Byte {
			return true
		}
	}
	return false
}
