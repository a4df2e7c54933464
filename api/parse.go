package api

import (
	"fmt"

	"github.com/meshlet/meshlet/jobspecs"
	"github.com/meshlet/meshlet/structs"
)

// parseHCL parses a jobspec for PUT /v1/jobs/parse. vars is the content of
// a variables file ("name = value" lines). Diagnostics with errors become
// one ErrInvalid line; warnings are dropped (the CLI parses locally and
// prints them). jobspecs.Parse always canonicalizes. Count and size are
// checked at submission, against the server's configured bounds.
func parseHCL(src, vars string, canonicalize bool) (*structs.Job, error) {
	overrides, err := parseVariables(vars)
	if err != nil {
		return nil, err
	}
	job, diags := jobspecs.Parse("job.hcl", []byte(src), &jobspecs.ParseOptions{Vars: overrides, Validate: jobspecs.Unbounded()})
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

// parseVariables turns a variables file into -var style overrides, with
// the same bounds on what evaluating it may cost as a jobspec has.
func parseVariables(src string) (map[string]string, error) {
	out, err := jobspecs.ParseVariables("variables.hcl", []byte(src), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, oneLine(err.Error()))
	}
	return out, nil
}
