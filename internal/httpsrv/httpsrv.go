// Package httpsrv builds meshlet's HTTP API servers, the agent's Nomad API
// and the control plane's Consul-compatible connect API, with one timeout
// policy.
package httpsrv

import (
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

// New returns a server for h with ReadHeaderTimeout and IdleTimeout. It has
// no ReadTimeout or WriteTimeout: blocking queries and followed logs keep a
// response open for minutes.
func New(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, IdleTimeout: IdleTimeout}
}
