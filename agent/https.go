package agent

import (
	"crypto/tls"
	"fmt"
	"net"

	"github.com/meshlet/meshlet/internal/tlsutil"
)

// HTTPScheme is "https" when the agent's HTTP APIs serve TLS (tls.http),
// else "http".
func (c Config) HTTPScheme() string {
	if c.TLS.HTTP {
		return "https"
	}
	return "http"
}

// httpTLSFiles is tls.http's configuration (nil when tls.http is off):
// the agent's certificate for both HTTP APIs, client certificates signed
// by the CA required with verify_https_client.
func (a *Agent) httpTLSFiles() *tlsutil.Config {
	t := a.cfg.TLS
	if !t.HTTP {
		return nil
	}
	return &tlsutil.Config{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
		VerifyHTTPSClient: t.VerifyHTTPSClient, Region: a.cfg.Region}
}

// httpServerTLS is the TLS configuration of the HTTP API and the connect
// API listeners (nil without tls.http). Each call returns a new
// configuration; the certificate is re-read when its files change.
func (a *Agent) httpServerTLS() (*tls.Config, error) {
	tc := a.httpTLSFiles()
	if tc == nil {
		return nil, nil
	}
	if err := tc.Validate(); err != nil {
		return nil, fmt.Errorf("tls.http: %w", err)
	}
	cfg, err := tc.HTTPServerTLS()
	if err != nil {
		return nil, fmt.Errorf("tls.http: %w", err)
	}
	// HTTP/1.1 only, as over plain HTTP: alloc exec's websockets and the
	// streaming endpoints behave the same either way.
	cfg.NextProtos = []string{"http/1.1"}
	return cfg, nil
}

// httpDialTLS is how a server agent dials another node's HTTP API when it
// forwards a request there (nil without tls.http): the agent's own
// certificate presented (it passes verify_https_client), the node's
// certificate verified against the CA. The node's name is not checked: a
// client node's certificate names client.<region>.<domain> and its
// address is not known to be in it.
func (a *Agent) httpDialTLS() (*tls.Config, error) {
	tc := a.httpTLSFiles()
	if tc == nil {
		return nil, nil
	}
	tc.VerifyServerHostname = false
	cfg, err := tc.ClientTLS()
	if err != nil {
		return nil, fmt.Errorf("tls.http: %w", err)
	}
	cfg.NextProtos = []string{"http/1.1"}
	return cfg, nil
}

// wrapHTTPListener returns ln serving TLS with tls.http, else ln.
func (a *Agent) wrapHTTPListener(ln net.Listener) (net.Listener, error) {
	cfg, err := a.httpServerTLS()
	if err != nil || cfg == nil {
		return ln, err
	}
	return tls.NewListener(ln, cfg), nil
}
