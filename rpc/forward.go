package rpc

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/hashicorp/go-hclog"
)

// Forwarder relays requests from a follower to the leader's RPC port,
// reverse-proxy style: method, path, query, body and headers go as they
// came, with X-Forwarded-* set and marked with HeaderForwarded; the
// leader's answer comes back as it is. A leader that cannot be reached is
// a 503 with the no-leader code (a client tries again), never an empty
// answer. The connection to the leader authenticates with the follower's
// own certificate (role "server"), which is what the leader checks.
//
// The RPC server forwards the client nodes' writes with one; a server
// agent forwards its HTTP API's writes with another (its RPC port serves
// the API to servers). It is safe for concurrent use; one transport is
// shared by every request.
type Forwarder struct {
	logger    hclog.Logger
	transport *http.Transport
	proxy     *httputil.ReverseProxy
}

type leaderAddrKey struct{}

// NewForwarder builds a Forwarder that dials the leader with dial (the
// server's own certificate; nil dials plaintext HTTP).
func NewForwarder(dial *tls.Config, logger hclog.Logger) (*Forwarder, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	tlsCfg, err := dialTLS(dial)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	f := &Forwarder{logger: logger, transport: newTransport(tlsCfg)}
	f.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			addr, _ := pr.In.Context().Value(leaderAddrKey{}).(string)
			pr.SetURL(&url.URL{Scheme: scheme, Host: addr})
			pr.SetXForwarded()
			pr.Out.Header.Set(HeaderForwarded, "1")
		},
		Transport:    f.transport,
		ErrorHandler: f.failed,
		ErrorLog:     logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}),
	}
	return f, nil
}

// failed answers a request the leader did not answer.
func (f *Forwarder) failed(w http.ResponseWriter, r *http.Request, err error) {
	addr, _ := r.Context().Value(leaderAddrKey{}).(string)
	if r.Context().Err() != nil {
		// This server is closing, or the caller left (then nobody reads
		// this); never let an empty 200 pass for a write.
		writeError(w, http.StatusServiceUnavailable, codeShutdown, "call ended before the leader answered")
		return
	}
	f.logger.Warn("failed to forward a write to the leader", "server", addr, "path", r.URL.Path,
		"node_id", r.Header.Get(HeaderNodeID), "error", err)
	writeError(w, http.StatusServiceUnavailable, codeNoLeader, "%v: failed to reach the leader %s: %v", ErrNoLeader, addr, err)
}

// Forward relays r to the leader at leaderAddr (host:port of its RPC
// port) and writes the leader's answer to w.
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request, leaderAddr string) {
	f.logger.Debug("forwarding write to the leader", "server", leaderAddr, "path", r.URL.Path, "node_id", r.Header.Get(HeaderNodeID))
	f.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), leaderAddrKey{}, leaderAddr)))
}

// Close closes the idle connections to the leader.
func (f *Forwarder) Close() { f.transport.CloseIdleConnections() }
