// Package cluster holds the end-to-end tests of a meshlet cluster: server
// and client agents, each a "host" in its own network namespace wired to a
// private test bridge, talking over the RPC port with mutual TLS made by
// `meshlet tls`. The package has tests only; they need root and the built
// binaries (MESHLET_BIN, MESHLET_CNI_PATH) and skip otherwise.
package cluster
