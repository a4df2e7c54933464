package rpc

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"

	"github.com/meshlet/meshlet/internal/tlsutil"
)

// Certificate roles (the first label of a certificate's DNS name).
const (
	roleServer = tlsutil.RoleServer
	roleClient = tlsutil.RoleClient
)

// serverTLS returns the listener's configuration: cfg with a verified
// client certificate required from every peer and HTTP/2 offered.
func serverTLS(cfg *tls.Config) (*tls.Config, error) {
	if cfg == nil {
		return nil, nil
	}
	c := cfg.Clone()
	if c.ClientCAs == nil {
		return nil, errors.New("failed to configure RPC TLS: no client CA (peers must present certificates signed by the cluster CA)")
	}
	if len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetConfigForClient == nil {
		return nil, errors.New("failed to configure RPC TLS: no server certificate")
	}
	c.ClientAuth = tls.RequireAndVerifyClientCert
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	c.NextProtos = []string{"h2", "http/1.1"}
	return c, nil
}

// dialTLS returns cfg for dialing servers, with a check that the server's
// verified certificate has the role "server" (so a client's certificate,
// signed by the same CA, cannot pose as a server).
func dialTLS(cfg *tls.Config) (*tls.Config, error) {
	if cfg == nil {
		return nil, nil
	}
	c := cfg.Clone()
	verify := c.VerifyConnection
	if c.InsecureSkipVerify && verify == nil {
		return nil, errors.New("failed to configure RPC TLS: the configuration verifies no server certificate")
	}
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if verify != nil {
			if err := verify(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the server presented no certificate")
		}
		// The chain was verified above (by crypto/tls or by verify).
		role, err := leafRole(cs.PeerCertificates[0])
		if err != nil {
			return fmt.Errorf("failed to read the server's role: %w", err)
		}
		if role != roleServer {
			return fmt.Errorf("the peer's certificate has role %q, not %q", role, roleServer)
		}
		return nil
	}
	return c, nil
}

// leafRole is the role a verified leaf certificate names.
func leafRole(leaf *x509.Certificate) (string, error) {
	role, _, err := tlsutil.PeerRole(tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}})
	return role, err
}

// peerRole is the role of the request's verified client certificate, or ""
// on a plaintext listener.
func peerRole(r *http.Request) (string, error) {
	if r.TLS == nil {
		return "", nil
	}
	role, _, err := tlsutil.PeerRole(*r.TLS)
	return role, err
}
