package api

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/meshlet/meshlet/jobspecs"
	"github.com/meshlet/meshlet/structs"
)

// parseHCL parses a jobspec for PUT /v1/jobs/parse. vars is the content of
// a variables file ("name = value" lines). Diagnostics with errors become
// one ErrInvalid line; warnings are dropped (the CLI parses locally and
// prints them). jobspecs.Parse always canonicalizes.
func parseHCL(src, vars string, canonicalize bool) (*structs.Job, error) {
	overrides, err := parseVariables(vars)
	if err != nil {
		return nil, err
	}
	job, diags := jobspecs.Parse("job.hcl", []byte(src), &jobspecs.ParseOptions{Vars: overrides})
	if diags.HasErrors() {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, oneLine(diags.Error()))
	}
	if job == nil {
		return nil, fmt.Errorf("%w: jobspec defines no job", ErrInvalid)
	}
	if canonicalize {
		jobspecs.Canonicalize(job)
	}
	return job, nil
}

// parseVariables turns a variables file into -var style overrides: string
// values unquoted, other constants as written.
func parseVariables(src string) (map[string]string, error) {
	if strings.TrimSpace(src) == "" {
		return nil, nil
	}
	f, diags := hclsyntax.ParseConfig([]byte(src), "variables.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("%w: invalid Variables: %s", ErrInvalid, oneLine(diags.Error()))
	}
	attrs, diags := f.Body.JustAttributes()
	if diags.HasErrors() {
		return nil, fmt.Errorf("%w: invalid Variables: %s", ErrInvalid, oneLine(diags.Error()))
	}
	out := make(map[string]string, len(attrs))
	for name, a := range attrs {
		v, d := a.Expr.Value(nil)
		if d.HasErrors() {
			return nil, fmt.Errorf("%w: variable %q must be a constant: %s", ErrInvalid, name, oneLine(d.Error()))
		}
		if v.Type() == cty.String && v.IsKnown() && !v.IsNull() {
			out[name] = v.AsString()
			continue
		}
		out[name] = string(a.Expr.Range().SliceBytes([]byte(src)))
	}
	return out, nil
}
