package httpsrv

import (
	"net/http"
	"testing"
)

// Idle keep-alive connections and slow headers are bounded; long responses
// (blocking queries, log follow) are not.
func TestNewTimeouts(t *testing.T) {
	s := New(http.NotFoundHandler())
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
