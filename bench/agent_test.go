package bench

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestAgentNomadReusesConnection polls a stand-in agent API the way
// Running and waitReady do: every poll must reuse the one keep-alive
// connection, not leave a new idle one open in the agent.
func TestAgentNomadReusesConnection(t *testing.T) {
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Nomad-Index", "1")
		w.Header().Set("X-Nomad-LastContact", "0")
		_, _ = w.Write([]byte(`[{"ID":"0123456789abcdef","ClientStatus":"running","DesiredStatus":"run"}]`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	a := &Agent{HTTPAddr: srv.URL}
	const polls = 20
	for i := 0; i < polls; i++ {
		allocs, _, err := a.Nomad().Jobs().Allocations("bench-many", false, nil)
		if err != nil || len(allocs) != 1 {
			t.Fatalf("poll %d: %d allocations, %v", i, len(allocs), err)
		}
	}
	a.Nomad().Close()
	if n := opened.Load(); n != 1 {
		t.Errorf("%d polls opened %d connections to the agent, want 1", polls, n)
	}
}
