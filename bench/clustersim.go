package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/rpc"
	"github.com/meshlet/meshlet/structs"
)

// Cluster harness: a server-only agent (bin/meshlet) and simulated client
// nodes in this process that speak the real RPC (rpc.Client) but run no
// tasks: they register, heartbeat and report every allocation placed on
// them as running.

// serverAgentConfig is the HCL of a server-only agent on loopback with
// the given ports (http, rpc, connect_http, grpc) and plaintext RPC.
func serverAgentConfig(dataDir string, ports []int) string {
	return fmt.Sprintf(`data_dir  = %q
bind_addr = "127.0.0.1"
log_level = "info"
ports {
  http         = %d
  rpc          = %d
  connect_http = %d
  grpc         = %d
}
server {
  enabled           = true
  min_heartbeat_ttl = "2s"
  heartbeat_grace   = "1s"
}
client {
  enabled = false
}
`, dataDir, ports[0], ports[1], ports[2], ports[3])
}

// serverAgent is a server-only agent and its RPC address.
type serverAgent struct {
	*Agent
	RPCAddr string
}

// startServerAgent starts a server-only agent with its data dir and log
// below dir and waits until it has elected itself leader.
func startServerAgent(ctx context.Context, bin, dir string) (*serverAgent, error) {
	ports, err := freePorts(4)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	a := &Agent{Bin: bin, DataDir: filepath.Join(dir, "data"), logDir: dir,
		HTTPAddr: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		ConnAddr: fmt.Sprintf("http://127.0.0.1:%d", ports[2]), done: make(chan struct{})}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	cfgPath := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(serverAgentConfig(a.DataDir, ports)), 0o600); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	if a.log, err = os.Create(filepath.Join(dir, "agent.log")); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	a.cmd = exec.Command(bin, "agent", "-config", cfgPath)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		a.log.Close()
		return nil, fmt.Errorf("%w: failed to start: %w", ErrAgent, err)
	}
	go func() { _ = a.cmd.Wait(); close(a.done) }()
	// The shared API client, with a bound on every call: a server
	// overwhelmed by the load must not hang the bench.
	a.nomadOnce.Do(func() {
		a.nomad, _ = nomadapi.NewClient(&nomadapi.Config{Address: a.HTTPAddr,
			HttpClient: &http.Client{Timeout: 20 * time.Second}})
	})
	s := &serverAgent{Agent: a, RPCAddr: "127.0.0.1:" + strconv.Itoa(ports[1])}
	if err := s.waitLeader(ctx); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *serverAgent) waitLeader(ctx context.Context) error {
	deadline := time.Now().Add(45 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		l, err := s.Nomad().Status().Leader()
		if err == nil && l != "" {
			return nil
		}
		last = err
		select {
		case <-s.done:
			return fmt.Errorf("%w: exited during start: %s", ErrAgent, s.LogTail(3))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%w: no leader after 45s (last error: %v): %s", ErrAgent, last, s.LogTail(3))
}

// stop interrupts the agent (killing it after 20 s) and removes its data
// dir; the log stays in the scratch dir.
func (s *serverAgent) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	s.Nomad().Close()
	s.log.Close()
	_ = os.RemoveAll(s.DataDir)
}

// tally counts the allocations the simulated nodes reported running.
type tally struct {
	running atomic.Int64
	// fetches counts NodeAllocs answers: node wake-ups.
	fetches atomic.Int64
}

// simNode is one simulated client node.
type simNode struct {
	node   *structs.Node
	client *rpc.Client
	tally  *tally
	log    hclog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	ttl  time.Duration
	sent map[string]string // allocation ID → client status reported
}

// simNodeSpec is the node a simulated client registers: ready, raw_exec
// healthy, and capacity for thousands of small allocations.
func simNodeSpec(i int) *structs.Node {
	return &structs.Node{
		ID: uuid.NewString(), Name: fmt.Sprintf("sim-%03d", i), Datacenter: "dc1",
		Status: structs.NodeStatusReady, SecretID: uuid.NewString(),
		Drivers:    map[string]*structs.DriverInfo{"raw_exec": {Detected: true, Healthy: true}},
		Attributes: map[string]string{"driver.raw_exec": "1", "kernel.name": "linux"},
		NodeResources: &structs.NodeResources{
			Cpu:    structs.NodeCpuResources{CpuShares: 1_000_000, TotalCpuCores: 64},
			Memory: structs.NodeMemoryResources{MemoryMB: 1_000_000},
			Disk:   structs.NodeDiskResources{DiskMB: 1_000_000},
		},
	}
}

// startSimNode registers node i with the server at addr and starts its
// heartbeat and watch loops.
func startSimNode(ctx context.Context, addr string, i int, t *tally, log hclog.Logger) (*simNode, error) {
	// Plaintext on loopback: the client would warn once per node.
	c, err := rpc.NewClient(rpc.ClientConfig{Servers: []string{addr}, Logger: hclog.NewNullLogger(),
		BlockingWait: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	n := &simNode{node: simNodeSpec(i), client: c, tally: t, log: log, sent: map[string]string{}}
	n.ctx, n.cancel = context.WithCancel(ctx)
	if err := c.RegisterNode(n.ctx, n.node); err != nil {
		n.cancel()
		c.Close()
		return nil, fmt.Errorf("failed to register simulated node %s: %w", n.node.Name, err)
	}
	ttl, err := c.Heartbeat(n.ctx, n.node.ID)
	if err != nil {
		n.cancel()
		c.Close()
		return nil, fmt.Errorf("failed to heartbeat simulated node %s: %w", n.node.Name, err)
	}
	n.ttl = ttl
	n.wg.Add(2)
	go n.heartbeat()
	go n.watch()
	return n, nil
}

// TTL is the heartbeat interval the server last returned.
func (n *simNode) TTL() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ttl
}

// kill stops the node's loops and connections, as a node dying would.
func (n *simNode) kill() {
	n.cancel()
	n.client.Close()
	n.wg.Wait()
}

// live counts the allocations this node reported running and not since
// complete.
func (n *simNode) live() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, st := range n.sent {
		if st == structs.AllocClientStatusRunning {
			c++
		}
	}
	return c
}

// heartbeat heartbeats at half the server's TTL, re-registering when the
// server forgot the node.
func (n *simNode) heartbeat() {
	defer n.wg.Done()
	next := n.TTL() / 2
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(next):
		}
		ttl, err := n.client.Heartbeat(n.ctx, n.node.ID)
		if n.ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			n.mu.Lock()
			n.ttl = ttl
			n.mu.Unlock()
			next = ttl / 2
			continue
		case errors.Is(err, structs.ErrUnknownNode):
			if rerr := n.client.RegisterNode(n.ctx, n.node); rerr != nil {
				n.log.Warn("simulated node failed to register again", "node_id", n.node.ID, "error", rerr)
			}
		default:
			n.log.Warn("simulated node failed to heartbeat", "node_id", n.node.ID, "error", err)
		}
		next = 500 * time.Millisecond
	}
}

// watch follows the node's allocations and reports the new ones running
// and the stopped ones complete.
func (n *simNode) watch() {
	defer n.wg.Done()
	var index uint64
	for n.ctx.Err() == nil {
		allocs, idx, err := n.client.NodeAllocs(n.ctx, n.node.ID, index)
		if n.ctx.Err() != nil {
			return
		}
		if err != nil {
			n.log.Warn("simulated node failed to fetch allocations", "node_id", n.node.ID, "error", err)
			sleepCtx(n.ctx, 500*time.Millisecond)
			continue
		}
		n.tally.fetches.Add(1)
		prev := index
		index = idx
		n.mu.Lock()
		ups := simUpdates(allocs, n.sent)
		n.mu.Unlock()
		if len(ups) == 0 {
			continue
		}
		if err := n.client.UpdateAllocs(n.ctx, ups); err != nil {
			if n.ctx.Err() == nil {
				n.log.Warn("simulated node failed to update allocations", "node_id", n.node.ID, "error", err)
			}
			// Fetch again at once and retry, as the real client does.
			index = prev
			sleepCtx(n.ctx, 500*time.Millisecond)
			continue
		}
		n.mu.Lock()
		running := 0
		for _, u := range ups {
			n.sent[u.ID] = u.ClientStatus
			if u.ClientStatus == structs.AllocClientStatusRunning {
				running++
			}
		}
		n.mu.Unlock()
		n.tally.running.Add(int64(running))
	}
}

// simUpdates is what a client that runs every task at once reports for
// the server's view of its allocations: running for a new allocation
// meant to run, complete for one the server stopped. sent (allocation ID →
// status already reported) keeps an update from being sent twice.
func simUpdates(allocs []*structs.Allocation, sent map[string]string) []*structs.Allocation {
	var out []*structs.Allocation
	for _, a := range allocs {
		want := ""
		switch {
		case a.TerminalStatus():
		case a.DesiredStatus == structs.AllocDesiredStatusRun:
			want = structs.AllocClientStatusRunning
		default:
			want = structs.AllocClientStatusComplete
		}
		if want == "" || a.ClientStatus == want || sent[a.ID] == want {
			continue
		}
		out = append(out, &structs.Allocation{ID: a.ID, ClientStatus: want})
	}
	return out
}

// sleepCtx sleeps d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// simCluster is the simulated nodes of one phase.
type simCluster struct {
	nodes []*simNode
	tally *tally
}

// startSimCluster registers n simulated nodes (a few at a time).
func startSimCluster(ctx context.Context, addr string, n int, log hclog.Logger) (*simCluster, error) {
	c := &simCluster{tally: &tally{}, nodes: make([]*simNode, n)}
	var wg sync.WaitGroup
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c.nodes[i], errs[i] = startSimNode(ctx, addr, i, c.tally, log)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// stop kills every node still alive.
func (c *simCluster) stop() {
	for _, n := range c.nodes {
		if n != nil && n.ctx.Err() == nil {
			n.kill()
		}
	}
}

// waitRunning waits until the nodes reported want more allocations
// running than before (a tally count).
func (c *simCluster) waitRunning(ctx context.Context, before int64, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for c.tally.running.Load()-before < int64(want) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d allocations reported running after %s", c.tally.running.Load()-before, want, timeout)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}
