package agent

import (
	"context"
	"time"

	"github.com/meshlet/meshlet/client/connecthook"
	"github.com/meshlet/meshlet/sitoken"
)

// siTokenSweepTimeout bounds one sweep of the service identity tokens.
const siTokenSweepTimeout = 30 * time.Second

// startSITokens makes a server's minter of sidecar service identity
// tokens (ACLs enabled, ACL state open); the leader's sweep revokes the
// tokens of ended allocations (startMeshSweep).
func (a *Agent) startSITokens() {
	if a.acl == nil || a.acl.store == nil || a.server == nil {
		return
	}
	a.acl.minter = sitoken.NewMinter(a.server.RPCBackend(), a.acl.store, a.logger.Named("acl").Named("sitoken"))
}

// siTokenSource is where the connect hooks derive sidecar tokens: a
// server agent's own minter (for its own node), a client-only agent's
// servers over RPC; nil with ACLs disabled.
func (a *Agent) siTokenSource() connecthook.SITokenSource {
	switch {
	case !a.cfg.ACL.Enabled:
		return nil
	case a.acl != nil && a.acl.minter != nil:
		return localSITokens{m: a.acl.minter, nodeID: a.client.Node().ID}
	case a.rpcClient != nil:
		return a.rpcClient
	}
	return nil
}

// localSITokens derives tokens in process, as the RPC call does for a
// client agent's node.
type localSITokens struct {
	m      *sitoken.Minter
	nodeID string
}

func (l localSITokens) DeriveSIToken(ctx context.Context, allocID, task string) (string, error) {
	tok, err := l.m.Derive(ctx, l.nodeID, allocID, task)
	if err != nil {
		return "", err
	}
	return tok.SecretID, nil
}

// sweepSITokens revokes the service identity tokens of ended allocations
// (the leader, with ACLs).
func (a *Agent) sweepSITokens(ctx context.Context) {
	if a.acl == nil || a.acl.minter == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, siTokenSweepTimeout)
	defer cancel()
	n, err := a.acl.minter.Sweep(ctx)
	if err != nil && ctx.Err() == nil {
		a.logger.Error("failed to revoke the service identity tokens of ended allocations", "revoked", n, "error", err)
	}
}
