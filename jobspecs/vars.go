package jobspecs

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// declaredVar is one `variable "x" {}` block.
type declaredVar struct {
	typ cty.Type // the declared type; cty.DynamicPseudoType when none
	// defType is the default's type when no type is declared (Nomad then
	// types the variable by its default), else cty.NilType.
	defType cty.Type
	value   cty.Value // cty.NilVal when unset
	block   *hclsyntax.Block
}

// hint is the type a variable's values are read as: the declared type,
// else the default's, else cty.DynamicPseudoType.
func (v *declaredVar) hint() cty.Type {
	if v.typ == cty.DynamicPseudoType && v.defType != cty.NilType {
		return v.defType
	}
	return v.typ
}

// target is the type a variable's values are converted to: the declared
// type, else the default's when it is a string, number or bool. An untyped
// variable with a structured default (or none) takes a value of the type
// it is written as: its default's exact tuple or object type would refuse
// a list of another length.
func (v *declaredVar) target() cty.Type {
	if h := v.hint(); h.IsPrimitiveType() {
		return h
	}
	return v.typ
}

// buildContext evaluates variable, variables and locals blocks into the
// evaluation context that the job block is decoded with.
func (d *decoder) buildContext(c content, filename string, opts *ParseOptions) {
	d.ctx = &hcl.EvalContext{Functions: d.budget.functions(), Variables: map[string]cty.Value{
		"var": cty.EmptyObjectVal, "local": cty.EmptyObjectVal,
	}}
	declared := map[string]*declaredVar{}
	for _, b := range c.blocks["variable"] {
		d.declareVariable(b, declared)
	}
	for _, b := range c.blocks["variables"] {
		if !d.labels(b) {
			continue
		}
		for _, a := range sortedAttrs(b.Body) {
			v := &declaredVar{typ: cty.DynamicPseudoType, value: d.constant(a.Expr)}
			if v.value != cty.NilVal {
				v.defType = v.value.Type()
			}
			d.declare(declared, a.Name, a.NameRange, v)
		}
		for _, nb := range b.Body.Blocks {
			d.add(SeverityError, nb.TypeRange, "Unexpected block in variables", "variables takes name = default arguments only.")
		}
	}
	for _, o := range layeredOverrides(opts.withDeclaredEnv(declared)) {
		v := declared[o.name]
		switch {
		case v == nil && !o.fromFile():
			d.diags = append(d.diags, Diagnostic{Severity: SeverityError, Filename: filename,
				Summary: "Undefined variable " + o.name,
				Detail:  fmt.Sprintf("A value was given for variable %q with -var, but the jobspec declares no such variable.", o.name)})
		case v == nil:
			d.diags = append(d.diags, Diagnostic{Severity: SeverityWarning, Filename: o.file,
				Summary: "Value for undeclared variable " + o.name,
				Detail:  fmt.Sprintf("The variable file sets %q, but the jobspec declares no such variable; the value is ignored.", o.name)})
		default:
			v.value = d.override(o, v, filename)
		}
	}
	vals := map[string]cty.Value{}
	for name, v := range declared {
		if v.value == cty.NilVal {
			rng := hcl.Range{Filename: filename}
			if v.block != nil {
				rng = v.block.DefRange()
			}
			d.add(SeverityError, rng, "Missing value for variable "+name,
				fmt.Sprintf("Set a default in the variable block or pass -var %s=VALUE.", name))
			v.value = cty.DynamicVal
		}
		vals[name] = v.value
	}
	d.ctx.Variables["var"] = cty.ObjectVal(vals)
	d.evalLocals(c.blocks["locals"])
}

func (d *decoder) declare(declared map[string]*declaredVar, name string, rng hcl.Range, v *declaredVar) {
	if !hclsyntax.ValidIdentifier(name) {
		d.add(SeverityError, rng, "Invalid variable name", fmt.Sprintf("%q is not a valid identifier.", name))
		return
	}
	if _, dup := declared[name]; dup {
		d.add(SeverityError, rng, "Duplicate variable "+name, fmt.Sprintf("Variable %q is declared more than once.", name))
		return
	}
	declared[name] = v
}

func (d *decoder) declareVariable(b *hclsyntax.Block, declared map[string]*declaredVar) {
	if !d.labels(b, "name") {
		return
	}
	c := d.content(b.Body, spec{attrs: []string{"type", "default", "description"}, unsupported: []string{"validation", "sensitive"}})
	v := &declaredVar{typ: cty.DynamicPseudoType, block: b}
	if a := c.attrs["type"]; a != nil {
		t, hds := typeexpr.TypeConstraint(a.Expr)
		d.addHCL("", hds)
		if !hds.HasErrors() {
			v.typ = t
		}
	}
	if a := c.attrs["default"]; a != nil {
		if def := d.constant(a.Expr); def != cty.NilVal {
			cv, err := cty.DynamicVal, checkConvertible(def, v.typ)
			if err != nil {
				d.add(SeverityError, a.Expr.Range(), limitSummary, limitDetail(err))
			} else {
				cv, err = convert.Convert(def, v.typ)
			}
			switch {
			case errors.Is(err, ErrLimitExceeded):
				v.value = cv
			case err != nil:
				d.add(SeverityError, a.Expr.Range(), "Invalid default value for variable "+b.Labels[0],
					fmt.Sprintf("The default does not match the variable's type: %v.", err))
			default:
				v.value = cv
			}
			if c.attrs["type"] == nil {
				v.defType = def.Type()
			}
		}
	}
	d.declare(declared, b.Labels[0], b.LabelRanges[0], v)
}

// constant evaluates an expression that may not reference anything.
func (d *decoder) constant(expr hclsyntax.Expression) cty.Value {
	v, hds := expr.Value(&hcl.EvalContext{Functions: d.ctx.Functions})
	v, hds = d.chargeResult(v, expr.Range(), hds)
	d.addHCL("", hds)
	if hds.HasErrors() {
		return cty.NilVal
	}
	return v
}

// override turns a value given for variable v into a value of its type
// (see declaredVar.target). A var file's value keeps the type it is
// written as; a -var or environment string is read as the variable's
// hint type: as a string for a string or untyped variable, else as an HCL
// expression (-var 'ports=[1,2]', -var n=5), falling back to the string.
func (d *decoder) override(o varOverride, v *declaredVar, filename string) cty.Value {
	val, source := o.val, fmt.Sprintf("The value in %s", o.file)
	if !o.fromFile() {
		source = fmt.Sprintf("-var %s=%q", o.name, o.raw)
		val = cty.StringVal(o.raw)
	} else if o.file != "" {
		filename = o.file
	}
	var err error
	if h := v.hint(); !o.fromFile() && h != cty.String && h != cty.DynamicPseudoType {
		var pv cty.Value
		if pv, err = d.overrideValue(o.name, o.raw); err == nil && pv != cty.NilVal {
			val = pv
		}
	}
	if err == nil {
		err = d.budget.charge(val)
	}
	typ := v.target()
	if err == nil {
		err = checkConvertible(val, typ)
	}
	if err != nil {
		d.diags = append(d.diags, Diagnostic{Severity: SeverityError, Filename: filename,
			Summary: "Invalid value for variable " + o.name, Detail: limitDetail(err)})
		return cty.DynamicVal
	}
	cv, err := convert.Convert(val, typ)
	if err != nil {
		d.diags = append(d.diags, Diagnostic{Severity: SeverityError, Filename: filename,
			Summary: "Invalid value for variable " + o.name,
			Detail:  fmt.Sprintf("%s does not match the variable's type: %v.", source, err)})
		return cty.DynamicVal
	}
	return cv
}

// overrideValue reads a -var value as a constant HCL expression, within
// the same limits as the jobspec. It returns cty.NilVal when the value
// does not parse (it is then taken as a string), and an error wrapping
// ErrLimitExceeded when it is too large.
func (d *decoder) overrideValue(name, raw string) (cty.Value, error) {
	lim := d.budget.lim
	if len(raw) > lim.MaxSourceBytes {
		return cty.NilVal, limitErr("the value is %d bytes; the limit is %d bytes", len(raw), lim.MaxSourceBytes)
	}
	if ds := scanSource([]byte(raw), "-var "+name, lim); ds != nil {
		return cty.NilVal, limitErr("%s", strings.TrimSuffix(ds[0].Detail, "."))
	}
	expr, hds := hclsyntax.ParseExpression([]byte(raw), "-var "+name, hcl.InitialPos)
	if hds.HasErrors() {
		return cty.NilVal, nil
	}
	if hds := boundExpr(expr); hds.HasErrors() {
		return cty.NilVal, limitErr("%s", strings.TrimSuffix(hds[0].Detail, "."))
	}
	// Constants only: the internal functions charge the budget, no other
	// function may be called.
	v, hds := expr.Value(&hcl.EvalContext{Functions: d.budget.internal()})
	for _, hd := range hds {
		if extra, ok := hcl.DiagnosticExtra[hclsyntax.FunctionCallDiagExtra](hd); ok && errors.Is(extra.FunctionCallError(), ErrLimitExceeded) {
			return cty.NilVal, extra.FunctionCallError()
		}
	}
	if hds.HasErrors() {
		return cty.NilVal, nil
	}
	return v, nil
}

// evalLocals evaluates locals in dependency order: each pass evaluates the
// locals whose local.* references are all known; what remains after a pass
// without progress is evaluated anyway so that its errors are reported.
func (d *decoder) evalLocals(blocks []*hclsyntax.Block) {
	var pending []*hclsyntax.Attribute
	names := map[string]bool{}
	for _, b := range blocks {
		if !d.labels(b) {
			continue
		}
		for _, nb := range b.Body.Blocks {
			d.add(SeverityError, nb.TypeRange, "Unexpected block in locals", "locals takes name = value arguments only.")
		}
		for _, a := range sortedAttrs(b.Body) {
			if names[a.Name] {
				d.add(SeverityError, a.NameRange, "Duplicate local "+a.Name, fmt.Sprintf("Local %q is defined more than once.", a.Name))
				continue
			}
			names[a.Name] = true
			pending = append(pending, a)
		}
	}
	locals := map[string]cty.Value{}
	for len(pending) > 0 {
		var next []*hclsyntax.Attribute
		for _, a := range pending {
			if !localsReady(a.Expr, locals, names) {
				next = append(next, a)
				continue
			}
			locals[a.Name] = d.evalLocal(a)
			d.ctx.Variables["local"] = cty.ObjectVal(locals)
		}
		if len(next) == len(pending) {
			for _, a := range next {
				d.add(SeverityError, a.Expr.Range(), "Circular local reference",
					fmt.Sprintf("Local %q depends on itself, directly or through other locals.", a.Name))
			}
			return
		}
		pending = next
	}
}

func (d *decoder) evalLocal(a *hclsyntax.Attribute) cty.Value {
	v, hds := d.eval(a.Expr)
	d.addHCL("", hds)
	if hds.HasErrors() {
		return cty.DynamicVal
	}
	return v
}

// localsReady reports whether every local.<name> that expr references and
// that is defined has been evaluated already.
func localsReady(expr hclsyntax.Expression, done map[string]cty.Value, defined map[string]bool) bool {
	for _, tr := range expr.Variables() {
		if tr.RootName() != "local" || len(tr) < 2 {
			continue
		}
		attr, ok := tr[1].(hcl.TraverseAttr)
		if !ok || !defined[attr.Name] {
			continue
		}
		if _, ok := done[attr.Name]; !ok {
			return false
		}
	}
	return true
}

// VarFile is one -var-file's values (see ParseVariables), named for
// diagnostics.
type VarFile struct {
	Name string
	Vars map[string]cty.Value
}

// varOverride is one value given for a variable: a -var or environment
// string (raw), or a var file's value (val, from file).
type varOverride struct {
	name, raw, file string
	val             cty.Value
}

func (o varOverride) fromFile() bool { return o.val != cty.NilVal }

// layeredOverrides are the values given for variables, weakest first
// (environment, then each var file, then -var), so that applying them in
// order leaves Nomad's precedence: -var > -var-file > env > default.
// Names are sorted within a layer for stable diagnostics.
func layeredOverrides(opts *ParseOptions) []varOverride {
	var out []varOverride
	add := func(vars map[string]string) {
		for _, name := range slices.Sorted(maps.Keys(vars)) {
			out = append(out, varOverride{name: name, raw: vars[name]})
		}
	}
	add(opts.EnvVars)
	for _, f := range opts.FileVars {
		for _, name := range slices.Sorted(maps.Keys(f.Vars)) {
			out = append(out, varOverride{name: name, val: f.Vars[name], file: f.Name})
		}
	}
	add(opts.Vars)
	return out
}

// withDeclaredEnv is opts with only the environment values of declared
// variables: NOMAD_VAR_ names the jobspec does not declare are ignored.
func (opts *ParseOptions) withDeclaredEnv(declared map[string]*declaredVar) *ParseOptions {
	if len(opts.EnvVars) == 0 {
		return opts
	}
	o := *opts
	o.EnvVars = map[string]string{}
	for name, raw := range opts.EnvVars {
		if declared[name] != nil {
			o.EnvVars[name] = raw
		}
	}
	return &o
}
