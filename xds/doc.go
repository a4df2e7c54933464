// Package xds is meshlet's xDS control plane: it compiles the catalog (every
// connect-proxy instance, every service instance) and the CA (roots, one
// leaf per service) into Envoy v3 resources and serves them over ADS, both
// state-of-the-world and delta (incremental), on one gRPC server that other
// agent services (ext_authz) register on.
//
// # Node identity and authorization
//
// The xDS node ID of a connect sidecar is its proxy service ID in the
// catalog (Consul's convention, e.g. "_nomad-task-<alloc>-group-web-web-9090-sidecar-proxy").
// Consul ties a proxy's stream to an ACL token; meshlet ties it to the
// listener it came through. One gRPC server serves every listener; its
// transport credentials label each connection with its listener (an
// allocation socket's connections are of a type only ListenAlloc makes),
// and the stream callbacks read that label and decide before any watch is
// created (access.go):
//
//   - An allocation's socket (ListenAlloc, served by the control plane in
//     the allocation's directory) binds its streams to that allocation. The
//     first request must name a node that is a connect-proxy registered in
//     the catalog with that allocation's ID, or one the socket declares
//     from the allocation's job while it is not registered (after an agent
//     restart, during shutdown_delay; allocproxies.go); the stream may not
//     switch node afterwards. Its secrets are limited to "roots" and the leaf of the
//     proxy's destination service, checked on every SotW request (full
//     subscription) and every delta request (names subscribed and initial
//     versions). A wildcard secrets subscription yields only per-node
//     secrets, which there are none of: leaves are only sent by name. Its
//     listeners and clusters are looked up by its own node ID; endpoints
//     and proxyless resources are shared and not secret. Anything else ends
//     the stream with PermissionDenied, a log line (alloc_id, proxy_id) and
//     meshlet_xds_denied_streams_total. Closing the listener closes its
//     connections, so a stopped allocation keeps no stream.
//   - Any other listener (the TCP listener on 127.0.0.1:8502) is host-local
//     and trusted as the host, which can read the CA's key files anyway:
//     every node ID and every resource is served, and any node may ask for
//     the shared resources by name (this is how proxyless gRPC clients
//     resolve xds:///<service>). hostGrant is that policy, in one place, for
//     an ACL-token check to tighten later.
//
// A node whose ID is not a registered connect-proxy gets no per-proxy
// resources. A registered or declared one whose resources are not built yet
// (it reconnected to a restarted agent, beat the reconciler, or drains
// after its deregistration) is not answered until they are, so the resources it claims from an earlier stream are
// never reported removed in between (warmup.go).
//
// # Leaf references
//
// The server holds (ca.Manager.HoldLeaf) the leaf of every service with a
// registered connect-proxy or connect app instance, and releases it when the
// last such registration leaves the catalog, so the CA stops renewing (and
// re-signing at rotation) leaves nobody serves (holds.go). A stream that
// disconnects keeps its proxy's leaf while the proxy is registered.
//
// # Resource names
//
//	listeners  public_listener:0.0.0.0:<port>       per proxy (inbound mTLS, ext_authz, local_app)
//	           <dest>:<bind-addr>:<bind-port>        per proxy upstream
//	           <service>                             shared, proxyless gRPC (api_listener)
//	routes     <dest> (<dest>.<dc> for another dc)   per proxy HTTP upstream with a discovery chain (RDS)
//	clusters   local_app                             per proxy (STATIC)
//	           [<subset>.]<svc>.default.<dc>.internal.<td>
//	                                                 per proxy chain target (EDS over ADS, mTLS)
//	           <service>                             shared, proxyless gRPC (EDS over ADS)
//	endpoints  [<subset>.]<svc>.default.<dc>.internal.<td>
//	                                                 shared: healthy sidecars of <svc> passing the
//	                                                 subset's filter; failover targets as priorities
//	           <service>                             shared: healthy plain instances of <service>
//	secrets    roots                                 shared: trusted CA roots (validation context)
//	           leaf:<service>                        shared by every proxy of <service>
//
// The cluster local_agent (ext_authz, ADS) is a static cluster of the
// bootstrap and is not served. Service names are RFC 1123 labels, so shared
// names (<service>, SNI names) never clash with per-proxy ones (local_app,
// names with colons).
//
// # Discovery chains (L7)
//
// Each upstream's destination is compiled with the config entries
// (Config.ConfigEntries, Set.Compile) into a configentry.Chain (chain.go).
// A default chain (no entry concerns the destination) gives exactly the
// pre-L7 resources: the upstream config's protocol, inline routes for http,
// tcp_proxy otherwise, one cluster named ClusterName. Otherwise every
// target a route splits to gets its own cluster (subset prefix, the
// resolver's connect timeout and load-balancing policy; failover targets'
// identities accepted too) and its own load assignment (endpoints.go:
// sidecars passing the subset filter, evaluated on the sidecar's tags and
// meta, else its application's; failover targets as priorities 1, 2...,
// kept even when empty). An http, http2 or grpc chain makes the upstream
// listener's HTTP connection manager use RDS; the route configuration
// (routes.go) holds one route per chain route: path, header, method and
// query matches; one cluster or integer weighted clusters summing to
// 10000; retries, timeouts, prefix rewrite, header changes; hash policies
// for ring_hash and maglev. A tcp chain keeps tcp_proxy to its one target.
// The public listener of an HTTP service (proxy config protocol, else its
// service-defaults) adds the HTTP ext_authz filter before the router, so
// L7 intentions are decided per request. A Registry change rebuilds every
// local proxy; content hashes keep unchanged resources from being re-sent,
// so changing a split pushes one route configuration and no listener.
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
// names the proxy's own route configurations. A proxy that fails (bad protocol or
// timeout, invalid envoy_public_listener_json escape hatch, a reference to
// nothing) keeps its last good resources; the error is logged once and
// returned by ProxyError so the agent can fail the allocation. A proxy whose
// leaf cannot be fetched yet is held and retried.
//
// # Metrics
//
// meshlet_xds_connected_proxies, meshlet_xds_pushes_total{type},
// meshlet_xds_push_latency_seconds{type} (change to ACK),
// meshlet_xds_nacks_total{type}, meshlet_xds_resources{type},
// meshlet_xds_denied_streams_total.
//
// # Concurrency
//
// Catalog and CA notifications only record what changed and wake one
// reconciler goroutine, which coalesces bursts (Config.Coalesce), rebuilds
// only what the change touched (EDS for touched services, LDS/CDS for
// proxies whose own registration changed, SDS for CA events), checks each
// proxy's resources for consistency, and publishes them in dependency order
// (SDS, EDS, CDS, RDS, LDS; removals in reverse). The reconciler is the only
// writer of the cache; gRPC stream goroutines create and cancel watches and
// authorize their own requests (reading the catalog). The cache is guarded
// by one mutex; the proxy status table by another; the stream table
// (tracker) by a third. None is held while calling the catalog or the CA.
package xds
