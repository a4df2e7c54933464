package ca

import (
	"crypto"
	"errors"
	"fmt"
	"strings"
)

// trustDomainSuffix ends every meshlet trust domain: "<cluster-uuid>.meshlet".
const trustDomainSuffix = ".meshlet"

// TrustDomainOf is the trust domain of the cluster clusterID:
// "<clusterID>.meshlet".
func TrustDomainOf(clusterID string) string { return clusterID + trustDomainSuffix }

// clusterIDOf is the cluster ID of trustDomain; ok is false when it does
// not end in ".meshlet".
func clusterIDOf(trustDomain string) (clusterID string, ok bool) {
	return strings.CutSuffix(trustDomain, trustDomainSuffix)
}

// CheckStoredState checks st as the CA checks a state it loads: it has a
// cluster ID; root IDs are unique; every root's certificate, its
// cross-signed certificate (if any) and its private key parse, the key is
// the certificate's and the cross-signed certificate carries the root's
// public key; exactly one root is active. Errors wrap ErrStateCorrupt and
// name the root.
func CheckStoredState(st *StoredState) error {
	_, err := parseStoredRoots(st)
	return err
}

// parseStoredRoots parses every root of st (checked as CheckStoredState
// describes).
func parseStoredRoots(st *StoredState) ([]*rootCA, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: no state", ErrStateCorrupt)
	}
	if st.ClusterID == "" {
		return nil, fmt.Errorf("%w: no cluster ID", ErrStateCorrupt)
	}
	roots := make([]*rootCA, 0, len(st.Roots))
	seen := make(map[string]bool, len(st.Roots))
	active := 0
	for _, sr := range st.Roots {
		if seen[sr.ID] {
			return nil, fmt.Errorf("%w: root %s appears twice", ErrStateCorrupt, sr.ID)
		}
		seen[sr.ID] = true
		r, err := parseStoredRoot(sr)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStateCorrupt, err)
		}
		if r.Active {
			active++
		}
		roots = append(roots, r)
	}
	if active != 1 {
		return nil, fmt.Errorf("%w: %d active roots, want 1", ErrStateCorrupt, active)
	}
	return roots, nil
}

// parseStoredRoot parses one persisted root with its key.
func parseStoredRoot(sr StoredRoot) (*rootCA, error) {
	r, err := parseRoot(sr.Root)
	if err != nil {
		return nil, err
	}
	key, err := parseKeyPEM([]byte(sr.PrivateKeyPEM))
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", sr.ID, err)
	}
	if !key.PublicKey.Equal(r.cert.PublicKey) {
		return nil, fmt.Errorf("root %s: the private key does not match the certificate", sr.ID)
	}
	r.key, r.rotatedOutAt = key, sr.RotatedOutAt
	return r, nil
}

// parseRoot parses a root's certificate and its cross-signed certificate
// (which must carry the root's public key); the stored and the remote
// roots are both read through it.
func parseRoot(root Root) (*rootCA, error) {
	cert, err := parseCertPEM(root.RootCertPEM)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", root.ID, err)
	}
	r := &rootCA{Root: root, cert: cert}
	r.IntermediateCertsPEM = append([]string(nil), root.IntermediateCertsPEM...)
	if len(root.IntermediateCertsPEM) == 0 {
		return r, nil
	}
	cross, err := parseCertPEM(root.IntermediateCertsPEM[0])
	if err != nil {
		return nil, fmt.Errorf("root %s cross-signed certificate: %w", root.ID, err)
	}
	if pub, ok := cross.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("root %s: %w", root.ID, errCrossKey)
	}
	r.crossCert = cross
	return r, nil
}

var errCrossKey = errors.New("the cross-signed certificate does not carry the root's key")
