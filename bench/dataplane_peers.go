package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// The data-plane arms, by name.
const (
	armDirect  = "direct"
	armMeshlet = "meshlet"
)

// peerNames are the peer proxies the built-in one is compared with.
var peerNames = []string{"HAProxy", "nginx"}

// peerIPerfPort is the iperf3 server the peers' bulk service reaches on
// the HTTP server namespace's 127.0.0.1.
const peerIPerfPort = 15201

const peerIntro = "**Peers**: HAProxy and nginx (Debian's packages) run as the same pair in the same two namespaces: the client " +
	"side in the client allocation's namespace on its 127.0.0.1, the server side in the HTTP server allocation's namespace on its " +
	"address, forwarding to the app on that namespace's 127.0.0.1 (for bulk, to an iperf3 server there). Each side is one process " +
	"with one worker (HAProxy nbthread 1; nginx worker_processes 1 with master_process off), TLS 1.3 with AES-128-GCM and ECDSA " +
	"P-256 leaves from a bench CA, client certificates verified both ways, no session resumption, HTTP keep-alive on both legs. " +
	"The rows \"… vs HAProxy\" and \"… vs nginx\" compare meshlet (value) with the peer (baseline); their ratio is the median of the " +
	"per-round meshlet/peer ratios, and the target holds against the better peer when it holds in both rows. " +
	"The peers do no authorization: meshlet's new connections include its ext_authz check. The ends differ for two blocks: " +
	"the peers' bulk stream ends at an iperf3 server in the HTTP server allocation's namespace and their new connections at its " +
	"HTTP app, meshlet's at the iperf3 and TCP server allocations (the same kind of server either way)."

// dataPlaneArms returns the arms to measure (direct, meshlet, and each
// peer that started), the reason each peer that did not start is missing,
// and a func that stops the peers and their iperf3 server.
func (r *Runner) dataPlaneArms(ctx context.Context, env *meshEnv) ([]dpArm, map[string]error, func()) {
	arms := []dpArm{
		pathArm{name: armDirect, http: fmt.Sprintf("http://%s:%d/", env.httpIP, appHTTP),
			conn: fmt.Sprintf("http://%s:%d/", env.tcpIP, appTCP), bulkHost: env.iperfIP, bulkPort: appIperf},
		pathArm{name: armMeshlet, http: fmt.Sprintf("http://127.0.0.1:%d/", upHTTP), conn: fmt.Sprintf("http://127.0.0.1:%d/", upTCP),
			bulkHost: "127.0.0.1", bulkPort: upIperf, procs: func(kind string) map[string]int { return r.meshProcs(env, kind) }},
	}
	errs := map[string]error{}
	peers, stop, err := r.startPeers(ctx, env)
	for _, p := range peerNames {
		if err != nil {
			errs[p] = err
		} else if peers[p] == nil {
			errs[p] = errPeerDown
		}
	}
	for _, p := range peerNames {
		if peers[p] != nil {
			arms = append(arms, peers[p])
		}
	}
	return arms, errs, stop
}

// startPeers writes the bench CA and starts an iperf3 server and both
// peer pairs; a pair that fails to start or to answer is left out (and
// logged).
func (r *Runner) startPeers(ctx context.Context, env *meshEnv) (map[string]*peerProxy, func(), error) {
	dir := filepath.Join(r.scratch, "peers")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, func() {}, fmt.Errorf("failed to create peers dir: %w", err)
	}
	certs, err := writePeerCerts(dir)
	if err != nil {
		return nil, func() {}, err
	}
	iperf := InNetns(context.Background(), env.srvHTTP, r.opts.Iperf3, "-s", "-B", "127.0.0.1", "-p", fmt.Sprint(peerIPerfPort))
	iperf.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := iperf.Start(); err != nil {
		return nil, func() {}, fmt.Errorf("failed to start the peers' iperf3 server: %w", err)
	}
	peers := map[string]*peerProxy{}
	stop := func() {
		for _, p := range peers {
			p.stop()
		}
		_ = iperf.Process.Kill()
		_ = iperf.Wait()
	}
	for i, mk := range []func(peerLayout) *peerProxy{newHAProxy, newNginx} {
		base := 18001 + 200*i
		l := peerLayout{Certs: certs, ServerIP: env.httpIP, HTTP: base, Conn: base + 1, Bulk: base + 2,
			SrvHTTP: base + 100, SrvConn: base + 101, SrvBulk: base + 102, AppHTTP: appHTTP, AppBulk: peerIPerfPort,
			StreamModule: nginxStreamModule()}
		p := mk(l)
		p.layout.Dir = filepath.Join(dir, p.bin)
		if err := r.startPeer(ctx, p, env); err != nil {
			r.log.Warn("peer proxy not measured", "peer", p.name, "error", err)
			continue
		}
		peers[p.name] = p
	}
	return peers, stop, nil
}

// startPeer starts one pair and waits until both its HTTP and its L4
// service answer from the client namespace.
func (r *Runner) startPeer(ctx context.Context, p *peerProxy, env *meshEnv) error {
	if err := p.start(env.client, env.srvHTTP); err != nil {
		return err
	}
	for _, url := range []string{p.HTTPURL(), p.ConnURL()} {
		if err := r.waitPassing(ctx, env.client, url); err != nil {
			p.stop()
			return fmt.Errorf("failed to reach %s through %s: %w", url, p.name, err)
		}
	}
	return nil
}

// waitFinding lists the quiet-machine waits.
func waitFinding(runs *dpRuns) string {
	if len(runs.waits) == 0 {
		return ""
	}
	s := "Quiet-machine waits before each block (1-minute load under 1.0, bounded): "
	for i, w := range runs.waits {
		if i > 0 {
			s += "; "
		}
		s += w
	}
	return s + "."
}
