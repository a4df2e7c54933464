package agent

import (
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/meshstate"
)

// newMeshConfig is the agent's registry of the cluster's L7 config
// entries, which the mesh feed keeps current (Replace on every change; see
// startMeshFeed) and the control plane reads (xDS, authz, the API); and
// the writer of the API's writes: etcd on a server (the store checks
// every write against the stored entries), a call through a server on a
// client-only agent. The API waits until the registry has seen its write.
func (a *Agent) newMeshConfig() (*configentry.Registry, meshstate.ConfigEntryWriter) {
	reg := configentry.NewRegistry()
	a.mesh.configEntries = reg
	if a.mesh.store != nil {
		return reg, a.mesh.store
	}
	return reg, a.rpcClient.ConnectConfigEntries()
}
