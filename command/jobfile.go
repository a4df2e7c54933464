package command

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/meshlet/meshlet/jobspecs"
	"github.com/meshlet/meshlet/structs"
)

// varsFlag collects repeated -var key=value flags.
type varsFlag map[string]string

func (v varsFlag) String() string {
	parts := make([]string, 0, len(v))
	for k, val := range v {
		parts = append(parts, k+"="+val)
	}
	return strings.Join(parts, ",")
}

func (v varsFlag) Set(s string) error {
	k, val, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("-var must be key=value, got %q", s)
	}
	v[strings.TrimSpace(k)] = val
	return nil
}

// parsedJob is a locally parsed jobspec.
type parsedJob struct {
	job      *structs.Job
	errors   int
	warnings int
}

// parseJobFile parses a jobspec locally, printing every diagnostic (one
// "file:line:col: severity: ..." line each) to w. job is nil when the
// jobspec has errors. Count and size are the server's to check (its
// job_max_count and job_max_size are not known here).
func parseJobFile(path string, opts *jobspecs.ParseOptions, w io.Writer) parsedJob {
	o := *opts
	o.Validate = jobspecs.Unbounded()
	job, diags := jobspecs.ParseFile(path, &o)
	for _, d := range diags {
		fmt.Fprintln(w, escapeUnprintable(d.String()))
	}
	res := parsedJob{job: job, errors: len(diags.Errs()), warnings: len(diags.Warnings())}
	if res.errors == 0 && job == nil {
		fmt.Fprintf(w, "%s: error: jobspec defines no job\n", path)
		res.errors = 1
	}
	if res.errors > 0 {
		res.job = nil
	}
	return res
}

// toAPIJob converts a parsed job to the official client's type. Field
// names match by design (structs follows Nomad's /v1 JSON).
func toAPIJob(job *structs.Job) (*nomadapi.Job, error) {
	raw, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("failed to encode job: %w", err)
	}
	var out nomadapi.Job
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("failed to convert job: %w", err)
	}
	return &out, nil
}
