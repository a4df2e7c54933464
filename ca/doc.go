// Package ca is meshlet's certificate authority: one SPIFFE trust domain per
// cluster (<cluster-uuid>.meshlet), a persisted root (private keys in 0600
// files, never logged or served), ECDSA P-256 leaf certificates per service
// with identity spiffe://<trust-domain>/ns/default/dc/<dc>/svc/<service>,
// renewal at a random point between 60% and 90% of a leaf's life, and root
// rotation with a cross-signed new root.
//
// Rotation: the new root is cross-signed by the old one and leaves signed
// by the new root carry that cross-signed certificate after the leaf in
// CertPEM, so a peer that still trusts only the old root verifies them.
// Both roots stay in Roots until every cached leaf has been re-issued under
// the new root and Config.RootOverlap (default: one leaf TTL) has passed.
// TLS verifies at handshake only, so open connections never break.
//
// Concurrency: a Manager is safe for concurrent use. One goroutine per
// cached leaf renews it; Close stops them all. Subscribers are called
// synchronously, without locks held, after each change and must not block.
// Signing is rate limited by a Limiter (a token bucket at Config.SignRate).
package ca
