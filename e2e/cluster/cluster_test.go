package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	nomadapi "github.com/hashicorp/nomad/api"
)

// cluster is a set of agents on one test network, sharing a CA. Its
// cleanup runs before the network's: agents are SIGKILLed (and their logs
// printed when the test failed) while their namespaces still exist.
type cluster struct {
	t        *testing.T
	bin      string
	cniPath  string
	net      *testNet
	certDir  string // CA, certificates, configs and logs
	dataRoot string // short: unix socket paths under data dirs are limited
	// token is the management token's secret: every agent runs with ACLs
	// and the first wait for a leader or for ready nodes bootstraps with
	// it (booted); the CLI and the API clients send it.
	token  string
	booted atomic.Bool

	mu     sync.Mutex
	agents []*agent
}

// newCluster makes the network and the CA; agents are added with
// AddServer and AddClient.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	bin, cniPath := binaries(t)
	dataRoot, err := os.MkdirTemp("", "mlc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataRoot) })
	c := &cluster{t: t, bin: bin, cniPath: cniPath, certDir: t.TempDir(), dataRoot: dataRoot, token: uuid.NewString()}
	c.net = newTestNet(t)
	t.Cleanup(c.stop)
	c.tls("ca", "create")
	return c
}

// stop kills every agent, first printing their logs if the test failed.
func (c *cluster) stop() {
	c.mu.Lock()
	agents := c.agents
	c.mu.Unlock()
	for _, a := range agents {
		if c.t.Failed() {
			c.t.Logf("---- agent %s (%s) log, last 40 lines of %s:\n%s", a.Name, a.IP, a.LogPath, a.Tail(40))
		}
		a.Kill()
		if a.api != nil {
			a.api.Close()
		}
	}
	for _, a := range agents {
		removeAllocNamespaces(c.t, a)
	}
	// Tasks outlive a killed agent (as Nomad's do); the test's must not
	// outlive the test. They all run in an alloc dir under dataRoot.
	if pids := killUnder(c.dataRoot); len(pids) > 0 {
		c.t.Logf("cleanup: killed %d task processes left by the killed agents: %v", len(pids), pids)
	}
}

// killUnder kills every process whose working directory is under dir and
// returns their PIDs.
func killUnder(dir string) []int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cwd")
	var out []int
	for _, p := range procs {
		cwd, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(strings.TrimSuffix(cwd, " (deleted)"), dir+"/") {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			out = append(out, pid)
		}
	}
	return out
}

// removeAllocNamespaces deletes the network namespaces of a killed agent's
// allocations (named by allocation ID, bind-mounted where the host's
// namespaces are, so they outlive the agent's host) and kills what still
// runs in them.
func removeAllocNamespaces(t *testing.T, a *agent) {
	entries, err := os.ReadDir(filepath.Join(a.DataDir, "alloc"))
	if err != nil {
		return
	}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join("/var/run/netns", e.Name())); err != nil {
			continue
		}
		if left := killNamespace(e.Name()); len(left) > 0 {
			t.Errorf("cleanup: processes %v survived in allocation namespace %s", left, e.Name())
		}
		if out, err := exec.Command("ip", "netns", "delete", e.Name()).CombinedOutput(); err != nil {
			t.Errorf("cleanup: ip netns delete %s: %v: %s", e.Name(), err, out)
		}
	}
}

// tls runs `meshlet tls ARGS` in the certificate dir.
func (c *cluster) tls(args ...string) {
	c.t.Helper()
	cmd := exec.Command(c.bin, append([]string{"tls"}, args...)...)
	cmd.Dir = c.certDir
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("meshlet tls %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// tlsBlock makes the certificate of role ("server" or "client") for the
// named host and returns the agent's tls block.
func (c *cluster) tlsBlock(role, name, ip string) string {
	c.t.Helper()
	args := []string{"cert", "create", "-" + role, "-node", name}
	if role == "server" {
		args = append(args, "-additional-ipaddress", ip)
	}
	c.tls(args...)
	path := func(f string) string { return filepath.Join(c.certDir, f) }
	return fmt.Sprintf(`tls {
  rpc                    = true
  ca_file                = %q
  cert_file              = %q
  key_file               = %q
  verify_server_hostname = true
}
`, path("meshlet-agent-ca.pem"), path("global-"+role+"-meshlet-"+name+".pem"), path("global-"+role+"-meshlet-"+name+"-key.pem"))
}

// add writes the config of agent name on host number host (the common
// head, body and the tls block of its role) and starts it.
func (c *cluster) add(name string, host int, server bool, body string) *agent {
	c.t.Helper()
	role := "client"
	if server {
		role = "server"
	}
	ip := c.net.Addr(host)
	cfg := fmt.Sprintf(`data_dir  = %q
bind_addr = %q
node_name = %q
log_level = "debug"
acl {
  enabled = true
}
`, filepath.Join(c.dataRoot, name), ip, name) + body + c.tlsBlock(role, name, ip)
	return c.startAgent(name, host, server, cfg)
}

// startAgent creates host number host named name and starts an agent on
// config cfg in it (data dir dataRoot/name).
func (c *cluster) startAgent(name string, host int, server bool, cfg string) *agent {
	c.t.Helper()
	a := &agent{t: c.t, Name: name, IP: c.net.Addr(host), Server: server, token: c.token,
		DataDir: filepath.Join(c.dataRoot, name), LogPath: filepath.Join(c.certDir, name+".log"),
		ConfigPath: filepath.Join(c.certDir, name+".hcl")}
	a.argv = []string{c.bin, "agent", "-config", a.ConfigPath}
	if err := os.WriteFile(a.ConfigPath, []byte(cfg), 0o600); err != nil {
		c.t.Fatal(err)
	}
	a.NS = c.net.AddHost(name, host)
	c.mu.Lock()
	c.agents = append(c.agents, a)
	c.mu.Unlock()
	a.Start()
	return a
}

// AddServer starts a server on host number host. With join, it joins
// through those servers (server_join.retry_join); bootstrapExpect is the
// number of servers the cluster waits for.
func (c *cluster) AddServer(name string, host, bootstrapExpect int, join ...*agent) *agent {
	c.t.Helper()
	joinBlock := ""
	if len(join) > 0 {
		joinBlock = fmt.Sprintf("  server_join {\n    retry_join = %s\n  }\n", hclList(rpcAddrs(join)))
	}
	return c.add(name, host, true, fmt.Sprintf(`ports {
  http = %d
  rpc  = %d
}
server {
  enabled           = true
  bootstrap_expect  = %d
  min_heartbeat_ttl = "2s"
  heartbeat_grace   = "2s"
%s}
client {
  enabled = false
}
`, httpPort, rpcPort, bootstrapExpect, joinBlock))
}

// AddClient starts a client on host number host that reaches the cluster
// through servers.
func (c *cluster) AddClient(name string, host int, servers ...*agent) *agent {
	c.t.Helper()
	return c.add(name, host, false, c.clientConfig(servers))
}

// clientConfig is a client agent's config body (after the common head).
func (c *cluster) clientConfig(servers []*agent) string {
	return fmt.Sprintf(`ports {
  http = %d
}
server {
  enabled = false
}
client {
  enabled  = true
  servers  = %s
  cni_path = %q
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`, httpPort, hclList(rpcAddrs(servers)), c.cniPath)
}

func rpcAddrs(agents []*agent) []string {
	out := make([]string, len(agents))
	for i, a := range agents {
		out[i] = a.RPCAddr()
	}
	return out
}

func hclList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// WaitLeader waits until every one of servers names the same leader and
// returns it (an RPC address).
func (c *cluster) WaitLeader(timeout time.Duration, servers ...*agent) (string, time.Duration) {
	c.t.Helper()
	var leader string
	took := poll(c.t, timeout, "a leader all servers agree on", func() (bool, string) {
		leader = ""
		for _, s := range servers {
			s.checkAlive()
			l, err := s.Leader()
			switch {
			case err != nil:
				return false, fmt.Sprintf("%s: %v", s.Name, err)
			case l == "":
				return false, fmt.Sprintf("%s knows no leader", s.Name)
			case leader != "" && l != leader:
				return false, fmt.Sprintf("%s says %s, another server %s", s.Name, l, leader)
			}
			leader = l
		}
		return true, ""
	})
	poll(c.t, timeout, "the ACL bootstrap", func() (bool, string) {
		if err := c.bootstrapACL(servers[0]); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return leader, took
}

// bootstrapACL makes the cluster's management token with the chosen
// secret through via, once; a cluster bootstrapped before is fine.
func (c *cluster) bootstrapACL(via *agent) error {
	if c.booted.Load() {
		return nil
	}
	anon, err := nomadapi.NewClient(&nomadapi.Config{Address: via.HTTPAddr(),
		HttpClient: &http.Client{Timeout: 10 * time.Second}})
	if err != nil {
		return err
	}
	defer anon.Close()
	_, _, err = anon.ACLTokens().BootstrapOpts(c.token, nil)
	if err != nil && !strings.Contains(err.Error(), "bootstrap already done") {
		return fmt.Errorf("ACL bootstrap through %s: %w", via.Name, err)
	}
	c.booted.Store(true)
	return nil
}

// WaitNodesReady waits until via lists every client's node as ready.
func (c *cluster) WaitNodesReady(timeout time.Duration, via *agent, clients ...*agent) time.Duration {
	c.t.Helper()
	return poll(c.t, timeout, "client nodes ready", func() (bool, string) {
		via.checkAlive()
		for _, cl := range clients {
			cl.checkAlive()
		}
		if err := c.bootstrapACL(via); err != nil {
			return false, err.Error()
		}
		status, err := c.nodeStatus(via)
		if err != nil {
			return false, err.Error()
		}
		for _, cl := range clients {
			if status[cl.Name] != "ready" {
				return false, fmt.Sprintf("nodes %v", status)
			}
		}
		return true, ""
	})
}

// nodeStatus maps node name to status as via lists them.
func (c *cluster) nodeStatus(via *agent) (map[string]string, error) {
	nodes, _, err := via.API().Nodes().List(nil)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range nodes {
		out[n.Name] = n.Status
	}
	return out, nil
}

// nodeNames maps node ID to name as via lists them.
func (c *cluster) nodeNames(via *agent) map[string]string {
	c.t.Helper()
	nodes, _, err := via.API().Nodes().List(nil)
	if err != nil {
		c.t.Fatalf("list nodes through %s: %v", via.Name, err)
	}
	out := map[string]string{}
	for _, n := range nodes {
		out[n.ID] = n.Name
	}
	return out
}

// CLI runs the meshlet CLI against via's HTTP API.
func (c *cluster) CLI(via *agent, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(os.Environ(), "MESHLET_ADDR="+via.HTTPAddr(), "MESHLET_TOKEN="+c.token)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("meshlet %s: %w", strings.Join(args, " "), err)
	}
	return out.String(), err
}
