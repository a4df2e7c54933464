package api_test

import (
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api/apitest"
)

// The official client's EnforceRegister (`job run -check-index`) and
// RegisterOpts PreserveCounts reach the backend: a failed check answers
// Nomad's "Enforcing job modify index" error, which the CLI looks for,
// and changes nothing.
func TestOfficialClientEnforceIndex(t *testing.T) {
	srv := newTestServer(t, apitest.NewBackend())
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	job, err := c.Jobs().ParseHCL(checksJobHCL, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Jobs().EnforceRegister(job, 0, nil); err != nil {
		t.Fatalf("EnforceRegister(0) of a new job: %v", err)
	}
	stored, _, err := c.Jobs().Info(*job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	count := *job.TaskGroups[0].Count
	*job.TaskGroups[0].Count = count + 3
	for _, index := range []uint64{0, *stored.JobModifyIndex + 1} {
		if _, _, err := c.Jobs().EnforceRegister(job, index, nil); err == nil || !strings.Contains(err.Error(), nomadapi.RegisterEnforceIndexErrPrefix) {
			t.Fatalf("EnforceRegister(%d) of an existing job = %v, want %q", index, err, nomadapi.RegisterEnforceIndexErrPrefix)
		}
	}
	if got, _, _ := c.Jobs().Info(*job.ID, nil); *got.TaskGroups[0].Count != count || *got.JobModifyIndex != *stored.JobModifyIndex {
		t.Fatalf("a refused EnforceRegister changed the job: count %d, index %d", *got.TaskGroups[0].Count, *got.JobModifyIndex)
	}
	if _, _, err := c.Jobs().RegisterOpts(job, &nomadapi.RegisterOptions{EnforceIndex: true, ModifyIndex: *stored.JobModifyIndex,
		PreserveCounts: true}, nil); err != nil {
		t.Fatalf("EnforceRegister at the current index: %v", err)
	}
	if got, _, _ := c.Jobs().Info(*job.ID, nil); *got.TaskGroups[0].Count != count {
		t.Fatalf("PreserveCounts: count %d, want %d", *got.TaskGroups[0].Count, count)
	}
}
