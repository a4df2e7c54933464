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
// Leaf cache: a leaf stays cached (and renewed) while HoldLeaf references
// it (the xDS server holds each service it serves a leaf for) and is
// released with its goroutine at the last release. Leaves only API callers
// asked for are capped (Config.MaxAPILeaves, least recently used evicted)
// and released after Config.LeafIdleTTL without a request. Rotation
// re-signs cached leaves only.
//
// State on disk carries a SHA-256 and a marker file (ca.initialized): a
// lost or corrupt ca-state.json stops New (ErrStateMissing,
// ErrStateCorrupt) instead of making a new trust domain.
//
// Concurrency: a Manager is safe for concurrent use. One goroutine per
// cached leaf renews it; Close stops them all. Subscribers are called
// synchronously, without locks held, after each change and must not block.
// Signing is rate limited by a Limiter (a token bucket at Config.SignRate).
package ca
