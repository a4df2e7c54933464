package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/meshlet/meshlet/jobspecs"
	"github.com/meshlet/meshlet/structs"
)

func (s *Server) jobRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/jobs", s.read(s.listJobs))
	mux.HandleFunc("PUT /v1/jobs", s.write(s.registerJob))
	mux.HandleFunc("POST /v1/jobs", s.write(s.registerJob))
	mux.HandleFunc("PUT /v1/jobs/parse", s.write(s.parseJob))
	mux.HandleFunc("POST /v1/jobs/parse", s.write(s.parseJob))
	mux.HandleFunc("GET /v1/job/{id}", s.read(s.getJob))
	mux.HandleFunc("PUT /v1/job/{id}", s.write(s.registerJob))
	mux.HandleFunc("POST /v1/job/{id}", s.write(s.registerJob))
	mux.HandleFunc("DELETE /v1/job/{id}", s.write(s.stopJob))
	mux.HandleFunc("GET /v1/job/{id}/allocations", s.read(s.jobAllocations))
	mux.HandleFunc("GET /v1/job/{id}/summary", s.read(s.jobSummary))
	mux.HandleFunc("GET /v1/job/{id}/evaluations", s.read(s.jobEvaluations))
	mux.HandleFunc("GET /v1/job/{id}/versions", s.read(s.jobVersions))
	mux.HandleFunc("GET /v1/job/{id}/deployment", s.read(s.jobLatestDeployment))
	mux.HandleFunc("GET /v1/job/{id}/deployments", s.read(s.jobDeployments))
}

func (s *Server) listJobs(r *http.Request) (any, error) {
	jobs, err := s.b.ListJobs(r.Context())
	if err != nil {
		return nil, fmt.Errorf("failed to list jobs: %w", err)
	}
	allocs, err := s.b.ListAllocations(r.Context())
	if err != nil {
		return nil, fmt.Errorf("failed to list allocations: %w", err)
	}
	prefix := r.URL.Query().Get("prefix")
	out := make([]*JobListStub, 0, len(jobs))
	for _, j := range jobs {
		if strings.HasPrefix(j.ID, prefix) {
			out = append(out, newJobListStub(j, allocs))
		}
	}
	return out, nil
}

// registerJob serves PUT /v1/jobs and PUT /v1/job/:id. Invalid input is
// rejected before the backend sees it; the backend validates the job itself
// (ErrInvalid) and stores nothing on error.
func (s *Server) registerJob(r *http.Request) (any, uint64, error) {
	var req JobRegisterRequest
	unsupported, err := decodeRegister(r, &req)
	if err != nil {
		return nil, 0, err
	}
	if req.Job == nil {
		return nil, 0, fmt.Errorf("%w: missing job", ErrInvalid)
	}
	if id := r.PathValue("id"); id != "" && req.Job.ID != id {
		return nil, 0, fmt.Errorf("%w: job ID %q does not match request path %q", ErrInvalid, req.Job.ID, id)
	}
	if err := checkJobBounds(req.Job); err != nil {
		return nil, 0, err
	}
	if err := s.authorizeJob(r, req.Job); err != nil {
		return nil, 0, err
	}
	res, err := s.b.RegisterJob(r.Context(), req.Job, req.RegisterOptions)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to register job: %w", err)
	}
	s.evals.remember(&Evaluation{
		ID:             res.EvalID,
		Namespace:      req.Job.Namespace,
		Priority:       req.Job.Priority,
		Type:           req.Job.Type,
		TriggeredBy:    "job-register",
		JobID:          req.Job.ID,
		JobModifyIndex: res.JobModifyIndex,
		Status:         EvalStatusComplete,
		CreateIndex:    res.EvalCreateIndex,
		ModifyIndex:    res.EvalCreateIndex,
	})
	idx := max(res.EvalCreateIndex, res.JobModifyIndex)
	return &JobRegisterResponse{
		EvalID:          res.EvalID,
		EvalCreateIndex: res.EvalCreateIndex,
		JobModifyIndex:  res.JobModifyIndex,
		Warnings:        strings.Join(append(unsupported, nonEmpty(res.Warnings)...), "\n"),
		Index:           idx,
		KnownLeader:     true,
	}, idx, nil
}

// decodeRegister decodes a registration body into req and returns the
// warnings about the blocks of its job that meshlet does not run, which
// structs.Job has no field for and decoding drops (see
// jobspecs.CheckUnsupportedJSON); a job that is periodic or parameterized
// is refused (ErrInvalid).
func decodeRegister(r *http.Request, req *JobRegisterRequest) ([]string, error) {
	var body bytes.Buffer
	r.Body = io.NopCloser(io.TeeReader(r.Body, &body))
	if err := decodeBody(r, req); err != nil {
		return nil, err
	}
	var raw struct{ Job json.RawMessage }
	if err := json.Unmarshal(body.Bytes(), &raw); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	warnings, err := jobspecs.CheckUnsupportedJSON(raw.Job)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return warnings, nil
}

// nonEmpty is []string{s}, or nothing for "".
func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func (s *Server) getJob(r *http.Request) (any, error) {
	job, err := s.b.GetJob(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, fmt.Errorf("failed to get job: %w", err)
	}
	return job, nil
}

// jobLatestDeployment serves GET /v1/job/:id/deployment: meshlet makes no
// deployments, so a job has none (null, Nomad's answer for a job never
// deployed); `nomad job status` asks for it and fails on a 404.
func (s *Server) jobLatestDeployment(r *http.Request) (any, error) {
	if _, err := s.getJob(r); err != nil {
		return nil, err
	}
	return nil, nil
}

// jobDeployments serves GET /v1/job/:id/deployments: none (see
// jobLatestDeployment).
func (s *Server) jobDeployments(r *http.Request) (any, error) {
	if _, err := s.getJob(r); err != nil {
		return nil, err
	}
	return []struct{}{}, nil
}

func (s *Server) stopJob(r *http.Request) (any, uint64, error) {
	purge, err := queryBool(r, "purge", false)
	if err != nil {
		return nil, 0, err
	}
	id := r.PathValue("id")
	job, err := s.b.GetJob(r.Context(), id)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to get job: %w", err)
	}
	evalID, err := s.b.StopJob(r.Context(), id, purge)
	if err != nil {
		return nil, 0, fmt.Errorf("failed to stop job: %w", err)
	}
	idx := s.b.Index()
	s.evals.remember(&Evaluation{
		ID:          evalID,
		Namespace:   job.Namespace,
		Priority:    job.Priority,
		Type:        job.Type,
		TriggeredBy: "job-deregister",
		JobID:       id,
		Status:      EvalStatusComplete,
		CreateIndex: idx,
		ModifyIndex: idx,
	})
	return &JobDeregisterResponse{EvalID: evalID, EvalCreateIndex: idx, JobModifyIndex: idx, Index: idx}, idx, nil
}

func (s *Server) jobAllocations(r *http.Request) (any, error) {
	allocs, err := s.b.JobAllocations(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, fmt.Errorf("failed to list job allocations: %w", err)
	}
	out := make([]*AllocListStub, 0, len(allocs))
	for _, a := range allocs {
		out = append(out, NewAllocListStub(a))
	}
	return out, nil
}

func (s *Server) jobSummary(r *http.Request) (any, error) {
	job, err := s.b.GetJob(r.Context(), r.PathValue("id"))
	if err != nil {
		return nil, fmt.Errorf("failed to get job: %w", err)
	}
	allocs, err := s.b.JobAllocations(r.Context(), job.ID)
	if err != nil {
		return nil, fmt.Errorf("failed to list job allocations: %w", err)
	}
	return NewJobSummary(job, allocs), nil
}

// parseJob serves PUT /v1/jobs/parse: HCL in, the job's JSON out.
func (s *Server) parseJob(r *http.Request) (any, uint64, error) {
	var req JobsParseRequest
	if err := decodeBody(r, &req); err != nil {
		return nil, 0, err
	}
	if strings.TrimSpace(req.JobHCL) == "" {
		return nil, 0, fmt.Errorf("%w: JobHCL is empty", ErrInvalid)
	}
	job, err := parseHCL(req.JobHCL, req.Variables, req.Canonicalize)
	if err != nil {
		return nil, 0, err
	}
	return job, 0, nil
}

// allocGroup returns the task group an allocation runs, when the allocation
// carries its job.
func allocGroup(a *structs.Allocation) *structs.TaskGroup {
	if a == nil || a.Job == nil {
		return nil
	}
	return a.Job.LookupTaskGroup(a.TaskGroup)
}

// checkJobBounds rejects, before the backend sees them, a namespace other
// than "default" (meshlet has one) and IDs too long to be
// a key (a 40 KB ID failed deep in the state store with a 500, and would
// be echoed in every validation message). The rest of the job, static
// ports included, is the backend's validation (jobspecs).
func checkJobBounds(j *structs.Job) error {
	for what, v := range map[string]string{"job ID": j.ID, "job name": j.Name, "namespace": j.Namespace} {
		if len(v) > MaxIDLength {
			return fmt.Errorf("%w: %s is %d bytes long, at most %d are allowed", ErrInvalid, what, len(v), MaxIDLength)
		}
	}
	if j.Namespace != "" && j.Namespace != defaultNamespace {
		return errNoNamespace(j.Namespace)
	}
	return nil
}
