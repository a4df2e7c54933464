package jobspecs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// ErrInvalidVariables is wrapped by ParseVariables' errors.
var ErrInvalidVariables = errors.New("invalid Variables")

// ParseVariables reads a variables file ("name = value" lines: a
// -var-file, or the Variables of PUT /v1/jobs/parse) into the values of
// ParseOptions.FileVars, each of the type its expression has (a number, a
// list...), as Nomad reads them. Values must be constants, and are
// evaluated within lim (nil means DefaultLimits): `x = [for a in [...] :
// [for b in [...] : b]]` costs the product of its loops, as in a jobspec.
func ParseVariables(filename string, src []byte, lim *Limits) (map[string]cty.Value, error) {
	if strings.TrimSpace(string(src)) == "" {
		return nil, nil
	}
	l := lim.withDefaults()
	if len(src) > l.MaxSourceBytes {
		return nil, fmt.Errorf("%w: %w", ErrInvalidVariables, limitErr("the file is %d bytes; the limit is %d bytes", len(src), l.MaxSourceBytes))
	}
	if ds := scanSource(src, filename, l); ds != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidVariables, limitErr("%s", ds.Error()))
	}
	f, hds := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if hds.HasErrors() {
		return nil, fmt.Errorf("%w: %s", ErrInvalidVariables, fromHCL(hds).Error())
	}
	attrs, hds := f.Body.JustAttributes()
	if hds.HasErrors() {
		return nil, fmt.Errorf("%w: %s", ErrInvalidVariables, fromHCL(hds).Error())
	}
	b := &budget{lim: l}
	funcs := b.internal()
	out := make(map[string]cty.Value, len(attrs))
	for name, a := range attrs {
		expr := a.Expr.(hclsyntax.Expression)
		if hds := boundExpr(expr); hds.HasErrors() {
			return nil, fmt.Errorf("%w: %s", ErrInvalidVariables, fromHCL(hds).Error())
		}
		v, hds := expr.Value(&hcl.EvalContext{Functions: funcs})
		if hds.HasErrors() {
			return nil, fmt.Errorf("%w: variable %q must be a constant: %s", ErrInvalidVariables, name, fromHCL(hds).Error())
		}
		if err := b.charge(v); err != nil {
			return nil, fmt.Errorf("%w: variable %q: %w", ErrInvalidVariables, name, err)
		}
		out[name] = v
	}
	return out, nil
}
