package bench

import (
	"context"
	"fmt"
	"path/filepath"
)

// clusterMesh measures the cross-node mesh: latency and max rps through
// two sidecars on two nodes against the direct cross-node path, the time
// an endpoint change takes to reach the proxies on 3 nodes, and the watch
// fan-in between a client agent with 1,000 proxies and the servers.
func (r *Runner) clusterMesh(ctx context.Context) *Area {
	a := &Area{
		Name: "Cluster mesh",
		Intro: fmt.Sprintf("Real agents (bin/meshlet, built-in sidecars, real CNI): one server and %d client agents, each in its own "+
			"network namespace on a bench-created bridge (a free 10.2xx.yyy.0/24), RPC over mutual TLS with certificates from "+
			"`meshlet tls ca create` / `tls cert create`. **Latency and max rps**: service bm-srv (demo-app counting, HTTP "+
			"sidecar) on c2 and a client group on c1 with an upstream to it; fortio runs in the client allocation's namespace "+
			"against the upstream (client sidecar → c2's address:host port → server sidecar (mTLS, authz) → app); "+
			"baseline: the same app straight through a host port mapping on c2 (c1's allocation → c2's address:host port). "+
			"**Endpoint change**: time from the job update until each node's proxy (admin /clusters) lists the new "+
			"endpoints; baseline: until the servers' catalog lists them. **Watch fan-in**: a simulated client node in the "+
			"bench process (real RPC over TLS to the server agent) with %d proxies' registrations churned at %d changes/s; "+
			"the agent's ONE feed stream (rpc.Client.FollowConnect) against one stream per proxy (%d streams), counted at "+
			"the same time. Every load generator shares the machine's cores with the agents and sidecars.",
			meshClients, fanProxies, fanChurnRate, fanProxies),
	}
	if r.opts.CNIPath == "" {
		r.opts.CNIPath = filepath.Join(filepath.Dir(r.opts.Meshlet), "cni")
	}
	c, err := startMeshCluster(ctx, r.opts.Meshlet, r.opts.CNIPath, filepath.Join(r.scratch, "clustermesh"), r.log.Named("clustermesh"))
	if err != nil {
		a.Figures = clusterMeshNotMeasured(err.Error())
		return a
	}
	defer c.stop()
	log := r.log.Named("clustermesh")
	log.Info("cross-node latency and max rps")
	x := r.crossNodeLoad(ctx, c)
	log.Info("endpoint changes", "rounds", edgeRounds)
	e := r.endpointChanges(ctx, c)
	f := r.watchFanIn(ctx, c)
	a.Figures = append(append(xnodeFigures(x), edgeFigures(e)...), fanFigures(f)...)
	for _, err := range []error{x.err, x.maxErr, e.err, f.err} {
		if err != nil {
			a.Findings = append(a.Findings, "agent logs (last lines): "+c.logTails(2))
			break
		}
	}
	return a
}

// logTails is each agent's last n log lines, for a finding when a piece
// failed.
func (c *meshCluster) logTails(n int) string {
	s := ""
	for _, a := range append([]*meshAgent{c.server}, c.clients...) {
		s += fmt.Sprintf("%s: %s; ", a.Name, a.tail(n))
	}
	return s
}

func clusterMeshNotMeasured(why string) []*Figure {
	return []*Figure{
		NotMeasured("cross-node HTTP latency p50 at 1,000 rps", "ms", why, nil),
		NotMeasured("cross-node HTTP latency p99 at 1,000 rps", "ms", why, nil),
		NotMeasured(fmt.Sprintf("cross-node HTTP max rps at %d connections", maxConns), "1/s", why, nil),
		NotMeasured("endpoint change → every proxy on 3 nodes (slowest node, median)", "ms", why, nil),
		NotMeasured(fmt.Sprintf("watch fan-in with %d proxies on a client: feed bytes per second (baseline: one stream per proxy)", fanProxies), "B/s", why, nil),
		NotMeasured(fmt.Sprintf("watch fan-in with %d proxies on a client: feed messages per second (baseline: one stream per proxy)", fanProxies), "1/s", why, nil),
	}
}
