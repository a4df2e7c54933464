package api

import (
	"fmt"

	"github.com/zclconf/go-cty/cty"

	"github.com/meshlet/meshlet/jobspecs"
	"github.com/meshlet/meshlet/structs"
)

// parseHCL parses a jobspec for PUT /v1/jobs/parse. vars is the content of
// a variables file ("name = value" lines), read as Nomad reads it: as a
// -var-file, so a value for a variable the jobspec does not declare is a
// warning, not an error. Diagnostics with errors become one ErrInvalid
// line; warnings are dropped (the CLI parses locally and prints them).
// Without canonicalize the job is returned as written, without defaults.
// Count and size are checked at submission, against the server's
// configured bounds.
func parseHCL(src, vars string, canonicalize bool) (*structs.Job, error) {
	fileVars, err := parseVariables(vars)
	if err != nil {
		return nil, err
	}
	job, diags := jobspecs.Parse("job.hcl", []byte(src), &jobspecs.ParseOptions{
		FileVars: []jobspecs.VarFile{{Name: "variables.hcl", Vars: fileVars}}, Validate: jobspecs.Unbounded(),
		SkipCanonicalize: !canonicalize})
	if diags.HasErrors() {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, oneLine(diags.Error()))
	}
	if job == nil {
		return nil, fmt.Errorf("%w: jobspec defines no job", ErrInvalid)
	}
	return job, nil
}

// parseVariables reads a variables file's values, with the same bounds on
// what evaluating it may cost as a jobspec has.
func parseVariables(src string) (map[string]cty.Value, error) {
	out, err := jobspecs.ParseVariables("variables.hcl", []byte(src), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, oneLine(err.Error()))
	}
	return out, nil
}
