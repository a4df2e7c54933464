// Package framework runs the real meshlet agent for end-to-end tests: it
// builds (or finds) the binary and the CNI plugins, starts `meshlet agent`
// with a private data dir, free loopback ports and its own bridge network,
// drives it through the CLI and the official Nomad API client, and tears
// everything down (jobs purged, agent stopped) in t.Cleanup.
//
// Tests that use it need root (network namespaces, CNI, iptables) and skip
// with a clear message otherwise.
package framework

import (
	"bytes"
	"context"
	"fmt"
	"github.com/meshlet/meshlet/internal/subnet"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/cni"
	"github.com/meshlet/meshlet/internal/testutil"
)

var (
	buildOnce sync.Once
	buildErr  error
	binPath   string
	cniPath   string
	netSeq    atomic.Int32
)

// repoRoot is the repository's top directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// binaries returns the meshlet binary and CNI plugin dir: MESHLET_BIN and
// MESHLET_CNI_PATH (set by `make test`), or built once into a temp dir.
func binaries(t testing.TB) (string, string) {
	buildOnce.Do(func() {
		binPath, cniPath = os.Getenv("MESHLET_BIN"), os.Getenv("MESHLET_CNI_PATH")
		if binPath != "" && cniPath != "" {
			return
		}
		dir, err := os.MkdirTemp("", "meshlet-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath, cniPath = filepath.Join(dir, "meshlet"), filepath.Join(dir, "cni")
		cmd := exec.Command("make", "-C", repoRoot(), "build", "cni", "BIN="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("failed to build meshlet: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath, cniPath
}

// Agent is a running meshlet agent under test.
type Agent struct {
	t           testing.TB
	Bin         string
	DataDir     string
	HTTPAddr    string // http://127.0.0.1:port
	ConnectAddr string // Consul-shaped API, http://127.0.0.1:port
	GRPCAddr    string
	Bridge      string
	Subnet      string
	// ConfigPath is the agent's HCL config; Restart reuses it.
	ConfigPath string
	cmd        *exec.Cmd
	log        *bytes.Buffer
	logMu      sync.Mutex
	done       chan struct{}

	// Token is the management token's secret the harness bootstrapped
	// (ACLs are on unless Options.NoACL): the Nomad and Consul clients and
	// the CLI send it.
	Token string

	nomadOnce sync.Once
	nomad     *nomadapi.Client
	nomadErr  error

	// netns is Options.NetNS.
	netns string
}

// Options tune an agent.
type Options struct {
	// DefaultDeny sets the intentions default policy to deny.
	DefaultDeny bool
	// Sidecar is the agent's sidecar mode (default "builtin"); EnvoyBinary
	// the envoy it may run.
	Sidecar     string
	EnvoyBinary string
	// StateDir, when set, is the agent's data_dir (for example a small
	// tmpfs a fault test fills up); by default a fresh dir under DataDir.
	StateDir string
	// NoACL runs the agent without acl { enabled = true } (the harness
	// otherwise bootstraps ACLs and acts with the management token).
	NoACL bool
	// NoRawExec leaves raw_exec disabled (the default outside -dev); the
	// harness otherwise enables it for the jobs' app tasks. Connect
	// sidecars never need it (they run on the connect_proxy driver).
	NoRawExec bool
	// DockerEndpoint, when set, is the docker driver's daemon (plugin
	// "docker" { config { endpoint } }), for example a private dockerd
	// from driver/docker/dockertest; unset, the driver uses its default
	// socket.
	DockerEndpoint string
	// SidecarDriver and SidecarImage are connect { sidecar_driver
	// sidecar_image } (unset: the defaults, connect_proxy sidecars).
	SidecarDriver, SidecarImage string
	// NetNS, when set, is the path of a network namespace the agent and
	// the CLI run in (nsenter --net), and that the harness's API clients
	// dial into: a test can then change that namespace's firewall (as a
	// system dockerd does) without touching the host's. The test owns the
	// namespace; removing it removes the agent's bridge and rules.
	NetNS string
	// ExtraConfig is appended to the agent's config (more blocks, for
	// example plugin "connect_proxy" { config { ... } }).
	ExtraConfig string
}

// NewAgent starts an agent for t; it is stopped (and its jobs purged) in
// t.Cleanup.
func NewAgent(t testing.TB, opts Options) *Agent {
	t.Helper()
	testutil.RequireRoot(t)
	bin, cni := binaries(t)
	n := netSeq.Add(1)
	// A short data dir: allocation sockets live under it and unix socket
	// paths are limited to 107 bytes.
	dataDir, err := os.MkdirTemp("", "mle")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) })
	a := &Agent{
		t: t, Bin: bin, DataDir: dataDir,
		Bridge: fmt.Sprintf("mle2e%d%d", os.Getpid()%1000, n),
		// A private subnet per agent, used only inside namespaces meshlet
		// creates, and overlapping no route the host has (other agents').
		Subnet: freeSubnet(t),
		log:    &bytes.Buffer{}, done: make(chan struct{}), netns: opts.NetNS,
	}
	ports := freePorts(t, 3)
	a.HTTPAddr = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	a.ConnectAddr = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	a.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", ports[2])
	cfg := a.config(ports, cni, opts)
	a.ConfigPath = filepath.Join(a.DataDir, "agent.hcl")
	if err := os.WriteFile(a.ConfigPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	a.start(a.ConfigPath)
	t.Cleanup(a.cleanup)
	if !opts.NoACL {
		a.bootstrapACL()
	}
	a.waitReady()
	return a
}

func (a *Agent) config(ports []int, cni string, opts Options) string {
	policy := "allow"
	if opts.DefaultDeny {
		policy = "deny"
	}
	sidecar := opts.Sidecar
	if sidecar == "" {
		sidecar = "builtin"
	}
	stateDir := opts.StateDir
	if stateDir == "" {
		stateDir = filepath.Join(a.DataDir, "data")
	}
	return fmt.Sprintf(`
data_dir  = %q
bind_addr = "127.0.0.1"
log_level = "debug"
sidecar   = %q
envoy_binary = %q
ports {
  http         = %d
  connect_http = %d
  grpc         = %d
  rpc          = 0
}
connect {
  default_intention_policy = %q
%s}
client {
  cni_path              = %q
  bridge_network_name   = %q
  bridge_network_subnet = %q
}
plugin "raw_exec" {
  config {
    enabled = %t
  }
}
acl {
  enabled = %t
}
%s%s`, stateDir, sidecar, opts.EnvoyBinary, ports[0], ports[1], ports[2], policy, sidecarInjection(opts), cni, a.Bridge, a.Subnet, !opts.NoRawExec, !opts.NoACL, dockerPlugin(opts.DockerEndpoint), opts.ExtraConfig)
}

// sidecarInjection is the connect block's sidecar_driver and
// sidecar_image lines, for those set.
func sidecarInjection(opts Options) string {
	var b strings.Builder
	if opts.SidecarDriver != "" {
		fmt.Fprintf(&b, "  sidecar_driver = %q\n", opts.SidecarDriver)
	}
	if opts.SidecarImage != "" {
		fmt.Fprintf(&b, "  sidecar_image = %q\n", opts.SidecarImage)
	}
	return b.String()
}

// dockerPlugin is the plugin "docker" block pointing at endpoint ("" for
// none).
func dockerPlugin(endpoint string) string {
	if endpoint == "" {
		return ""
	}
	return fmt.Sprintf("plugin \"docker\" {\n  config {\n    endpoint = %q\n  }\n}\n", endpoint)
}

func (a *Agent) start(cfgPath string) {
	a.done = make(chan struct{})
	a.cmd = a.command(context.Background(), "agent", "-config", cfgPath)
	a.cmd.Stdout = (*lockedWriter)(a)
	a.cmd.Stderr = (*lockedWriter)(a)
	if err := a.cmd.Start(); err != nil {
		a.t.Fatalf("failed to start agent: %v", err)
	}
	cmd, done := a.cmd, a.done
	go func() { _ = cmd.Wait(); close(done) }()
}

type lockedWriter Agent

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	return w.log.Write(p)
}

// Log returns what the agent printed so far.
func (a *Agent) Log() string {
	a.logMu.Lock()
	defer a.logMu.Unlock()
	return a.log.String()
}

func (a *Agent) waitReady() {
	a.t.Helper()
	c := a.Nomad()
	deadline := time.Now().Add(30 * time.Second)
	for {
		nodes, _, err := c.Nodes().List(nil)
		if err == nil && len(nodes) > 0 && nodes[0].Status == "ready" {
			return
		}
		select {
		case <-a.done:
			a.t.Fatalf("agent exited during start:\n%s", a.Log())
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("agent not ready after 30s (last error: %v):\n%s", err, a.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Nomad returns the agent's official Nomad API client, made on first use
// and shared (safe for concurrent use): a client per call would leave an
// idle keep-alive connection per poll open in the agent.
func (a *Agent) Nomad() *nomadapi.Client {
	a.nomadOnce.Do(func() {
		a.nomad, a.nomadErr = nomadapi.NewClient(&nomadapi.Config{Address: a.HTTPAddr, SecretID: a.Token, HttpClient: a.apiHTTPClient()})
	})
	if a.nomadErr != nil {
		a.t.Fatalf("nomad api client: %v", a.nomadErr)
	}
	return a.nomad
}

// CLIResult is a finished CLI invocation.
type CLIResult struct {
	Stdout, Stderr string
	Code           int
}

// CLI runs the meshlet CLI against the agent.
func (a *Agent) CLI(args ...string) CLIResult {
	return a.CLIStdin(nil, args...)
}

// CLIStdin runs the CLI with stdin.
func (a *Agent) CLIStdin(stdin []byte, args ...string) CLIResult {
	return a.cli(stdin, a.Token, args...)
}

// CLIAs runs the CLI with token instead of the harness's ("": none).
func (a *Agent) CLIAs(token string, args ...string) CLIResult {
	return a.cli(nil, token, args...)
}

func (a *Agent) cli(stdin []byte, token string, args ...string) CLIResult {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := a.command(ctx, args...)
	cmd.Env = append(os.Environ(), "MESHLET_ADDR="+a.HTTPAddr, "MESHLET_CONNECT_ADDR="+a.ConnectAddr, "MESHLET_TOKEN="+token)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return CLIResult{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// MustCLI runs the CLI and fails the test on a non-zero exit.
func (a *Agent) MustCLI(args ...string) string {
	a.t.Helper()
	r := a.CLI(args...)
	if r.Code != 0 {
		a.t.Fatalf("meshlet %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

func (a *Agent) cleanup() {
	if a.t.Failed() {
		a.t.Logf("agent log:\n%s", a.Log())
	}
	if jobs, _, err := a.Nomad().Jobs().List(nil); err == nil {
		for _, j := range jobs {
			_ = a.CLI("job", "stop", "-purge", j.ID)
		}
	}
	a.Nomad().Close()
	if a.cmd.Process != nil {
		_ = a.cmd.Process.Signal(os.Interrupt)
		select {
		case <-a.done:
		case <-time.After(15 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.done
		}
	}
	// CNI leaves its bridge, and the agent its masquerade rules, behind by
	// design; this agent's are ours to remove (in a namespace of the
	// test's, they go with it).
	if a.netns != "" {
		return
	}
	if out, err := exec.Command("ip", "link", "del", a.Bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		a.t.Logf("failed to remove bridge %s: %v: %s", a.Bridge, err, out)
	}
	if err := cni.RemoveBridgeNAT(a.Bridge); err != nil {
		a.t.Logf("failed to remove the masquerade rules of %s: %v", a.Bridge, err)
	}
}

// freeSubnet reserves a free test subnet until t ends (package subnet).
func freeSubnet(t testing.TB) string {
	t.Helper()
	cidr, release, err := subnet.Pick()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return cidr
}

// freePorts returns n ports that stay free for the agent (see
// testutil.FreePort: never from the kernel's ephemeral range).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i] = testutil.FreePort(t)
	}
	return out
}
