// Package meshstate is the service mesh's cluster-wide state and how it
// reaches every agent.
//
// Servers keep it in etcd under one prefix (default /meshlet/connect/):
//
//	catalog/<node-id>/<alloc-id>  one allocation's service registrations
//	intentions                    every intention, one value (compare-and-swap)
//	config/entries/<kind>/<name>  one L7 config entry (consul/api's JSON)
//	config/index                  moved by every config entry write (its guard)
//	ca/roots                      the CA's cluster ID, index and public roots
//	ca/keys/<root-id>             a root's private key (servers only)
//
// A feed (Store.Follow) turns the prefix into Batches: a Reset with the
// whole state, then one batch per change. Every agent applies the feed to
// its local control plane with a Mirror: a server agent follows etcd
// directly, a client agent through ONE stream to the servers (package
// rpc), so every proxy on the node is served from the node's own agent.
// Private keys never enter a batch.
//
// Registrations of the agent's own node are not taken from the feed: the
// Registrar keeps them (the allocations this node runs), writes them to the
// servers and repairs the servers' copy when it differs (anti-entropy).
// A change of a check's output alone is written on the periodic full pass,
// not at once (every other change is); an allocation the servers hold but
// this node does not register is deleted only when it is not live here (a
// restored allocation re-registers a moment later); a write the servers
// refuse (ErrRefused) is tried again only when it changes or after a while.
package meshstate
