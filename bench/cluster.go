package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/rpc"
	"github.com/meshlet/meshlet/structs"
)

// Cluster area sizes (the issue's): 1,000 allocations over 50 simulated
// client nodes, against the same on one node.
const (
	clusterNodes     = 50
	clusterAllocs    = 1000
	clusterGroups    = 10 // the placement job: 10 groups of 100
	planRegistration = 20 // the plan latency: 20 jobs ...
	planCount        = 20 // ... of 20 allocations each
	hbWorkers        = 50 // concurrent heartbeat callers
	hbDuration       = 5 * time.Second
	hbMaxCalls       = 500_000
	// phaseTimeout bounds one phase (server start to stop); a step that
	// runs out of it is reported not measured.
	phaseTimeout = 120 * time.Second
	// planWait bounds the wait for one plan job's allocations to run.
	planWait = 20 * time.Second
)

// clusterPhase is what one server with n simulated nodes measured.
type clusterPhase struct {
	nodes int
	ttl   time.Duration

	place    time.Duration // register → every allocation reported running
	apiCheck string        // what the API said afterwards, when not all running
	// CPU seconds the server and the bench process (the simulated nodes)
	// used during the placement.
	placeCPU, simCPU float64
	placeFetches     int64 // NodeAllocs answers during the placement
	idleRSS          int64
	rss              int64 // after the placement

	plan    []time.Duration // each registration's latency
	planRun []time.Duration // each registration → its allocations running
	planBad int             // evaluations not complete on return

	hbRate    float64
	hbCalls   int64
	hbErrors  int64
	nodesDown int // nodes other than a killed one down after the heartbeat run
	death     time.Duration
	deathDown time.Duration // death → node marked down
	deathLost int           // allocations on the killed node
	deathErr  error
	planErr   error
	hbErr     error
	placeErr  error
}

func (r *Runner) cluster(ctx context.Context) *Area {
	a := &Area{
		Name: "Cluster",
		Intro: fmt.Sprintf("A server-only agent (bin/meshlet, embedded etcd, min_heartbeat_ttl 2s, heartbeat_grace 1s) with "+
			"%d simulated client nodes in the bench process: goroutines speaking the real RPC (rpc.Client, plaintext on "+
			"127.0.0.1, no TLS) that register, heartbeat at half the TTL the server returns, long-poll their allocations "+
			"and report each new one running (no task runs). Jobs are registered through the agent's HTTP API "+
			"(raw_exec, cpu 10, memory 10). Baseline: the same measurements against a fresh server with one simulated "+
			"node (the single-node figure). The load generator shares the machine's cores with the server.", clusterNodes),
	}
	base := r.clusterPhase(ctx, 1)
	many := r.clusterPhase(ctx, clusterNodes)
	a.Figures = clusterFigures(many, base)
	a.Findings = clusterFindings(many, base)
	return a
}

// clusterPhase starts a server and n simulated nodes and measures, in
// order: placement and memory, a node's death (n > 1), plan latency and
// the heartbeat rate.
func (r *Runner) clusterPhase(ctx context.Context, n int) *clusterPhase {
	p := &clusterPhase{nodes: n}
	ctx, cancel := context.WithTimeout(ctx, phaseTimeout)
	defer cancel()
	fail := func(err error) *clusterPhase {
		p.placeErr, p.planErr, p.hbErr, p.deathErr = err, err, err, err
		return p
	}
	r.seq++
	srv, err := startServerAgent(ctx, r.opts.Meshlet, filepath.Join(r.scratch, fmt.Sprintf("cluster%d", r.seq)))
	if err != nil {
		return fail(err)
	}
	defer srv.stop()
	log := r.log.Named("cluster")
	log.Info("simulated nodes speak plaintext RPC on loopback", "nodes", n, "server", srv.RPCAddr)
	sim, err := startSimCluster(ctx, srv.RPCAddr, n, log)
	if err != nil {
		return fail(fmt.Errorf("%w: %s", err, srv.LogTail(2)))
	}
	defer sim.stop()
	p.ttl = sim.nodes[0].TTL()
	time.Sleep(time.Second) // let the registrations' garbage settle
	if s, err := SampleProc(srv.PID()); err == nil {
		p.idleRSS = s.RSSBytes
	}
	if p.placeErr = r.clusterPlace(ctx, srv, sim, p); p.placeErr != nil {
		p.planErr, p.hbErr, p.deathErr = p.placeErr, p.placeErr, p.placeErr
		return p
	}
	alive := sim.nodes
	if n > 1 {
		log.Info("killing a simulated node", "nodes", n)
		p.deathErr = clusterDeath(ctx, srv, sim, p)
		alive = sim.nodes[1:]
	}
	log.Info("timing plan commits", "nodes", n, "jobs", planRegistration)
	p.planErr = clusterPlan(ctx, srv, sim, p)
	log.Info("heartbeat load", "nodes", n, "callers", hbWorkers, "duration", hbDuration)
	p.hbErr = clusterHeartbeats(ctx, srv, alive, p)
	if nodes, _, err := srv.Nomad().Nodes().List(nil); err == nil {
		for _, nd := range nodes {
			if nd.Status != structs.NodeStatusReady && nd.ID != sim.nodes[0].node.ID {
				p.nodesDown++
			}
		}
	}
	log.Info("phase done", "nodes", n)
	return p
}

// clusterJob is a raw_exec service job of groups groups of count each.
func clusterJob(id string, groups, count int) *nomadapi.Job {
	job := nomadapi.NewServiceJob(id, id, "global", 50)
	job.Datacenters = []string{"dc1"}
	for g := range groups {
		task := nomadapi.NewTask("t", "raw_exec")
		task.Config = map[string]any{"command": "/bin/sleep", "args": []string{"3600"}}
		task.Require(&nomadapi.Resources{CPU: ptr(10), MemoryMB: ptr(10)})
		job.AddTaskGroup(nomadapi.NewTaskGroup(fmt.Sprintf("g%02d", g), count).AddTask(task))
	}
	return job
}

// clusterPlace registers the placement job and waits until the nodes
// reported every allocation running; then it samples the server's RSS and
// checks through the API.
func (r *Runner) clusterPlace(ctx context.Context, srv *serverAgent, sim *simCluster, p *clusterPhase) error {
	before := sim.tally.running.Load()
	job := clusterJob("bench-place", clusterGroups, clusterAllocs/clusterGroups)
	cpu0, self0 := cpuSeconds(srv.PID()), cpuSeconds(os.Getpid())
	fetches := sim.tally.fetches.Load()
	start := time.Now()
	if _, _, err := srv.Nomad().Jobs().Register(job, nil); err != nil {
		return fmt.Errorf("failed to register the placement job: %w", err)
	}
	if err := sim.waitRunning(ctx, before, clusterAllocs, phaseTimeout); err != nil {
		return fmt.Errorf("placement job: %w (server log: %s)", err, srv.LogTail(2))
	}
	p.place = time.Since(start)
	p.placeCPU, p.simCPU = cpuSeconds(srv.PID())-cpu0, cpuSeconds(os.Getpid())-self0
	p.placeFetches = sim.tally.fetches.Load() - fetches
	time.Sleep(500 * time.Millisecond)
	if s, err := SampleProc(srv.PID()); err == nil {
		p.rss = s.RSSBytes
	}
	if got, err := runningAllocs(srv, "bench-place", ""); err != nil || got != clusterAllocs {
		p.apiCheck = fmt.Sprintf("after the placement the API lists %d of %d allocations running (err %v)", got, clusterAllocs, err)
	}
	return nil
}

// runningAllocs counts the job's allocations running and meant to run,
// except those on node skip.
func runningAllocs(srv *serverAgent, jobID, skip string) (int, error) {
	allocs, _, err := srv.Nomad().Jobs().Allocations(jobID, false, nil)
	n := 0
	for _, al := range allocs {
		if al.ClientStatus == structs.AllocClientStatusRunning && al.DesiredStatus == structs.AllocDesiredStatusRun && al.NodeID != skip {
			n++
		}
	}
	return n, err
}

// clusterDeath kills the first simulated node and times until as many
// allocations as it ran are running on others, and until it is down.
func clusterDeath(ctx context.Context, srv *serverAgent, sim *simCluster, p *clusterPhase) error {
	victim := sim.nodes[0]
	p.deathLost = victim.live()
	before := sim.tally.running.Load()
	start := time.Now()
	victim.kill()
	var down atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nd, _, err := srv.Nomad().Nodes().Info(victim.node.ID, nil)
			if err == nil && nd.Status == structs.NodeStatusDown {
				down.Store(int64(time.Since(start)))
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	err := sim.waitRunning(ctx, before, p.deathLost, time.Minute)
	p.death = time.Since(start)
	close(stop)
	wg.Wait()
	p.deathDown = time.Duration(down.Load())
	if err != nil {
		return fmt.Errorf("replacements of a dead node's %d allocations: %w", p.deathLost, err)
	}
	if got, err := runningAllocs(srv, "bench-place", victim.node.ID); err != nil || got != clusterAllocs {
		return fmt.Errorf("after the replacements the API lists %d of %d allocations running on live nodes (err %v)", got, clusterAllocs, err)
	}
	return nil
}

// clusterPlan registers planRegistration jobs of planCount allocations one
// after another and times each registration (the server plans and
// commits before it answers); each job's allocations run before the next
// is registered, so that every plan meets a settled cluster.
func clusterPlan(ctx context.Context, srv *serverAgent, sim *simCluster, p *clusterPhase) error {
	for i := range planRegistration {
		before := sim.tally.running.Load()
		job := clusterJob(fmt.Sprintf("bench-plan-%02d", i), 1, planCount)
		start := time.Now()
		resp, _, err := srv.Nomad().Jobs().Register(job, nil)
		if err != nil {
			return fmt.Errorf("failed to register plan job %d: %w", i, err)
		}
		p.plan = append(p.plan, time.Since(start))
		if ev, _, err := srv.Nomad().Evaluations().Info(resp.EvalID, nil); err != nil || ev.Status != nomadapi.EvalStatusComplete ||
			len(ev.FailedTGAllocs) > 0 {
			p.planBad++
		}
		if err := sim.waitRunning(ctx, before, planCount, planWait); err != nil {
			return fmt.Errorf("plan job %d: %w", i, err)
		}
		p.planRun = append(p.planRun, time.Since(start))
	}
	return nil
}

// cpuSeconds is a process's CPU time so far; 0 when it cannot be read.
func cpuSeconds(pid int) float64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	cpu, _ := ParseProcStat(string(st))
	return cpu
}

// clusterHeartbeats runs hbWorkers callers, each with its own connection
// and heartbeating as one of nodes back to back, for hbDuration (at most
// hbMaxCalls calls in all).
func clusterHeartbeats(ctx context.Context, srv *serverAgent, nodes []*simNode, p *clusterPhase) error {
	clients := make([]*rpc.Client, hbWorkers)
	for i := range clients {
		nd := nodes[i%len(nodes)].node
		c, err := rpc.NewClient(rpc.ClientConfig{Servers: []string{srv.RPCAddr}, NodeID: nd.ID, NodeSecret: nd.SecretID,
			Logger: hclog.NewNullLogger()})
		if err != nil {
			return err
		}
		defer c.Close()
		clients[i] = c
	}
	var calls, errs atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(ctx, hbDuration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := nodes[i%len(nodes)].node.ID
			for ctx.Err() == nil && calls.Load() < hbMaxCalls {
				_, err := c.Heartbeat(ctx, id)
				switch {
				case err == nil:
					calls.Add(1)
				case ctx.Err() == nil:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	p.hbCalls, p.hbErrors = calls.Load(), errs.Load()
	p.hbRate = float64(p.hbCalls) / took.Seconds()
	if p.hbCalls == 0 {
		if e, ok := firstErr.Load().(error); ok {
			return e
		}
		return errors.New("no heartbeat answered")
	}
	return nil
}
