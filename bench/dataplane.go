package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Data-plane load parameters: bounded in count and time.
const (
	fixedRate     = 1000
	fixedConns    = 10
	fixedDuration = 10 * time.Second
	maxConns      = 16
	maxDuration   = 5 * time.Second
	connConns     = 8
	bulkDuration  = 5 * time.Second
	// Upstream ports of the client group in bench/input/mesh.hcl, and the
	// servers' app ports inside their namespaces.
	upHTTP, upTCP, upIperf    = 8001, 8002, 8003
	appHTTP, appTCP, appIperf = 9001, 9002, 5201
)

// ErrMissingTool is returned when a load generator is not installed.
var ErrMissingTool = errors.New("load generator not installed")

// meshEnv is the running bench-mesh job.
type meshEnv struct {
	ag                     *Agent
	client                 string // client allocation (= namespace name)
	srvHTTP, srvTCP        string
	srvIperf               string
	httpIP, tcpIP, iperfIP string
}

func (r *Runner) dataPlane(ctx context.Context) *Area {
	a := &Area{
		Name: "Data plane (built-in proxy)",
		Intro: "The real agent runs bench/input/mesh.hcl (bridge mode, built-in sidecars). Load generators run inside the client " +
			"allocation's namespace (`ip netns exec`). **measured** = through the mesh: client → its sidecar on 127.0.0.1 → " +
			"the server's sidecar (mTLS, ext_authz) → the server app. **baseline** = the same client straight to the server app " +
			"at its allocation's address, across namespaces. fortio (HTTP/1.1, keep-alive) holds a fixed 1,000 rps with 10 " +
			"connections for the latency figures; the load generator shares the machine's cores with both sidecars. " +
			fmt.Sprintf("Each load figure is the median of %d rounds; in every round the four arms (direct, meshlet, HAProxy, nginx) "+
				"run one after the other, in an order rotated by one each round, and each block (fixed rate, max rate, new connections, "+
				"bulk) waits first for a quiet machine (1-minute load under 1.0, bounded; the waits are in the findings). ", r.roundCount()) +
			"Sidecars run as injected (one worker thread, like Envoy's --concurrency 1 in Nomad's default sidecar task). " +
			"Sidecar memory is judged on PSS (see the PSS rows' notes); VmRSS and RssAnon are shown too. " + peerIntro,
	}
	env, err := r.startMesh(ctx)
	if err != nil {
		a.Figures = dataPlaneNotMeasured(err.Error())
		return a
	}
	defer env.ag.Stop()
	arms, peerErrs, stopPeers := r.dataPlaneArms(ctx, env)
	runs := r.measureArms(ctx, env, arms)
	stopPeers() // before the profiles below
	if runs.rounds < dataRounds {
		a.Intro += fmt.Sprintf(" This run used %d rounds instead of %d (-data-rounds): a smoke run, not a result.", runs.rounds, dataRounds)
	}
	direct, mesh := runs.arms[armDirect], runs.arms[armMeshlet]
	a.Figures = append(a.Figures, httpFigures(direct, mesh)...)
	a.Figures = append(a.Figures, connFigure(direct, mesh), bulkFigure(direct, mesh))
	for _, p := range peerNames {
		a.Figures = append(a.Figures, peerFigures(mesh, runs.arms[p], p, peerErrs[p])...)
	}
	for _, f := range []string{hopFinding(a.Figures), cpuFinding(a.Figures), splitFinding(runs),
		memoryFloorFinding(env, a.Figures), waitFinding(runs)} {
		if f != "" {
			a.Findings = append(a.Findings, f)
		}
	}
	a.Findings = append(a.Findings, r.httpProxyProfile(ctx))
	a.Findings = append(a.Findings, r.profile(ctx, "built-in proxy, TCP through two sidecars (sidecar.BenchmarkProxyTCP/two_proxies)", GoBenchRun{
		Pkg: "./sidecar/", Bench: "^BenchmarkProxyTCP$/two_proxies", BenchTime: "2s", Timeout: 2 * time.Minute,
	}))
	return a
}

// startMesh starts an agent, runs the mesh job and waits until traffic
// passes through both upstreams.
func (r *Runner) startMesh(ctx context.Context) (*meshEnv, error) {
	if r.opts.Fortio == "" || r.opts.Iperf3 == "" {
		return nil, fmt.Errorf("%w: fortio %q, iperf3 %q (scripts/bench.sh installs them)", ErrMissingTool, r.opts.Fortio, r.opts.Iperf3)
	}
	ag, err := r.startAgent(ctx)
	if err != nil {
		return nil, err
	}
	env, err := r.meshJob(ctx, ag)
	if err != nil {
		ag.Stop()
		return nil, err
	}
	return env, nil
}

func (r *Runner) meshJob(ctx context.Context, ag *Agent) (*meshEnv, error) {
	path := filepath.Join(r.opts.Repo, "bench", "input", "mesh.hcl")
	if err := ag.RunJob(ctx, path, "iperf3="+r.opts.Iperf3); err != nil {
		return nil, err
	}
	allocs, err := ag.Running(ctx, "bench-mesh", 4, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	env := &meshEnv{ag: ag}
	for _, al := range allocs {
		switch al.TaskGroup {
		case "client":
			env.client = al.ID
		case "srv-http":
			env.srvHTTP = al.ID
		case "srv-tcp":
			env.srvTCP = al.ID
		case "srv-iperf":
			env.srvIperf = al.ID
		}
	}
	for _, p := range []struct {
		id string
		ip *string
	}{{env.srvHTTP, &env.httpIP}, {env.srvTCP, &env.tcpIP}, {env.srvIperf, &env.iperfIP}} {
		if *p.ip, err = AllocIP(ctx, p.id); err != nil {
			return nil, err
		}
	}
	for _, port := range []int{upHTTP, upTCP} {
		if err := r.waitPassing(ctx, env.client, fmt.Sprintf("http://127.0.0.1:%d/", port)); err != nil {
			return nil, err
		}
	}
	return env, nil
}

// waitPassing retries an HTTP GET from inside the namespace until it
// answers 2xx (the sidecars are configured) or 60s pass.
func (r *Runner) waitPassing(ctx context.Context, netns, url string) error {
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, err := InNetns(ctx, netns, r.opts.Meshlet, "demo-app", "get", "-timeout", "2s", url).CombinedOutput()
		if err == nil {
			return nil
		}
		last = lastLines(string(out), 1, nil)
	}
	return fmt.Errorf("no traffic through the mesh to %s after 60s: %s", url, last)
}

// sidecarUsage is CPU (vCPU) and memory (MB: VmRSS, RssAnon, PSS) of a
// process over a load run, and the share of its CPU its busiest thread
// used (0 to 1).
type sidecarUsage struct {
	name                string
	vcpu, mb, anon, pss float64
	topThread           float64
	// user and sys split vcpu; switches are context switches per second.
	user, sys, switches float64
	err                 error
}

// watch samples processes before and after fn and returns their usage.
func watch(procs map[string]int, fn func() error) (map[string]sidecarUsage, error) {
	before := map[string]ProcSample{}
	for name, pid := range procs {
		s, err := SampleProc(pid)
		if err != nil {
			return nil, err
		}
		before[name] = s
	}
	start := time.Now()
	if err := fn(); err != nil {
		return nil, err
	}
	wall := time.Since(start).Seconds()
	out := map[string]sidecarUsage{}
	for name, pid := range procs {
		s, err := SampleProc(pid)
		b := before[name]
		out[name] = sidecarUsage{name: name, vcpu: (s.CPUSeconds - b.CPUSeconds) / wall, mb: float64(s.RSSBytes) / 1e6,
			anon: float64(s.AnonBytes) / 1e6, pss: float64(s.PssBytes) / 1e6, topThread: busiestThreadShare(b, s),
			user: (s.UserSeconds - b.UserSeconds) / wall, sys: (s.SysSeconds - b.SysSeconds) / wall,
			switches: float64(s.CtxSwitches-b.CtxSwitches) / wall, err: err}
	}
	return out, nil
}

func dataPlaneNotMeasured(why string) []*Figure {
	figs := []*Figure{
		NotMeasured("HTTP latency p50 at 1,000 rps", "ms", why, &Target{Of: OfAdded, Op: "<=", Limit: 0.2}),
		NotMeasured("HTTP latency p99 at 1,000 rps", "ms", why, &Target{Of: OfAdded, Op: "<=", Limit: 1}),
		NotMeasured(fmt.Sprintf("HTTP max rps at %d connections", maxConns), "1/s", why, &Target{Of: OfRatio, Op: ">=", Limit: 0.6}),
		NotMeasured("new connections per second", "1/s", why, nil),
		NotMeasured("TCP bulk throughput (iperf3)", "Gbit/s", why, &Target{Of: OfRatio, Op: ">=", Limit: 0.5}),
		NotMeasured("sidecar CPU per 1,000 rps", "vCPU", why, &Target{Op: "<=", Limit: 0.1}),
		NotMeasured("sidecar memory (PSS) at 1,000 rps", "MB", why, &Target{Op: "<=", Limit: 30}),
	}
	for _, p := range peerNames {
		figs = append(figs, peerFigures(nil, nil, p, errors.New(why))...)
	}
	return figs
}

// hopFinding estimates what the extra socket crossings alone cost at the
// fixed rate: the baseline's p50 is one crossing each way (a wake-up of
// the receiving process included); through the mesh a request crosses
// three each way (client → sidecar → sidecar → app).
func hopFinding(figs []*Figure) string {
	for _, f := range figs {
		if f.Name != "HTTP latency p50 at 1,000 rps" || f.Value == nil || f.Baseline == nil {
			continue
		}
		perHop := *f.Baseline / 2
		return fmt.Sprintf("Socket crossings: the direct p50 (%.2f ms) is one crossing each way, about %.2f ms per crossing "+
			"on this machine (the receiving process's wake-up included). Through the mesh a request crosses three sockets each "+
			"way, so crossings alone put the mesh p50 near %.2f ms (+%.2f ms) before any proxy work; measured: %.2f ms. "+
			"The p50 target (+0.2 ms) is below what the four extra crossings cost here.",
			*f.Baseline, perHop, 6*perHop, 4*perHop, *f.Value)
	}
	return ""
}

// cpuFinding turns the sidecars' CPU at the fixed rate into CPU time per
// request, which is what the latency and throughput targets run into on a
// small machine.
func cpuFinding(figs []*Figure) string {
	var parts []string
	for _, f := range figs {
		if f.Unit == "vCPU" && f.Value != nil && strings.Contains(f.Name, "CPU per 1,000 rps") {
			side, _, _ := strings.Cut(f.Name, " CPU")
			parts = append(parts, fmt.Sprintf("%s %.0f µs", side, *f.Value/fixedRate*1e6))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("CPU per proxied HTTP request at %d rps: %s (the app itself is the baseline column). "+
		"Every request costs both sidecars this much CPU on cores they share with the load generator and the apps, "+
		"so the added latency and the max-rps ratio follow from the per-request CPU cost shown in the profiles below.",
		fixedRate, strings.Join(parts, ", "))
}
