package api_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api/apitest"
)

// exerciseOfficialClient runs the official-client conformance check against
// the agent at addr. The agent tests call apitest.ExerciseOfficialClient the
// same way with a real agent's address.
func exerciseOfficialClient(t *testing.T, addr string) {
	t.Helper()
	apitest.ExerciseOfficialClient(t, addr)
}

// TestOfficialClient drives the API with github.com/hashicorp/nomad/api over
// the fake backend (swap newTestServer's backend for a real agent's to run
// it end to end).
func TestOfficialClient(t *testing.T) {
	fb := apitest.NewBackend()
	fb.AppendTaskLog(apitest.OfficialClientTask, "stdout", apitest.OfficialClientMarker+"\n")
	srv := newTestServer(t, fb)
	exerciseOfficialClient(t, srv.URL)
}

// The official client's jobs carry blocks meshlet does not run, which
// structs.Job has no field for: registering one answers the warnings the
// HCL parser gives, and a periodic or parameterized job, which would run
// at once, is refused with a 400 and not registered.
func TestOfficialClientUnsupportedBlocks(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	newJob := func(id string) *nomadapi.Job {
		job := nomadapi.NewBatchJob(id, id, "global", 50)
		task := nomadapi.NewTask("t", "raw_exec").SetConfig("command", "/bin/true")
		job.AddTaskGroup(nomadapi.NewTaskGroup("g", 1).AddTask(task))
		return job
	}
	job := newJob("warned")
	job.AddAffinity(nomadapi.NewAffinity("${node.class}", "=", "a", 50))
	job.TaskGroups[0].EphemeralDisk = &nomadapi.EphemeralDisk{SizeMB: pointer(500)}
	job.TaskGroups[0].Tasks[0].Vault = &nomadapi.Vault{Role: "r"}
	resp, _, err := c.Jobs().Register(job, nil)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	for _, w := range []string{"affinity is not supported by meshlet yet; ignored",
		`group "g": ephemeral_disk is not supported by meshlet yet; ignored`,
		`group "g": task "t": vault is not supported by meshlet yet; ignored`} {
		if !strings.Contains(resp.Warnings, w) {
			t.Errorf("warnings %q lack %q", resp.Warnings, w)
		}
	}
	if resp, _, err := c.Jobs().Register(newJob("plain"), nil); err != nil || resp.Warnings != "" {
		t.Errorf("plain job: warnings %q, err %v", resp.Warnings, err)
	}

	periodic := newJob("periodic")
	periodic.Periodic = &nomadapi.PeriodicConfig{Enabled: pointer(true), Spec: pointer("*/15 * * * *"), SpecType: pointer("cron")}
	parameterized := newJob("dispatch")
	parameterized.ParameterizedJob = &nomadapi.ParameterizedJobConfig{Payload: "required", MetaRequired: []string{"input"}}
	for _, job := range []*nomadapi.Job{periodic, parameterized} {
		_, _, err := c.Jobs().Register(job, nil)
		var ue nomadapi.UnexpectedResponseError
		if !errors.As(err, &ue) || ue.StatusCode() != http.StatusBadRequest || !strings.Contains(err.Error(), "would run at once") {
			t.Errorf("register %s: %v, want a 400 saying it would run at once", *job.ID, err)
		}
		if slices.Contains(fb.JobIDs(), *job.ID) {
			t.Errorf("job %s was registered", *job.ID)
		}
	}
}

func pointer[T any](v T) *T { return &v }
