// Package meshtest holds in-process integration tests of meshlet's built-in
// sidecar proxy (sidecar/) against meshlet's real, composed control plane
// (controlplane/: the CA, the intentions store, the ext_authz service and the
// xDS server). Everything is real: delta xDS and ext_authz over gRPC (a TCP
// address and per-allocation unix sockets), mTLS with leaves issued by the
// real CA, and TCP on 127.0.0.1 only. The catalog is filled the way the
// client fills it (connect.Registrations' shapes: an app instance and its
// "-sidecar-proxy" instance per allocation).
//
// The package has no non-test code. Each test builds its own data
// directory, control plane, catalog, echo apps and proxies on free loopback
// ports and removes them in t.Cleanup, so tests are independent and run in
// parallel. Helper goroutines (the echo apps, a streaming client) never
// call t.Fatal; they report errors back to the test goroutine.
package meshtest
