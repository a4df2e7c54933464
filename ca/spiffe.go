package ca

import (
	"errors"
	"fmt"
	"strings"

	"github.com/meshlet/meshlet/internal/lazyre"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrInvalidSpiffeID: a URI is not a meshlet service identity
	// (spiffe://<td>/ns/<ns>/dc/<dc>/svc/<service>).
	ErrInvalidSpiffeID = errors.New("invalid SPIFFE service ID")
	// ErrForeignTrustDomain: an identity or certificate belongs to another
	// trust domain than this CA's.
	ErrForeignTrustDomain = errors.New("foreign trust domain")
	// ErrInvalidService: a service name cannot be part of an identity.
	ErrInvalidService = errors.New("invalid service name")
	// ErrUntrusted: a certificate chain does not verify against the
	// trusted roots.
	ErrUntrusted = errors.New("certificate not trusted")
	// ErrClosed: the manager was closed.
	ErrClosed = errors.New("CA manager closed")
)

// DefaultNamespace is the only namespace meshlet knows.
const DefaultNamespace = "default"

// SpiffeID is a parsed service identity.
type SpiffeID struct {
	TrustDomain string
	Namespace   string
	Datacenter  string
	Service     string
}

// URI renders the identity as spiffe://<td>/ns/<ns>/dc/<dc>/svc/<service>.
func (id SpiffeID) URI() string {
	return fmt.Sprintf("spiffe://%s/ns/%s/dc/%s/svc/%s", id.TrustDomain, id.Namespace, id.Datacenter, id.Service)
}

// dnsLabelRE is what may appear as a DNS SAN label.
var dnsLabelRE = lazyre.New(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// validToken reports whether s is 1 to maxLen characters of letters,
// digits, '.', '_' and '-', starting and ending with a letter or digit
// (Consul's service name rule; also used for namespaces and datacenters).
func validToken(s string, maxLen int) bool {
	if len(s) == 0 || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if i == 0 || i == len(s)-1 || (c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// validTrustDomain accepts SPIFFE trust domain characters (lowercase
// letters, digits, '.', '-', '_').
func validTrustDomain(td string) bool {
	if len(td) == 0 || len(td) > 255 {
		return false
	}
	for i := 0; i < len(td); i++ {
		c := td[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ValidServiceName reports whether name can be used in a service identity.
func ValidServiceName(name string) bool { return validToken(name, 253) }

const spiffeScheme = "spiffe://"

// ParseSpiffeID parses a service identity URI. It does not check the trust
// domain; compare TrustDomain with Manager.TrustDomain for that. The
// scheme and trust domain are case-insensitive (returned lowercase); no
// port, user info, query, fragment or escapes are allowed.
func ParseSpiffeID(uri string) (SpiffeID, error) {
	if len(uri) < len(spiffeScheme) || !strings.EqualFold(uri[:len(spiffeScheme)], spiffeScheme) {
		return SpiffeID{}, fmt.Errorf("%w: %q does not start with spiffe://", ErrInvalidSpiffeID, uri)
	}
	rest := uri[len(spiffeScheme):]
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return SpiffeID{}, fmt.Errorf("%w: %q has no path", ErrInvalidSpiffeID, uri)
	}
	td := strings.ToLower(rest[:slash])
	if !validTrustDomain(td) {
		return SpiffeID{}, fmt.Errorf("%w: %q has an invalid trust domain", ErrInvalidSpiffeID, uri)
	}
	parts := strings.Split(rest[slash+1:], "/")
	if len(parts) != 6 || parts[0] != "ns" || parts[2] != "dc" || parts[4] != "svc" {
		return SpiffeID{}, fmt.Errorf("%w: %q is not of the form spiffe://<td>/ns/<ns>/dc/<dc>/svc/<service>", ErrInvalidSpiffeID, uri)
	}
	id := SpiffeID{TrustDomain: td, Namespace: parts[1], Datacenter: parts[3], Service: parts[5]}
	if !validToken(id.Namespace, 63) || !validToken(id.Datacenter, 63) || !ValidServiceName(id.Service) {
		return SpiffeID{}, fmt.Errorf("%w: %q has an invalid namespace, datacenter or service", ErrInvalidSpiffeID, uri)
	}
	return id, nil
}
