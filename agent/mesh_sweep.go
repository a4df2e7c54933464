package agent

import (
	"context"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// meshSweepInterval is how often the leader removes the registrations of
// nodes that are down or unknown; leadershipPoll is how soon a server
// that became the leader sweeps.
const (
	meshSweepInterval = time.Minute
	leadershipPoll    = 5 * time.Second
)

// startMeshSweep runs the leader's sweep of the mesh catalog on a server
// agent: a node-down removal is made once (nodeDown) and nothing retries
// it when it fails, and a node removed from the cluster (garbage-collected)
// never goes down. The sweep repairs both: at leadership gain and every
// meshSweepInterval while leader.
func (a *Agent) startMeshSweep() {
	if a.mesh == nil || a.mesh.store == nil || a.server == nil {
		return
	}
	srv := a.server
	ctx, cancel := context.WithCancel(context.Background())
	a.mesh.sweepCancel, a.mesh.sweepDone = cancel, make(chan struct{})
	done := a.mesh.sweepDone
	go func() {
		defer close(done)
		poll := time.NewTicker(leadershipPoll)
		defer poll.Stop()
		var last time.Time
		wasLeader := false
		for {
			leader := srv.IsLeader()
			if leader && (!wasLeader || time.Since(last) >= meshSweepInterval) {
				last = time.Now()
				a.sweepMesh(ctx)
				a.sweepSITokens(ctx)
			}
			wasLeader = leader
			select {
			case <-ctx.Done():
				return
			case <-poll.C:
			}
		}
	}()
}

// sweepMesh removes the registrations of every node that the state store
// does not know or holds as down.
func (a *Agent) sweepMesh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	removed, err := a.mesh.store.SweepNodes(ctx, a.upNodes)
	for node, n := range removed {
		a.logger.Info("removed the mesh registrations of a node that is down or gone", "node_id", node, "allocations", n)
	}
	if err != nil && ctx.Err() == nil {
		a.logger.Error("failed to sweep the mesh registrations of down nodes", "error", err)
	}
}

// upNodes are the nodes whose registrations stay: known and not down.
func (a *Agent) upNodes(ctx context.Context) (map[string]bool, error) {
	nodes, err := a.server.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	up := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if n.Status != structs.NodeStatusDown {
			up[n.ID] = true
		}
	}
	return up, nil
}
