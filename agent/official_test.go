package agent

import (
	"testing"

	"github.com/meshlet/meshlet/api/apitest"
)

// TestOfficialNomadClient drives the real agent over HTTP with the official
// github.com/hashicorp/nomad/api client: parse, register, blocking queries,
// alloc info, logs, exec over the websocket, deregister with purge.
func TestOfficialNomadClient(t *testing.T) {
	a := startAgent(t, t.TempDir())
	cleanupJob(t, &a, apitest.OfficialClientJobID)
	apitest.ExerciseOfficialClient(t, "http://"+a.HTTPAddr())
}
