package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/internal/tlsutil"
)

// Agents of the Cluster mesh area: one server and meshClients client
// agents, each a `meshlet agent` process group started with `ip netns
// exec` in its own host namespace on the bench's bridge, RPC over mutual
// TLS with certificates from `meshlet tls ca create` / `tls cert create`.

const (
	meshHTTPPort = 4646
	meshRPCPort  = 4647
	// meshServerHost is the server's host number; clients are 5, 6, 7.
	meshServerHost = 2
	meshClients    = 3
)

// meshAgent is one agent process group in its host namespace.
type meshAgent struct {
	Name, IP, NS string
	logPath      string
	cmd          *exec.Cmd
	done         chan struct{}
	api          *nomadapi.Client
}

func (a *meshAgent) HTTPAddr() string { return fmt.Sprintf("http://%s:%d", a.IP, meshHTTPPort) }
func (a *meshAgent) RPCAddr() string  { return fmt.Sprintf("%s:%d", a.IP, meshRPCPort) }

// tail is the last n lines of the agent's log on one line.
func (a *meshAgent) tail(n int) string {
	b, _ := os.ReadFile(a.logPath)
	return lastLines(string(b), n, nil)
}

// stop interrupts the agent's process group, killing it after 15 s.
func (a *meshAgent) stop() {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
	}
	if a.api != nil {
		a.api.Close()
	}
}

// meshCluster is the area's network, CA and agents.
type meshCluster struct {
	bin, cniPath string
	dir          string // certificates, configs, logs
	dataRoot     string // short: unix socket paths under data dirs are limited
	net          *meshNet
	server       *meshAgent
	clients      []*meshAgent
	log          hclog.Logger
}

// startMeshCluster makes the network and the CA, starts the server and
// the client agents and waits until every client node is ready.
func startMeshCluster(ctx context.Context, bin, cniPath, dir string, log hclog.Logger) (*meshCluster, error) {
	c := &meshCluster{bin: bin, cniPath: cniPath, dir: dir, log: log}
	var err error
	if err = os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	if c.dataRoot, err = os.MkdirTemp("", "mlbm"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	if c.net, err = newMeshNet(); err != nil {
		_ = os.RemoveAll(c.dataRoot)
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (c *meshCluster) start(ctx context.Context) error {
	if err := c.tls("ca", "create"); err != nil {
		return err
	}
	var err error
	if c.server, err = c.add("s1", meshServerHost, true); err != nil {
		return err
	}
	for i := range meshClients {
		cl, err := c.add(fmt.Sprintf("c%d", i+1), 5+i, false)
		if err != nil {
			return err
		}
		c.clients = append(c.clients, cl)
	}
	return c.waitNodes(ctx, 90*time.Second)
}

// stop stops every agent (clients first), then removes the network and
// the data dirs.
func (c *meshCluster) stop() {
	for i := len(c.clients) - 1; i >= 0; i-- {
		c.clients[i].stop()
	}
	if c.server != nil {
		c.server.stop()
	}
	c.removeAllocNetns()
	c.net.teardown()
	_ = os.RemoveAll(c.dataRoot)
}

// removeAllocNetns deletes the network namespaces of the stopped agents'
// allocations (named by allocation ID and bind-mounted with the host's
// namespaces, they outlive the agents) and kills what still runs in them.
func (c *meshCluster) removeAllocNetns() {
	dirs, _ := filepath.Glob(filepath.Join(c.dataRoot, "*", "alloc", "*"))
	for _, d := range dirs {
		id := filepath.Base(d)
		if _, err := os.Stat(NetnsPath(id)); err != nil {
			continue
		}
		killNetns(id)
		_ = ipCmd("netns", "del", id)
	}
}

// tls runs `meshlet tls ARGS` in the certificate dir.
func (c *meshCluster) tls(args ...string) error {
	cmd := exec.Command(c.bin, append([]string{"tls"}, args...)...)
	cmd.Dir = c.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: meshlet tls %s: %w: %s", ErrAgent, strings.Join(args, " "), err, lastLines(string(out), 2, nil))
	}
	return nil
}

func (c *meshCluster) path(f string) string { return filepath.Join(c.dir, f) }

// certFiles makes role's ("server" or "client") certificate for node
// name and returns the CA, certificate and key paths.
func (c *meshCluster) certFiles(role, name, ip string) (ca, cert, key string, err error) {
	args := []string{"cert", "create", "-" + role, "-node", name}
	if role == "server" {
		args = append(args, "-additional-ipaddress", ip)
	}
	if err := c.tls(args...); err != nil {
		return "", "", "", err
	}
	base := "global-" + role + "-meshlet-" + name
	return c.path("meshlet-agent-ca.pem"), c.path(base + ".pem"), c.path(base + "-key.pem"), nil
}

// clientTLS is the RPC client configuration of a certificate for a
// simulated client node named name.
func (c *meshCluster) clientTLS(name string) (tlsutil.Config, error) {
	ca, cert, key, err := c.certFiles("client", name, "")
	return tlsutil.Config{CAFile: ca, CertFile: cert, KeyFile: key, VerifyServerHostname: true}, err
}

// agentConfig is the HCL of agent name at ip.
func (c *meshCluster) agentConfig(name, ip string, server bool) (string, error) {
	role, body := "client", fmt.Sprintf(`ports {
  http = %d
}
server {
  enabled = false
}
client {
  enabled  = true
  servers  = ["%s:%d"]
  cni_path = %q
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`, meshHTTPPort, c.net.Addr(meshServerHost), meshRPCPort, c.cniPath)
	if server {
		role, body = "server", fmt.Sprintf(`ports {
  http = %d
  rpc  = %d
}
server {
  enabled           = true
  bootstrap_expect  = 1
  min_heartbeat_ttl = "2s"
  heartbeat_grace   = "2s"
}
client {
  enabled = false
}
`, meshHTTPPort, meshRPCPort)
	}
	ca, cert, key, err := c.certFiles(role, name, ip)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`data_dir  = %q
bind_addr = %q
node_name = %q
log_level = "info"
sidecar   = "builtin"
connect {
  default_intention_policy = "allow"
}
%stls {
  rpc                    = true
  ca_file                = %q
  cert_file              = %q
  key_file               = %q
  verify_server_hostname = true
}
`, filepath.Join(c.dataRoot, name), ip, name, body, ca, cert, key), nil
}

// add creates host number host and starts agent name in it.
func (c *meshCluster) add(name string, host int, server bool) (*meshAgent, error) {
	a := &meshAgent{Name: name, IP: c.net.Addr(host), logPath: c.path(name + ".log"), done: make(chan struct{})}
	cfg, err := c.agentConfig(name, a.IP, server)
	if err != nil {
		return nil, err
	}
	cfgPath := c.path(name + ".hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	if a.NS, err = c.net.AddHost(name, host); err != nil {
		return nil, err
	}
	logf, err := os.Create(a.logPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	a.cmd = exec.Command("ip", "netns", "exec", a.NS, c.bin, "agent", "-config", cfgPath)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("%w: failed to start agent %s: %w", ErrAgent, name, err)
	}
	go func() { _ = a.cmd.Wait(); logf.Close(); close(a.done) }()
	a.api, _ = nomadapi.NewClient(&nomadapi.Config{Address: a.HTTPAddr(), HttpClient: &http.Client{Timeout: 10 * time.Second}})
	if server {
		c.server = a
	}
	return a, nil
}

// waitNodes waits until the server lists every client node as ready.
func (c *meshCluster) waitNodes(ctx context.Context, timeout time.Duration) error {
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		for _, a := range append([]*meshAgent{c.server}, c.clients...) {
			select {
			case <-a.done:
				return fmt.Errorf("%w: agent %s exited: %s", ErrAgent, a.Name, a.tail(3))
			default:
			}
		}
		nodes, _, err := c.server.api.Nodes().List(nil)
		ready := 0
		for _, n := range nodes {
			if n.Status == "ready" {
				ready++
			}
		}
		if err == nil && ready >= len(c.clients) {
			return nil
		}
		last = fmt.Sprintf("%d of %d nodes ready (err %v)", ready, len(c.clients), err)
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("%w: %s after %s: %s", ErrAgent, last, timeout, c.server.tail(2))
}

// registerHCL parses src through the server's API and registers it,
// returning the parsed job (for later updates).
func (c *meshCluster) registerHCL(src string) (*nomadapi.Job, error) {
	job, err := c.server.api.Jobs().ParseHCL(src, true)
	if err != nil {
		return nil, fmt.Errorf("failed to parse job: %w", err)
	}
	if _, _, err := c.server.api.Jobs().Register(job, nil); err != nil {
		return nil, fmt.Errorf("failed to register job %s: %w", *job.ID, err)
	}
	return job, nil
}

// running waits until job has want allocations running (and no more
// meant to run) and returns them.
func (c *meshCluster) running(ctx context.Context, jobID string, want int, timeout time.Duration) ([]*nomadapi.AllocationListStub, error) {
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		allocs, _, err := c.server.api.Jobs().Allocations(jobID, false, nil)
		var run []*nomadapi.AllocationListStub
		pending := 0
		for _, al := range allocs {
			switch {
			case al.DesiredStatus == "run" && al.ClientStatus == "running":
				run = append(run, al)
			case al.DesiredStatus == "run" && al.ClientStatus == "failed":
				return nil, fmt.Errorf("job %s: allocation %s failed", jobID, al.ID[:8])
			case al.DesiredStatus == "run":
				pending++
			}
		}
		if err == nil && len(run) == want && pending == 0 {
			return run, nil
		}
		last = fmt.Sprintf("%d running, %d pending (err %v)", len(run), pending, err)
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("job %s: want %d allocations running, %s after %s", jobID, want, last, timeout)
}
