// Package httpsrv builds meshlet's HTTP API servers, the agent's Nomad API
// and the control plane's Consul-compatible connect API, with one timeout
// policy, one stop sequence, one browser guard (Protect: Host, Origin and
// Content-Type checks against CSRF and DNS rebinding) and one JSON body
// decoder (DecodeJSON).
//
// Concurrency: a Server is safe for concurrent use; Stop may be called
// once Serve was started, and more than once.
package httpsrv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

const (
	// ReadHeaderTimeout bounds how long a client may take to send a
	// request's headers.
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout closes a keep-alive connection that has carried no
	// request for that long.
	IdleTimeout = 2 * time.Minute
)

// Server is an http.Server whose requests' contexts all derive from one
// base context that Stop cancels, so that no handler (a blocking query, a
// followed log) outlives Stop.
type Server struct {
	srv    *http.Server
	base   context.Context
	cancel context.CancelFunc
}

// New returns a server for h with ReadHeaderTimeout and IdleTimeout. It has
// no ReadTimeout or WriteTimeout: blocking queries and followed logs keep a
// response open for minutes.
func New(h http.Handler) *Server {
	base, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, IdleTimeout: IdleTimeout,
		BaseContext: func(net.Listener) context.Context { return base }}
	return &Server{srv: srv, base: base, cancel: cancel}
}

// HTTP is the underlying http.Server (read its settings; do not Serve or
// Shutdown it directly).
func (s *Server) HTTP() *http.Server { return s.srv }

// Serve serves l until Stop; it returns nil after Stop.
func (s *Server) Serve(l net.Listener) error {
	if err := s.srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Stop stops accepting connections and waits up to grace for the requests
// in flight. Long-lived requests must already be told to end (the API
// servers' Close); whatever is still running when grace passes has its
// context cancelled and its connection closed, and Stop returns an error
// saying so. Every request context is cancelled when Stop returns.
func (s *Server) Stop(grace time.Duration) error {
	defer s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err == nil {
		return nil
	}
	s.cancel()
	if cerr := s.srv.Close(); cerr != nil {
		return fmt.Errorf("failed to stop HTTP server gracefully: %w; failed to close it: %w", err, cerr)
	}
	return fmt.Errorf("failed to stop HTTP server within %s (requests still running were cut): %w", grace, err)
}
