// Package sidecar is meshlet's built-in data plane: a connect sidecar proxy
// that speaks ADS (delta by default, state-of-the-world as an option) to the
// control plane and implements the Envoy v3 resources meshlet's xDS server
// emits, so a host without an Envoy binary still gets a mesh.
//
// What it owns:
//   - the ADS client (ads*.go): subscriptions, ACK/NACK, reconnects with a
//     jittered backoff capped at 5s, and fail-static serving of the last good
//     configuration while the control plane is away;
//   - decoding and validation of Listener, Cluster, ClusterLoadAssignment,
//     RouteConfiguration and Secret resources into an internal model
//     (decode_*.go). A response is applied only if every resource in it is
//     valid; otherwise it is NACKed and nothing changes;
//   - the runtime: listeners (TLS termination with client certificates,
//     the ext_authz network filter, tcp_proxy with its idle_timeout
//     (relayidle.go; Envoy's default 1 h) and the HTTP connection
//     manager), clusters (round robin, random, least_request, ring_hash and
//     maglev (as ring_hash) with failover, upstream TLS that verifies both
//     the chain and the SPIFFE ID) and the Envoy-compatible admin endpoints
//     (/ready, /stats, /clusters, /config_dump, /listeners);
//   - the L7 router (router.go, decode_route*.go): RDS route configurations
//     matched per request (path prefix/exact/regex, headers including the
//     :method, :path, :authority pseudo headers, query parameters; first
//     match wins, none is a 404), weighted clusters, prefix_rewrite,
//     per-route timeouts (504), header mutations, hash policies and
//     retry_policy (5xx, gateway-error, connect-failure,
//     retriable-status-codes, reset, refused-stream; a retry goes to
//     another endpoint and only replays what may be sent twice); the HTTP
//     ext_authz filter asks the agent about every request (httpauthz.go,
//     fail closed) unless an allow marked with the current authorization
//     epoch answers it (authzcache.go); common request and response heads
//     are parsed and written here, anything else by net/http (h1read.go,
//     h1readresp.go, h1write.go); a changed route configuration applies to the next
//     request, and one naming a cluster still warming waits for it while
//     the previous one serves;
//   - HTTP/2 (h2server.go, h2upstream.go): a connection manager serves h2
//     when a connection opens with the HTTP/2 preface (h2c, or h2 inside
//     TLS), and a cluster with http2_protocol_options speaks h2 (h2c, or h2
//     over its mTLS), so gRPC passes through two sidecars.
//
// Concurrency rules: one goroutine (the ADS loop) owns the resource store and
// is the only writer of runtime configuration. The data path never takes a
// lock held by that goroutine: listeners, clusters, secrets and routes are
// published through atomic pointers to immutable values, so a connection reads
// the configuration current at accept time (secrets at handshake time) and
// keeps it. The store's mutex is taken by the ADS loop for writes and by the
// admin server for reads. Counters are atomics. Each accepted connection has
// at most two goroutines (one per copy direction) and the number of open
// downstream connections is bounded.
//
// Data path performance rules: TLS relays copy through pooled 64 KiB
// buffers that an idle direction gives back (conn.go); plain TCP to plain
// TCP is spliced by the kernel. The HTTP connection manager serves each
// downstream connection on its accepting goroutine with its own HTTP/1.1
// loop (h1server.go: no per-request goroutine, no background read); its
// upstream side (upstream.go) runs each exchange on the same goroutine over
// a per-cluster pool of keep-alive connections guarded by one mutex. A
// response head and a body that has fully arrived go out in one write; a
// body still arriving is flushed piece by piece. The built-in sidecar runs
// with connect.ProxyConcurrency worker threads (GOMAXPROCS), as Envoy runs
// with --concurrency; its sockets are read and written with raw system
// calls (rawio.go), so one thread serves them without the runtime handing
// its P to another thread during a write. That path relies on undocumented
// crypto/tls and runtime behaviour, checked by canary_test.go; Config.PlainIO
// (MESHLET_PROXY_PLAIN_IO=1) replaces it with plain net.Conn I/O and
// io.Copy relays.
package sidecar
