package httpsrv

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// Idle keep-alive connections and slow headers are bounded; long responses
// (blocking queries, log follow) are not.
func TestNewTimeouts(t *testing.T) {
	s := New(http.NotFoundHandler()).HTTP()
	if s.ReadHeaderTimeout != ReadHeaderTimeout || s.IdleTimeout != IdleTimeout || s.IdleTimeout <= 0 || s.ReadHeaderTimeout <= 0 {
		t.Fatalf("read header timeout %v, idle timeout %v", s.ReadHeaderTimeout, s.IdleTimeout)
	}
	if s.ReadTimeout != 0 || s.WriteTimeout != 0 {
		t.Fatalf("read timeout %v, write timeout %v: would cut blocking queries and log follow", s.ReadTimeout, s.WriteTimeout)
	}
	if s.Handler == nil {
		t.Fatal("no handler")
	}
}

// A handler that ignores everything but its request context (a blocking
// query that was never told to end) is cut at the grace: Stop returns an
// error saying so, the handler's context is cancelled and its goroutine
// ends.
func TestStopCutsRequestsAfterGrace(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	s := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		close(started)
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	base := runtime.NumGoroutine()
	go func() {
		resp, err := http.Get("http://" + l.Addr().String() + "/v1/wait")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	if err := s.Stop(50 * time.Millisecond); err == nil {
		t.Fatal("Stop returned nil while a request outlived the grace")
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the request's handler still runs after Stop")
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve after Stop: %v", err)
	}
	waitGoroutines(t, base)
	if err := s.Stop(time.Second); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// waitGoroutines waits until the goroutine count is back to at most base.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for runtime.NumGoroutine() > base {
		if ctx.Err() != nil {
			t.Fatalf("%d goroutines, %d before the request", runtime.NumGoroutine(), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
