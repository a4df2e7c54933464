// Package ca is meshlet's certificate authority: one SPIFFE trust domain per
// cluster (<cluster-uuid>.meshlet), persisted roots (private keys never
// logged or served), ECDSA P-256 leaf certificates per service with
// identity spiffe://<trust-domain>/ns/default/dc/<dc>/svc/<service>,
// renewal at a random point between 60% and 90% of a leaf's life, and root
// rotation with a cross-signed new root.
//
// Modes. A Manager runs in one of three modes, chosen by its Config:
//
//   - Storage (a server): the CA's state (cluster ID, roots and their keys)
//     lives in a Storage, shared by the cluster's servers (package meshstate
//     keeps it in etcd). Every change is a compare-and-swap on the state the
//     manager last loaded or saved: servers starting at once on an empty
//     storage end up with the one root the first of them stored, and a
//     rotation or prune based on a stale state fails with ErrStateConflict
//     (the manager then reloads). Reload picks up another server's changes
//     and re-issues the cached leaves when the active root changed.
//     SignCSR signs client agents' CSRs.
//   - Dir (a single node): Storage over a directory (NewDirStorage), with
//     the root keys in 0600 files. The state file carries a SHA-256 and a
//     marker file (ca.initialized): a lost or corrupt ca-state.json stops
//     New (ErrStateMissing, ErrStateCorrupt) instead of making a new trust
//     domain.
//   - Remote (a client agent, Config.Signer): no root key exists on the
//     node. The cluster's public roots arrive through SetRoots; until then
//     Leaf fails with ErrNoRoots and TrustDomain is "". Leaf keys are
//     generated locally and only a CSR goes to the RemoteSigner; its answer
//     is checked (the local key, the service's identity, a chain to the
//     current roots) before the leaf is cached. Rotate fails with
//     ErrRemote and roots are never pruned locally: the servers do both.
//
// With none of them everything stays in memory (tests, benchmarks).
//
// Rotation: the new root is cross-signed by the old one and leaves signed
// by the new root carry that cross-signed certificate after the leaf in
// CertPEM, so a peer that still trusts only the old root verifies them.
// Both roots stay in Roots until Config.RootOverlap (default: one leaf
// TTL) has passed and no leaf this manager caches still depends on the
// old root. Leaves cached elsewhere (other servers, client agents, API
// callers) are not tracked: the overlap is what keeps them verifiable.
// TLS verifies at handshake only, so open connections never break.
//
// Leaf cache: a leaf stays cached (and renewed) while HoldLeaf references
// it (the xDS server holds each service it serves a leaf for) and is
// released with its goroutine at the last release. Leaves only API callers
// asked for are capped (Config.MaxAPILeaves, least recently used evicted)
// and released after Config.LeafIdleTTL without a request. Rotation
// re-signs cached leaves only.
//
// Concurrency: a Manager is safe for concurrent use. One goroutine per
// cached leaf renews it; Close stops them all. Subscribers are called
// synchronously, without locks held, after each change and must not block.
// Signing (Leaf and SignCSR) is rate limited by a Limiter (a token bucket
// at Config.SignRate).
package ca
