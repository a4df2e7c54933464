package api_test

import (
	"testing"

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
