package ca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Sentinel errors of remote mode; test with errors.Is.
var (
	// ErrNoRoots: a remote-mode CA has not received the cluster's roots
	// (SetRoots) yet.
	ErrNoRoots = errors.New("CA roots not known yet")
	// ErrRemote: the operation needs the root keys, which a remote-mode CA
	// does not hold (the servers rotate and sign).
	ErrRemote = errors.New("CA is in remote mode")
)

// remoteStaleRetry is how long a remote-mode leaf signed by a root that is
// not the active one is kept before asking again.
const remoteStaleRetry = 5 * time.Second

// SetRoots installs the cluster's public roots in a remote-mode Manager.
// Every RootCertPEM must parse as a CA certificate of r.TrustDomain
// ("<cluster-uuid>.meshlet") whose ID matches, and exactly one root must be
// Active. When the set of roots or the active root changed, subscribers
// hear EventRootsChanged and the cached leaves are re-issued. The trust
// domain cannot change once set.
func (m *Manager) SetRoots(r Roots) error {
	if !m.remote() {
		return errors.New("failed to set CA roots: only a remote-mode CA (Config.Signer) takes its roots from outside")
	}
	clusterID, roots, err := parseRemoteRoots(r)
	if err != nil {
		return fmt.Errorf("failed to set CA roots: %w", err)
	}
	if m.cfg.ClusterID != "" && m.cfg.ClusterID != clusterID {
		return fmt.Errorf("failed to set CA roots: cluster ID %s differs from the configured %s", clusterID, m.cfg.ClusterID)
	}
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	if m.trustDomain != "" && m.trustDomain != r.TrustDomain {
		td := m.trustDomain
		m.mu.Unlock()
		return fmt.Errorf("failed to set CA roots: %w: trust domain %s is not %s", ErrForeignTrustDomain, r.TrustDomain, td)
	}
	changed := rootsDiffer(m.roots, roots)
	m.roots, m.trustDomain, m.clusterID = roots, r.TrustDomain, clusterID
	var entries []*leafEntry
	if changed {
		// The servers' indexes (the roots' ModifyIndex) stay below it.
		m.index = max(m.index, maxModifyIndex(roots)) + 1
		m.rootsIndex = m.index
		m.rebuildPoolLocked()
		entries = m.entriesLocked()
	}
	m.mu.Unlock()
	if changed {
		m.logger.Info("received CA roots", "roots", len(roots), "active_root_id", activeID(roots), "leaves", len(entries))
		m.rootsChanged(entries)
	}
	return nil
}

// maxModifyIndex is the highest ModifyIndex of roots.
func maxModifyIndex(roots []*rootCA) uint64 {
	var idx uint64
	for _, r := range roots {
		idx = max(idx, r.ModifyIndex)
	}
	return idx
}

// parseRemoteRoots checks r and parses its roots (without keys).
func parseRemoteRoots(r Roots) (clusterID string, roots []*rootCA, err error) {
	id, ok := clusterIDOf(r.TrustDomain)
	if _, perr := uuid.Parse(id); !ok || perr != nil || strings.ToLower(id) != id {
		return "", nil, fmt.Errorf("invalid trust domain %q: want <cluster-uuid>.meshlet", r.TrustDomain)
	}
	active := 0
	for _, root := range r.Roots {
		rc, err := parseRemoteRoot(root, r.TrustDomain)
		if err != nil {
			return "", nil, err
		}
		if rc.Active {
			active++
			if r.ActiveRootID != "" && r.ActiveRootID != rc.ID {
				return "", nil, fmt.Errorf("active root %s is not ActiveRootID %s", rc.ID, r.ActiveRootID)
			}
		}
		roots = append(roots, rc)
	}
	if active != 1 {
		return "", nil, fmt.Errorf("%d active roots, want 1", active)
	}
	return id, roots, nil
}

func parseRemoteRoot(root Root, trustDomain string) (*rootCA, error) {
	rc, err := parseRoot(root)
	if err != nil {
		return nil, err
	}
	if !rc.cert.IsCA {
		return nil, fmt.Errorf("root %s is not a CA certificate", root.ID)
	}
	if id := rootInfo(rc.cert).ID; id != root.ID {
		return nil, fmt.Errorf("root %s: certificate has ID %s", root.ID, id)
	}
	if uris := rc.cert.URIs; len(uris) != 1 || uris[0].String() != "spiffe://"+trustDomain {
		return nil, fmt.Errorf("root %s: %w: not a root of %s", root.ID, ErrForeignTrustDomain, trustDomain)
	}
	return rc, nil
}

// signRemote generates service's key, has Config.Signer sign a CSR for it
// and checks the answer before the leaf may be cached.
func (m *Manager) signRemote(ctx context.Context, service string, dns []string) (*signed, error) {
	td := m.TrustDomain()
	if td == "" {
		return nil, fmt.Errorf("failed to issue leaf for %s: %w", service, ErrNoRoots)
	}
	id := m.spiffeID(td, service)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate leaf key: %w", err)
	}
	csrPEM, err := makeCSR(key, service, id, dns)
	if err != nil {
		return nil, err
	}
	now := m.now()
	sc, err := m.cfg.Signer.SignCSR(ctx, service, csrPEM)
	if err != nil {
		return nil, fmt.Errorf("failed to issue leaf for %s: %w", service, err)
	}
	is, err := m.checkSigned(sc, &key.PublicKey, id)
	if err != nil {
		return nil, fmt.Errorf("failed to issue leaf for %s: %w", service, err)
	}
	is.issuedAt = now
	m.signedTTL.Store(int64(is.chain[0].NotAfter.Sub(is.chain[0].NotBefore) - clockSkew))
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return newSigned(service, is, keyPEM, dns), nil
}

// makeCSR builds a PEM CSR for key carrying id as its URI SAN and dns as
// its DNS SANs.
func makeCSR(key *ecdsa.PrivateKey, service, id string, dns []string) (string, error) {
	uri, err := url.Parse(id)
	if err != nil {
		return "", fmt.Errorf("failed to build SPIFFE ID: %w", err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: service}, URIs: []*url.URL{uri}, DNSNames: dns}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return "", fmt.Errorf("failed to create CSR for %s: %w", service, err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), nil
}

// checkSigned checks a signer's answer: the leaf carries pub and exactly
// the identity id, its chain verifies against the current roots, and it
// was signed directly by one of them (its ID is the leaf's root).
func (m *Manager) checkSigned(sc SignedCert, pub *ecdsa.PublicKey, id string) (*issued, error) {
	chain, err := parseChainPEM(sc.CertChainPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	leaf := chain[0]
	if !pub.Equal(leaf.PublicKey) {
		return nil, fmt.Errorf("%w: signed certificate does not carry the local key", ErrUntrusted)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id {
		return nil, fmt.Errorf("%w: signed certificate has URI SANs %v, want %s", ErrUntrusted, leaf.URIs, id)
	}
	m.mu.RLock()
	pool, roots := m.pool, m.roots
	m.mu.RUnlock()
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	// A leaf that starts later than this node's now was signed by a server
	// whose clock is ahead by more than NotBefore's backdating: peers with
	// the servers' time accept it, so its chain is checked as of its start
	// instead of refusing every leaf. An expired one is still refused.
	at := m.now()
	if at.Before(leaf.NotBefore) {
		m.logger.Warn("signed leaf certificate starts in the future: this node's clock is behind the servers'",
			"spiffe_id", id, "behind", leaf.NotBefore.Sub(at).Round(time.Second).String())
		at = leaf.NotBefore
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := leaf.Verify(opts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUntrusted, err)
	}
	for _, r := range roots {
		if leaf.CheckSignatureFrom(r.cert) != nil {
			continue
		}
		if sc.RootID != "" && sc.RootID != r.ID {
			return nil, fmt.Errorf("%w: signer reported root %s but root %s signed the certificate", ErrUntrusted, sc.RootID, r.ID)
		}
		return &issued{chain: chain, rootID: r.ID}, nil
	}
	return nil, fmt.Errorf("%w: signed by root %s, which this node does not trust yet", ErrUntrusted, sc.RootID)
}

// parseChainPEM parses a PEM chain of CERTIFICATE blocks, leaf first.
func parseChainPEM(s string) ([]*x509.Certificate, error) {
	var chain []*x509.Certificate
	rest := []byte(s)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("unexpected %s PEM block in the signed chain", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("failed to parse signed certificate: %w", err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, errors.New("no certificate in the signed chain")
	}
	return chain, nil
}

// LeafTTL is the lifetime leaves are signed with: this CA's connect
// leaf TTL, or in remote mode the servers' (seen on the last leaf they
// signed; the local setting until then).
func (m *Manager) LeafTTL() time.Duration {
	if d := time.Duration(m.signedTTL.Load()); m.cfg.Signer != nil && d > 0 {
		return d.Round(time.Second)
	}
	return m.cfg.LeafTTL
}
