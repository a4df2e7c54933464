package ca

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/internal/lazyre"
)

// ErrInvalidDNSName: a DNS SAN asked for a leaf is not a DNS name (a
// wildcard may only be the whole leftmost label).
var ErrInvalidDNSName = errors.New("invalid DNS name")

// MaxLeafDNSNames bounds the extra DNS SANs of one leaf.
const MaxLeafDNSNames = 64

// dnsNameRE is a DNS name with an optional leading "*." label.
var dnsNameRE = lazyre.New(`^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// normalizeDNSNames lower-cases, checks, sorts and de-duplicates names.
func normalizeDNSNames(names []string) ([]string, error) {
	if len(names) > MaxLeafDNSNames {
		return nil, fmt.Errorf("%w: %d names, at most %d", ErrInvalidDNSName, len(names), MaxLeafDNSNames)
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		l := strings.ToLower(strings.TrimSuffix(n, "."))
		if len(l) > 253 || !dnsNameRE.MatchString(l) {
			return nil, fmt.Errorf("%w: %q", ErrInvalidDNSName, n)
		}
		out = append(out, l)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// SetLeafDNS sets the extra DNS SANs of service's leaf (an ingress
// gateway's listener names, as Consul adds them to the gateway's leaf);
// nil or empty removes them, as does the release of the service's cached
// leaf (its last hold gone). When they change and the leaf is already
// issued, it is re-issued at once (subscribers hear EventLeafRenewed); the
// old leaf stays served until then. It reports whether they changed. In
// remote mode the names go into the CSR the servers sign.
func (m *Manager) SetLeafDNS(service string, names []string) (bool, error) {
	if !ValidServiceName(service) {
		return false, fmt.Errorf("%w: %q", ErrInvalidService, service)
	}
	norm, err := normalizeDNSNames(names)
	if err != nil {
		return false, fmt.Errorf("failed to set DNS SANs of %s: %w", service, err)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false, ErrClosed
	}
	if slices.Equal(m.leafDNS[service], norm) {
		m.mu.Unlock()
		return false, nil
	}
	if m.leafDNS == nil {
		m.leafDNS = map[string][]string{}
	}
	if len(norm) == 0 {
		delete(m.leafDNS, service)
	} else {
		m.leafDNS[service] = norm
	}
	e := m.leaves[service]
	if e != nil && e.leaf != nil {
		// Due now: the renewal loop (kicked) issues it again; the old
		// leaf is served until then. A signing already under way with
		// the old names is re-done when it is stored (store).
		e.renewAt = m.now()
	}
	m.mu.Unlock()
	if e != nil {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
	return true, nil
}

// leafDNSFor returns the extra DNS SANs set for service.
func (m *Manager) leafDNSFor(service string) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.leafDNS[service])
}

// csrDNSNames checks the DNS SANs a CSR asks for (a remote-mode CA's
// SetLeafDNS names).
func csrDNSNames(names []string) ([]string, error) {
	out, err := normalizeDNSNames(names)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	return out, nil
}
