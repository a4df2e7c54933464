// Package ca is meshlet's certificate authority: one SPIFFE trust domain per
// cluster (<cluster-uuid>.meshlet), a persisted root (private keys in 0600
// files, never logged or served), ECDSA P-256 leaf certificates per service
// with identity spiffe://<trust-domain>/ns/default/dc/<dc>/svc/<service>,
// renewal at a random point between 60% and 90% of a leaf's life, and root
// rotation with a cross-signed new root.
package ca
