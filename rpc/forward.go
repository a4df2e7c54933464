package rpc

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/hashicorp/go-hclog"
)

// forwarder relays writes from a follower to the leader, reverse-proxy
// style: method, path, query, body and the node headers go as they came,
// marked with HeaderForwarded; the leader's answer comes back as it is.
// The connection to the leader authenticates with the follower's own
// certificate (role "server"), which is what the leader checks.
type forwarder struct {
	logger    hclog.Logger
	transport *http.Transport
	proxy     *httputil.ReverseProxy
}

type leaderAddrKey struct{}

func newForwarder(dial *tls.Config, logger hclog.Logger) (*forwarder, error) {
	tlsCfg, err := dialTLS(dial)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	f := &forwarder{logger: logger, transport: newTransport(tlsCfg)}
	f.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			addr, _ := pr.In.Context().Value(leaderAddrKey{}).(string)
			pr.SetURL(&url.URL{Scheme: scheme, Host: addr})
			pr.SetXForwarded()
			pr.Out.Header.Set(HeaderForwarded, "1")
		},
		Transport: f.transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			addr, _ := r.Context().Value(leaderAddrKey{}).(string)
			if r.Context().Err() != nil {
				// This server is closing, or the caller left (then nobody
				// reads this); never let an empty 200 pass for a write.
				writeError(w, http.StatusServiceUnavailable, codeShutdown, "call ended before the leader answered")
				return
			}
			f.logger.Warn("failed to forward a write to the leader", "server", addr, "path", r.URL.Path,
				"node_id", r.Header.Get(HeaderNodeID), "error", err)
			writeError(w, http.StatusServiceUnavailable, codeNoLeader, "%v: failed to reach the leader %s: %v", ErrNoLeader, addr, err)
		},
		ErrorLog: logger.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}),
	}
	return f, nil
}

// forward relays r to the leader at addr.
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, addr string) {
	f.logger.Debug("forwarding write to the leader", "server", addr, "path", r.URL.Path, "node_id", r.Header.Get(HeaderNodeID))
	f.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), leaderAddrKey{}, addr)))
}

func (f *forwarder) close() { f.transport.CloseIdleConnections() }
