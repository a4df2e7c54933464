package sidecar

import (
	"crypto/sha256"
	"crypto/x509"
	"sync"
	"time"
)

// maxVerifiedChains bounds the chain verification cache.
const maxVerifiedChains = 1024

// verifyCache remembers peer chains that verified against a root pool, so
// that a connection from a peer seen before (every resumed session, and
// every new connection between the same two sidecars) costs no signature
// checks. An entry is keyed by the root pool (a new trust bundle is a new
// pool, so a rotation starts over) and the chain's bytes, and is used only
// within the verified chain's validity window. Only successes are kept.
// The SAN check is not cached: it is cheap and its matchers can change
// without the roots changing.
type verifyCache struct {
	mu sync.Mutex
	m  map[verifyKey]validity
}

type verifyKey struct {
	roots *x509.CertPool
	chain [sha256.Size]byte
}

// validity is when a verified chain is valid: all of its certificates.
type validity struct{ notBefore, notAfter time.Time }

// verify checks chain[0] against roots with chain[1:] as intermediates,
// or finds it verified already.
func (c *verifyCache) verify(roots *x509.CertPool, chain []*x509.Certificate) error {
	h := sha256.New()
	for _, cert := range chain {
		h.Write(cert.Raw)
	}
	key := verifyKey{roots: roots}
	h.Sum(key.chain[:0])
	now := time.Now()
	c.mu.Lock()
	v, ok := c.m[key]
	c.mu.Unlock()
	if ok && !now.Before(v.notBefore) && now.Before(v.notAfter) {
		return nil
	}
	inter := x509.NewCertPool()
	for _, cert := range chain[1:] {
		inter.AddCert(cert)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	chains, err := chain[0].Verify(opts)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxVerifiedChains {
		c.m = map[verifyKey]validity{}
	}
	c.m[key] = widestValidity(chains)
	return nil
}

// widestValidity is the validity window of the verified chain that stays
// valid longest (a chain is valid while all of its certificates are).
func widestValidity(chains [][]*x509.Certificate) validity {
	var best validity
	for _, ch := range chains {
		var v validity
		for i, cert := range ch {
			if i == 0 || cert.NotBefore.After(v.notBefore) {
				v.notBefore = cert.NotBefore
			}
			if i == 0 || cert.NotAfter.Before(v.notAfter) {
				v.notAfter = cert.NotAfter
			}
		}
		if v.notAfter.After(best.notAfter) {
			best = v
		}
	}
	return best
}
