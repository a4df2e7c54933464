package bench

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"
)

// The gateway area's job: bench/input/gateway.hcl. The gateway's http
// listener port and the Host it routes to the server.
const (
	gwJob    = "bench-gateway"
	gwPort   = 8080
	gwHost   = "bench-gw.example.com"
	gwDirect = "direct"
	gwIngr   = "ingress gateway"
	// Processes watched through the gateway.
	gwProcGateway = "gateway"
	gwProcSidecar = "server sidecar"
	gwProcApp     = "server app"
)

// gwEnv is the running bench-gateway job.
type gwEnv struct {
	ag            *Agent
	client        string // client allocation (= namespace name)
	srvIP, gwIP   string // the server's and the gateway's allocation addresses
	srvID, gwID   string
	directURL     string
	gatewayURL    string
	gatewayHostIn string // the Host header the gateway routes by
}

func (r *Runner) gateway(ctx context.Context) *Area {
	a := &Area{
		Name: "Ingress gateway (built-in proxy)",
		Intro: "The real agent runs bench/input/gateway.hcl (bridge mode): an HTTP app behind its built-in sidecar and an " +
			"ingress gateway (the injected connect-ingress task, the built-in proxy in gateway mode) whose `http` listener " +
			"routes Host " + gwHost + " to it. fortio (HTTP/1.1, keep-alive) runs inside an idle client allocation's namespace. " +
			"**measured** = client → the gateway at its allocation's address (Host routing, then mTLS to the app's sidecar) → " +
			"the app. **baseline** = the same client straight to the app at its allocation's address, across namespaces. " +
			fmt.Sprintf("Each figure is the median of %d rounds; in every round the two paths run one after the other, in an "+
				"order that alternates, and each block (fixed rate, max rate) waits first for a quiet machine. ", r.roundCount()) +
			fmt.Sprintf("Latency at a fixed 1,000 rps with %d connections; max rps at %d connections. Through the gateway a "+
				"request crosses three sockets each way (client → gateway → app's sidecar → app) against one direct.", fixedConns, maxConns),
	}
	env, err := r.startGateway(ctx)
	if err != nil {
		a.Figures = gatewayFigures(nil, nil, err)
		return a
	}
	defer env.ag.Stop()
	runs := r.measureGateway(ctx, env)
	if runs.rounds < dataRounds {
		a.Intro += fmt.Sprintf(" This run used %d rounds instead of %d (-data-rounds): a smoke run, not a result.", runs.rounds, dataRounds)
	}
	a.Figures = gatewayFigures(runs.arms[gwDirect], runs.arms[gwIngr], nil)
	if w := waitFinding(runs); w != "" {
		a.Findings = append(a.Findings, w)
	}
	return a
}

// startGateway starts an agent, runs the gateway job and waits until both
// paths answer.
func (r *Runner) startGateway(ctx context.Context) (*gwEnv, error) {
	if r.opts.Fortio == "" {
		return nil, fmt.Errorf("%w: fortio %q (scripts/bench.sh installs it)", ErrMissingTool, r.opts.Fortio)
	}
	ag, err := r.startAgent(ctx)
	if err != nil {
		return nil, err
	}
	env, err := r.gatewayJob(ctx, ag)
	if err != nil {
		ag.Stop()
		return nil, err
	}
	return env, nil
}

func (r *Runner) gatewayJob(ctx context.Context, ag *Agent) (*gwEnv, error) {
	if err := ag.RunJob(ctx, filepath.Join(r.opts.Repo, "bench", "input", "gateway.hcl")); err != nil {
		return nil, err
	}
	allocs, err := ag.Running(ctx, gwJob, 3, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	env := &gwEnv{ag: ag, gatewayHostIn: gwHost}
	for _, al := range allocs {
		switch al.TaskGroup {
		case "client":
			env.client = al.ID
		case "srv-http":
			env.srvID = al.ID
		case "gateway":
			env.gwID = al.ID
		}
	}
	if env.client == "" || env.srvID == "" || env.gwID == "" {
		return nil, fmt.Errorf("%w: job %s lacks a client, srv-http or gateway allocation", ErrAgent, gwJob)
	}
	if env.srvIP, err = AllocIP(ctx, env.srvID); err != nil {
		return nil, err
	}
	if env.gwIP, err = AllocIP(ctx, env.gwID); err != nil {
		return nil, err
	}
	env.directURL = fmt.Sprintf("http://%s:%d/", env.srvIP, appHTTP)
	env.gatewayURL = fmt.Sprintf("http://%s:%d/", env.gwIP, gwPort)
	if err := r.waitPassing(ctx, env.client, env.directURL); err != nil {
		return nil, err
	}
	if err := waitHostRoute(ctx, env.gatewayURL, env.gatewayHostIn, 60*time.Second); err != nil {
		return nil, err
	}
	return env, nil
}

// waitHostRoute retries a GET with the given Host header from the host's
// namespace to an allocation's address (on the agent's bridge) until it
// answers 200 or limit passes.
func waitHostRoute(ctx context.Context, url, host string, limit time.Duration) error {
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	last := "no answer"
	for deadline := time.Now().Add(limit); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(200 * time.Millisecond) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("failed to build request to %s: %w", url, err)
		}
		req.Host = host
		resp, err := cl.Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = resp.Status
	}
	return fmt.Errorf("no traffic through the gateway to %s (Host %s) after %s: %s", url, host, limit, last)
}

// gwArm is one path of the gateway area: a URL, the Host it sends and
// the processes watched while it carries the fixed rate.
type gwArm struct {
	name, url, host string
	procs           func() map[string]int
}

func (a gwArm) Name() string            { return a.name }
func (a gwArm) HTTPURL() string         { return a.url }
func (a gwArm) ConnURL() string         { return a.url }
func (a gwArm) BulkAddr() (string, int) { return "", 0 }
func (a gwArm) Procs(string) map[string]int {
	if a.procs == nil {
		return map[string]int{}
	}
	return a.procs()
}

// gatewayProcs finds the processes to watch through the gateway: the
// gateway's proxy, the server's sidecar and the server app.
func (r *Runner) gatewayProcs(env *gwEnv) map[string]int {
	procs := map[string]int{}
	for _, p := range []struct {
		name, alloc string
		match       []string
	}{
		{gwProcGateway, env.gwID, []string{"connect"}},
		{gwProcSidecar, env.srvID, []string{"connect"}},
		{gwProcApp, env.srvID, []string{"demo-app", "counting"}},
	} {
		pids, err := FindProcInNetns(filepath.Join(NetnsDir, p.alloc), p.match, []string{"executor"})
		if err != nil {
			r.log.Warn("process not found", "process", p.name, "alloc_id", p.alloc, "error", err)
			continue
		}
		procs[p.name] = pids[0]
	}
	return procs
}

// measureGateway runs the fixed-rate and max-rate blocks over both paths,
// interleaved, and returns the per-round results.
func (r *Runner) measureGateway(ctx context.Context, env *gwEnv) *dpRuns {
	fo := Fortio{Bin: r.opts.Fortio, Netns: env.client, Dir: r.scratch}
	arms := []dpArm{gwArm{name: gwDirect, url: env.directURL},
		gwArm{name: gwIngr, url: env.gatewayURL, host: env.gatewayHostIn, procs: func() map[string]int { return r.gatewayProcs(env) }}}
	runs := &dpRuns{rounds: r.roundCount(), arms: map[string]*armRuns{}}
	for _, a := range arms {
		runs.arms[a.Name()] = &armRuns{errs: map[string]error{}}
	}
	host := func(a dpArm) string { return a.(gwArm).host }
	r.interleave(ctx, runs, "fixed rate", arms, func(a dpArm, res *armRuns) error {
		spec := LoadSpec{QPS: fixedRate, Conns: fixedConns, Duration: fixedDuration, KeepAlive: true, URL: a.HTTPURL(), Host: host(a)}
		var got FortioResult
		var errL error
		u, err := watch(a.Procs(loadHTTP), func() error { got, errL = fo.Run(ctx, spec); return errL })
		if errL != nil {
			return errL
		}
		if err != nil {
			// A process to watch is gone: measure latency anyway.
			if got, errL = fo.Run(ctx, spec); errL != nil {
				return errL
			}
			u = nil
		}
		res.fixed, res.usage = append(res.fixed, got), append(res.usage, u)
		return nil
	})
	r.interleave(ctx, runs, "max rate", arms, func(a dpArm, res *armRuns) error {
		got, err := fo.Run(ctx, LoadSpec{Conns: maxConns, Duration: maxDuration, KeepAlive: true, URL: a.HTTPURL(), Host: host(a)})
		if err != nil {
			return err
		}
		res.maxRPS = append(res.maxRPS, got.ActualQPS)
		return nil
	})
	return runs
}
