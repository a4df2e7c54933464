package framework

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Nomad hands every caller the same client, so polls reuse one keep-alive
// connection instead of leaving one idle connection each in the agent.
func TestNomadClientIsShared(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Nomad-Index", "1")
		_, _ = w.Write([]byte("[]"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	a := &Agent{t: t, HTTPAddr: srv.URL}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { _ = a.Nomad() })
	}
	wg.Wait()
	first := a.Nomad()
	for range 10 {
		if a.Nomad() != first {
			t.Fatal("Nomad returned a new client")
		}
		if _, _, err := a.Nomad().Jobs().List(nil); err != nil {
			t.Fatal(err)
		}
	}
	a.Nomad().Close()
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 10 sequential polls, want 1", n)
	}
}
