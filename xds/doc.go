// Package xds is meshlet's xDS control plane: it compiles the catalog (every
// connect-proxy instance, every service instance) and the CA (roots, one
// leaf per service) into Envoy v3 resources and serves them over ADS, both
// state-of-the-world and delta (incremental), on one gRPC server that other
// agent services (ext_authz) register on.
//
// # Node identity
//
// The xDS node ID of a connect sidecar is its proxy service ID in the
// catalog (Consul's convention, e.g. "_nomad-task-<alloc>-group-web-web-9090-sidecar-proxy").
// A node whose ID is not a registered connect-proxy gets no per-proxy
// resources; any node may still ask for the shared ones by name (this is how
// proxyless gRPC clients resolve xds:///<service>).
//
// # Resource names
//
//	listeners  public_listener:0.0.0.0:<port>       per proxy (inbound mTLS, ext_authz, local_app)
//	           <dest>:<bind-addr>:<bind-port>        per proxy upstream
//	           <service>                             shared, proxyless gRPC (api_listener)
//	clusters   local_app                             per proxy (STATIC)
//	           <svc>.default.<dc>.internal.<td>      per proxy upstream (EDS over ADS, mTLS)
//	           <service>                             shared, proxyless gRPC (EDS over ADS)
//	endpoints  <svc>.default.<dc>.internal.<td>      shared: healthy sidecars of <svc>
//	           <service>                             shared: healthy plain instances of <service>
//	secrets    roots                                 shared: trusted CA roots (validation context)
//	           leaf:<service>                        shared by every proxy of <service>
//
// Routes are inline in the HTTP connection managers, so no RDS is served.
// The cluster local_agent (ext_authz, ADS) is a static cluster of the
// bootstrap and is not served. Service names are RFC 1123 labels, so shared
// names (<service>, SNI names) never clash with per-proxy ones (local_app,
// names with colons).
//
// # Cache design
//
// go-control-plane's SnapshotCache keeps one snapshot per node and
// re-marshals every resource for every node; with 10,000 proxies one endpoint
// change costs 10,000 marshals. LinearCache marshals once but has a single
// flat namespace and answers a wildcard watch with every resource, so a
// proxy's wildcard LDS/CDS would see all proxies' listeners. This package
// therefore implements go-control-plane's cache.ConfigWatcher itself
// (cache.go): resources live in a shared table (EDS, SDS, proxyless) and a
// per-node table (LDS, CDS); every resource is marshalled and hashed exactly
// once when it is set, and the same immutable Any is handed to every stream;
// watches are indexed by resource name and, for wildcard watches, by node, so
// a change wakes only the watches it concerns. Resource versions are content
// hashes (an identical rebuild pushes nothing); response versions are one
// process-wide counter that increases with every published batch.
//
// # NACKs
//
// A watch replies only when a resource differs from what the stream last
// received, and a rejected response counts as received: a NACKed version is
// never re-sent, the proxy stays at its last ACKed config until the input
// changes. The rejection is counted, logged once, and exposed by
// ProxyStatus/ProxyError.
//
// # Consistency and errors
//
// Before a proxy's listeners and clusters are published, every reference
// inside them — including those packed in filter and transport-socket Anys
// and api_listener routes, which Snapshot.Consistent misses — is resolved:
// clusters must be the proxy's own (or the bootstrap's local_agent), EDS
// clusters must have their load assignment, SDS names their secret, and RDS
// is refused (routes are inline). A proxy that fails (bad protocol or
// timeout, invalid envoy_public_listener_json escape hatch, a reference to
// nothing) keeps its last good resources; the error is logged once and
// returned by ProxyError so the agent can fail the allocation. A proxy whose
// leaf cannot be fetched yet is held and retried.
//
// # Metrics
//
// meshlet_xds_connected_proxies, meshlet_xds_pushes_total{type},
// meshlet_xds_push_latency_seconds{type} (change to ACK),
// meshlet_xds_nacks_total{type}, meshlet_xds_resources{type}.
//
// # Concurrency
//
// Catalog and CA notifications only record what changed and wake one
// reconciler goroutine, which coalesces bursts (Config.Coalesce), rebuilds
// only what the change touched (EDS for touched services, LDS/CDS for
// proxies whose own registration changed, SDS for CA events), checks each
// proxy's resources for consistency, and publishes them in dependency order
// (SDS, EDS, CDS, LDS; removals in reverse). The reconciler is the only
// writer of the cache; gRPC stream goroutines create and cancel watches. The
// cache is guarded by one mutex; the proxy status table by another. Neither
// lock is held while calling the catalog or the CA.
package xds
