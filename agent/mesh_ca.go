package agent

import (
	"context"

	"github.com/meshlet/meshlet/ca"
)

// CA root rotation (PUT /v1/connect/ca/configuration on the Consul-shaped
// API, `meshlet connect ca set-config`): a server rotates its etcd-backed
// CA (the other servers reload it, client agents receive the new roots
// through the mesh feed); a client-only agent asks a server over RPC.

// RotateCA rotates the servers' CA root for a client agent's RPC call.
func (b connectBackend) RotateCA(ctx context.Context) error { return b.ca.Rotate(ctx) }

// meshRotateCA is how this agent's connect API rotates the CA root: with
// its own CA on a server (it holds the root keys), through a server on a
// client-only agent.
func (a *Agent) meshRotateCA(caMgr *ca.Manager) func(context.Context) error {
	if a.mesh.store != nil {
		return caMgr.Rotate
	}
	return a.rpcClient.RotateCA
}
