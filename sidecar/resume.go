package sidecar

import "crypto/tls"

// TLS session resumption between sidecars.
//
// A new upstream connection offers the endpoint's last session ticket
// (TLS 1.3 PSK resumption: no certificate exchange and no signatures, the
// bulk of a handshake's CPU on both sides). Listeners issue tickets, which
// crypto/tls does by default with keys of its own per tls.Config. What a
// resumed connection does not skip:
//   - the SPIFFE peer check: both sides verify the peer in VerifyConnection,
//     which crypto/tls also calls on a resumed handshake with the peer's
//     certificates from the ticket; secretStore.verifyPeer checks them
//     against the current roots and SAN matchers, so a rotated trust bundle
//     or a changed SAN rule refuses a resumed session as it would a full
//     handshake;
//   - authorization: the listener's ext_authz runs per connection on the
//     identity in the connection state, resumed or not.
//
// The tickets are kept per endpoint (hostStats.sessions): crypto/tls keys
// its cache by server name, which is the cluster's SNI and so the same for
// every endpoint, and another endpoint's ticket could never resume.

// sessionResumption turns the upstream session cache on (a variable so a
// benchmark can measure the handshake without it).
var sessionResumption = true

// tlsConfigFor is the cluster's client configuration with h's session
// cache (a copy per connection: dials are not the hot path).
func tlsConfigFor(base *tls.Config, h *host) *tls.Config {
	if !sessionResumption || h.stats == nil || h.stats.sessions == nil {
		return base
	}
	c := base.Clone()
	c.ClientSessionCache = h.stats.sessions
	return c
}
