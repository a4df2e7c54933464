package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// Errors of PeerRole.
var (
	ErrPeerNotVerified = errors.New("peer certificate not verified")
	ErrNoRole          = errors.New("peer certificate names no meshlet role")
	ErrAmbiguousRole   = errors.New("peer certificate names more than one meshlet role")
)

// PeerRole returns the role ("server", "client" or "cli") and region of
// the peer of a verified TLS connection, read from its leaf certificate's
// DNS names <role>.<region>.<domain>. When the leaf's common name is one
// of those names (as GenerateCert makes it), that name decides; otherwise
// the DNS names must agree on one role and region.
//
// Only a verified chain counts: on a listener made by ServerTLS every
// accepted connection has one; on a dialing side it has one only with
// VerifyServerHostname (otherwise ErrPeerNotVerified).
func PeerRole(cs tls.ConnectionState) (role, region string, err error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", "", ErrPeerNotVerified
	}
	leaf := cs.VerifiedChains[0][0]
	return roleOf(leaf)
}

func roleOf(leaf *x509.Certificate) (role, region string, err error) {
	type rr struct{ role, region string }
	var found []rr
	for _, name := range leaf.DNSNames {
		ro, re, ok := parseRoleName(name)
		if !ok {
			continue
		}
		if name == leaf.Subject.CommonName {
			return ro, re, nil
		}
		if len(found) == 0 || found[0] != (rr{ro, re}) {
			found = append(found, rr{ro, re})
		}
	}
	switch len(found) {
	case 0:
		return "", "", fmt.Errorf("%w (DNS names %v)", ErrNoRole, leaf.DNSNames)
	case 1:
		return found[0].role, found[0].region, nil
	}
	return "", "", fmt.Errorf("%w (DNS names %v)", ErrAmbiguousRole, leaf.DNSNames)
}

// parseRoleName splits <role>.<region>.<domain>.
func parseRoleName(name string) (role, region string, ok bool) {
	parts := strings.SplitN(strings.ToLower(name), ".", 3)
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return "", "", false
	}
	switch parts[0] {
	case RoleServer, RoleClient, RoleCLI:
		return parts[0], parts[1], true
	}
	return "", "", false
}
