package command

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// apiTarget is one of the agent's HTTP APIs as the CLI reaches it: its
// address, for an https:// address how to verify the agent and which
// client certificate to present (Nomad's -ca-cert, -client-cert,
// -client-key, -tls-server-name and -tls-skip-verify), and the ACL token
// sent with each request (-token; see secret).
type apiTarget struct {
	Addr       string
	CACert     string
	ClientCert string
	ClientKey  string
	ServerName string
	SkipVerify bool
	// Token is -token; empty: the first of tokenEnv that is set.
	Token string
	// tokenEnv are the variables read without -token, in order;
	// tokenHeader carries the token on hand-rolled requests.
	tokenEnv    []string
	tokenHeader string
}

// addressFlag adds -address (default MESHLET_ADDR, else Nomad's NOMAD_ADDR,
// else 127.0.0.1:4646),
// the TLS flags (MESHLET_CACERT... or Nomad's NOMAD_CACERT...) and -token
// (MESHLET_TOKEN, else NOMAD_TOKEN).
func addressFlag(fs *flag.FlagSet) *apiTarget {
	t := &apiTarget{tokenEnv: []string{"MESHLET_TOKEN", "NOMAD_TOKEN"}, tokenHeader: nomadTokenHeader}
	fs.StringVar(&t.Addr, "address", envOr(defaultAddr, "MESHLET_ADDR", "NOMAD_ADDR"),
		"`URL` of the meshlet agent's HTTP API, https:// with tls.http (env MESHLET_ADDR, else NOMAD_ADDR)")
	t.tlsFlags(fs, "NOMAD_")
	t.tokenFlag(fs)
	return t
}

// connectAddressFlag adds -connect-address (default MESHLET_CONNECT_ADDR,
// else Consul's CONSUL_HTTP_ADDR),
// the TLS flags (MESHLET_CACERT... or Consul's CONSUL_CACERT...) and
// -token (MESHLET_TOKEN, else CONSUL_HTTP_TOKEN).
func connectAddressFlag(fs *flag.FlagSet) *apiTarget {
	t := &apiTarget{tokenEnv: []string{"MESHLET_TOKEN", "CONSUL_HTTP_TOKEN"}, tokenHeader: consulTokenHeader}
	fs.StringVar(&t.Addr, "connect-address", envOr(defaultConnectAddr, "MESHLET_CONNECT_ADDR", "CONSUL_HTTP_ADDR"),
		"`URL` of the agent's Consul-compatible connect API, https:// with tls.http (env MESHLET_CONNECT_ADDR, else CONSUL_HTTP_ADDR)")
	t.tlsFlags(fs, "CONSUL_")
	t.tokenFlag(fs)
	return t
}

// tlsFlags adds the TLS flags; their defaults come from MESHLET_<NAME>,
// else <alt><NAME> (NOMAD_CACERT, CONSUL_CACERT...).
func (t *apiTarget) tlsFlags(fs *flag.FlagSet, alt string) {
	fs.StringVar(&t.CACert, "ca-cert", envOr("", "MESHLET_CACERT", alt+"CACERT"),
		"PEM `file` of the CA that signed the agent's certificate (env MESHLET_CACERT)")
	fs.StringVar(&t.ClientCert, "client-cert", envOr("", "MESHLET_CLIENT_CERT", alt+"CLIENT_CERT"),
		"PEM `file` of a client certificate, for an agent with verify_https_client (env MESHLET_CLIENT_CERT)")
	fs.StringVar(&t.ClientKey, "client-key", envOr("", "MESHLET_CLIENT_KEY", alt+"CLIENT_KEY"),
		"PEM `file` of -client-cert's key (env MESHLET_CLIENT_KEY)")
	fs.StringVar(&t.ServerName, "tls-server-name", envOr("", "MESHLET_TLS_SERVER_NAME", alt+"TLS_SERVER_NAME"),
		"`name` to verify the agent's certificate against instead of the address's host (env MESHLET_TLS_SERVER_NAME)")
	skip := envOr("", "MESHLET_SKIP_VERIFY", alt+"SKIP_VERIFY")
	if v, ok := os.LookupEnv("CONSUL_HTTP_SSL_VERIFY"); ok && skip == "" && alt == "CONSUL_" {
		if b, err := strconv.ParseBool(v); err == nil && !b {
			skip = "true"
		}
	}
	b, _ := strconv.ParseBool(skip)
	fs.BoolVar(&t.SkipVerify, "tls-skip-verify", b,
		"do not verify the agent's certificate (insecure; env MESHLET_SKIP_VERIFY)")
}

// envOr is the first of the environment variables that is set and not
// empty, else def.
func envOr(def string, names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return def
}

// hasTLS reports whether any TLS setting was given.
func (t *apiTarget) hasTLS() bool {
	return t.CACert != "" || t.ClientCert != "" || t.ClientKey != "" || t.ServerName != "" || t.SkipVerify
}

// URL is the address with its scheme: a bare host:port is http://, or
// https:// when a TLS setting was given.
func (t *apiTarget) URL() string {
	if strings.Contains(t.Addr, "://") {
		return t.Addr
	}
	if t.hasTLS() {
		return "https://" + t.Addr
	}
	return "http://" + t.Addr
}

// nomadClient returns the official Nomad API client for t.
func nomadClient(t *apiTarget) (*nomadapi.Client, error) {
	cfg := &nomadapi.Config{Address: t.URL(), SecretID: t.secret()}
	if t.hasTLS() {
		cfg.TLSConfig = &nomadapi.TLSConfig{CACert: t.CACert, ClientCert: t.ClientCert, ClientKey: t.ClientKey,
			TLSServerName: t.ServerName, Insecure: t.SkipVerify}
	}
	c, err := nomadapi.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create API client for %s: %s", t.Addr, oneLine(err.Error()))
	}
	return c, nil
}

// consulClient returns the official Consul API client for t.
func consulClient(t *apiTarget) (*consulapi.Client, error) {
	cfg := &consulapi.Config{Address: t.URL(), TLSConfig: t.consulTLS(), Token: t.secret()}
	c, err := consulapi.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create connect API client for %s: %s", t.Addr, oneLine(err.Error()))
	}
	return c, nil
}

func (t *apiTarget) consulTLS() consulapi.TLSConfig {
	return consulapi.TLSConfig{Address: t.ServerName, CAFile: t.CACert, CertFile: t.ClientCert, KeyFile: t.ClientKey,
		InsecureSkipVerify: t.SkipVerify}
}

// httpClient is a plain HTTP client for t, for requests the official
// clients cannot make; it sends t's ACL token as the official ones do.
func (t *apiTarget) httpClient() (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if t.hasTLS() {
		cfg, err := consulapi.SetupTLSConfig(new(t.consulTLS()))
		if err != nil {
			return nil, fmt.Errorf("failed to set up TLS for %s: %s", t.Addr, oneLine(err.Error()))
		}
		tr.TLSClientConfig = cfg
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: t.withToken(tr)}, nil
}

// tlsHint explains a TLS failure talking to the agent in one line, or
// returns "" when err is not one. envAddr names the address variable.
func tlsHint(err error, addr, envAddr string) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	switch {
	case errors.As(err, &unknown) || errors.As(err, &verify) && !errors.As(err, &host):
		return fmt.Sprintf("failed to verify the TLS certificate of the agent at %s: %s (set MESHLET_CACERT or -ca-cert to the CA that signed it)",
			addr, rootCause(err))
	case errors.As(err, &host):
		return fmt.Sprintf("the TLS certificate of the agent at %s does not name that address: %s (set MESHLET_TLS_SERVER_NAME or -tls-server-name)",
			addr, rootCause(err))
	case certificateRefused(err):
		return fmt.Sprintf("the agent at %s requires a client certificate (tls.verify_https_client): set MESHLET_CLIENT_CERT and MESHLET_CLIENT_KEY (or -client-cert and -client-key) to one signed by its CA: %s",
			addr, rootCause(err))
	case errors.As(err, &header) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Sprintf("the agent at %s does not serve TLS: use an http:// address in %s", addr, envAddr)
	case strings.Contains(err.Error(), "Client sent an HTTP request to an HTTPS server"):
		return fmt.Sprintf("the agent at %s serves HTTPS (tls.http): use an https:// address in %s, and MESHLET_CACERT", addr, envAddr)
	}
	return ""
}

// certificateRefused reports the agent's TLS alert for a missing or
// unacceptable client certificate: certificate_required (TLS 1.3) or
// bad_certificate (TLS 1.2). crypto/tls returns a remote alert as a
// *net.OpError "remote error" around an unexported type.
func certificateRefused(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return false
	}
	msg := op.Err.Error()
	return strings.HasSuffix(msg, "certificate required") || strings.HasSuffix(msg, "bad certificate")
}
