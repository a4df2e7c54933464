package api_test

import (
	"errors"
	"net/http"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api/apitest"
)

// `nomad job status <job>` asks for the job's latest deployment and fails
// on an error; meshlet has no deployments, so an existing job has none
// (null, as Nomad answers for a job never deployed) and an unknown job is
// a 404.
func TestJobDeploymentsOfficialClient(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	job := nomadapi.NewServiceJob("web", "web", "global", 50)
	job.AddTaskGroup(nomadapi.NewTaskGroup("g", 1).AddTask(nomadapi.NewTask("t", "raw_exec").SetConfig("command", "/bin/true")))
	if _, _, err := c.Jobs().Register(job, nil); err != nil {
		t.Fatalf("register: %v", err)
	}
	d, qm, err := c.Jobs().LatestDeployment("web", nil)
	if err != nil || d != nil || qm.LastIndex == 0 {
		t.Fatalf("LatestDeployment = %+v, index %v, %v; want none, an index and no error", d, qm, err)
	}
	ds, _, err := c.Jobs().Deployments("web", false, nil)
	if err != nil || len(ds) != 0 {
		t.Fatalf("Deployments = %+v, %v; want none", ds, err)
	}
	for _, call := range []func() error{
		func() error { _, _, err := c.Jobs().LatestDeployment("nope", nil); return err },
		func() error { _, _, err := c.Jobs().Deployments("nope", false, nil); return err },
	} {
		if err := call(); statusOf(err) != http.StatusNotFound {
			t.Errorf("unknown job: %v, want a 404", err)
		}
	}
}

// statusOf is the HTTP status of the official client's error (0: none).
func statusOf(err error) int {
	var ue nomadapi.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode()
	}
	return 0
}
