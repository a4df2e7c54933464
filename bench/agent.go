package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/cni"
)

// NetnsDir is where meshlet bind-mounts allocation namespaces.
const NetnsDir = "/var/run/netns"

// ErrAgent wraps every failure to start or drive the agent.
var ErrAgent = errors.New("agent unavailable")

// Agent is a `meshlet agent` the harness started, with its own data dir,
// free loopback ports and its own bridge and subnet.
type Agent struct {
	Bin      string
	DataDir  string // removed by Stop
	HTTPAddr string // http://127.0.0.1:port
	ConnAddr string // Consul-shaped API
	Bridge   string
	logDir   string // agent.hcl and agent.log
	cmd      *exec.Cmd
	log      *os.File
	done     chan struct{}

	nomadOnce sync.Once
	nomad     *nomadapi.Client
}

// AgentOptions tune StartAgent.
type AgentOptions struct {
	Bin     string // bin/meshlet
	CNIPath string // bin/cni
	Dir     string // scratch directory (data dir and log go below it)
	Seq     int    // distinguishes the bridge and subnet of successive agents
}

// StartAgent starts the agent and waits until its node is ready.
func StartAgent(ctx context.Context, o AgentOptions) (*Agent, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	// The data dir is short: allocation sockets live below it and a unix
	// socket path is limited to 107 bytes.
	data, err := os.MkdirTemp("", "mlb")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	started := false
	defer func() {
		if !started {
			_ = os.RemoveAll(data)
		}
	}()
	a := &Agent{
		Bin: o.Bin, DataDir: data, logDir: filepath.Join(o.Dir, fmt.Sprintf("agent%d", o.Seq)),
		HTTPAddr: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		ConnAddr: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		Bridge:   fmt.Sprintf("mlbench%d", o.Seq), done: make(chan struct{}),
	}
	// A private subnet, used only inside the namespaces meshlet creates.
	subnet := fmt.Sprintf("10.253.%d.0/24", o.Seq%250)
	if err := os.MkdirAll(a.logDir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	cfg := fmt.Sprintf(`data_dir  = %q
bind_addr = "127.0.0.1"
log_level = "info"
sidecar   = "builtin"
ports {
  http         = %d
  connect_http = %d
  grpc         = %d
  rpc          = 0
}
connect {
  default_intention_policy = "allow"
}
client {
  cni_path              = %q
  bridge_network_name   = %q
  bridge_network_subnet = %q
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`, filepath.Join(a.DataDir, "d"), ports[0], ports[1], ports[2], o.CNIPath, a.Bridge, subnet)
	cfgPath := filepath.Join(a.logDir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	if a.log, err = os.Create(filepath.Join(a.logDir, "agent.log")); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAgent, err)
	}
	a.cmd = exec.Command(a.Bin, "agent", "-config", cfgPath)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	if err := a.cmd.Start(); err != nil {
		a.log.Close()
		return nil, fmt.Errorf("%w: failed to start: %w", ErrAgent, err)
	}
	started = true
	go func() { _ = a.cmd.Wait(); close(a.done) }()
	if err := a.waitReady(ctx); err != nil {
		a.Stop()
		return nil, err
	}
	return a, nil
}

func (a *Agent) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(45 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		nodes, _, err := a.Nomad().Nodes().List(nil)
		if err == nil && len(nodes) > 0 && nodes[0].Status == "ready" {
			return nil
		}
		last = err
		select {
		case <-a.done:
			return fmt.Errorf("%w: exited during start: %s", ErrAgent, a.LogTail(3))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%w: not ready after 45s (last error: %v): %s", ErrAgent, last, a.LogTail(3))
}

// LogTail returns the last n lines of the agent's log on one line.
func (a *Agent) LogTail(n int) string {
	b, _ := os.ReadFile(a.log.Name())
	return lastLines(string(b), n, nil)
}

// PID is the agent process's ID.
func (a *Agent) PID() int { return a.cmd.Process.Pid }

// Nomad returns the agent's official Nomad API client. It is made once and
// shared: a client per call would leave one idle keep-alive connection per
// poll open in the agent (for the client's 90 s idle timeout), hundreds
// during a wait, and they would count in the agent's measured memory.
func (a *Agent) Nomad() *nomadapi.Client {
	a.nomadOnce.Do(func() {
		// NewClient only fails on an unparsable address; HTTPAddr is ours.
		a.nomad, _ = nomadapi.NewClient(&nomadapi.Config{Address: a.HTTPAddr})
	})
	return a.nomad
}

// CLI runs the meshlet CLI against the agent and returns its stdout.
func (a *Agent) CLI(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.Bin, args...)
	cmd.Env = append(os.Environ(), "MESHLET_ADDR="+a.HTTPAddr, "MESHLET_CONNECT_ADDR="+a.ConnAddr)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("failed to run meshlet %s: %w: %s", args[0], err, lastLines(errb.String()+out.String(), 2, nil))
	}
	return out.String(), nil
}

// RunJob runs a jobspec (with -var flags) through `meshlet job run -detach`.
func (a *Agent) RunJob(ctx context.Context, path string, vars ...string) error {
	args := []string{"job", "run", "-detach"}
	for _, v := range vars {
		args = append(args, "-var", v)
	}
	_, err := a.CLI(ctx, append(args, path)...)
	return err
}

// Running waits until job has want running allocations and returns them
// sorted by name.
func (a *Agent) Running(ctx context.Context, jobID string, want int, timeout time.Duration) ([]*nomadapi.AllocationListStub, error) {
	deadline := time.Now().Add(timeout)
	for {
		allocs, _, err := a.Nomad().Jobs().Allocations(jobID, false, nil)
		var running []*nomadapi.AllocationListStub
		failed := ""
		for _, al := range allocs {
			switch {
			case al.ClientStatus == "running" && al.DesiredStatus == "run":
				running = append(running, al)
			case al.ClientStatus == "failed":
				failed = al.ID
			}
		}
		if err == nil && len(running) >= want {
			sort.Slice(running, func(i, j int) bool { return running[i].Name < running[j].Name })
			return running, nil
		}
		if failed != "" {
			return nil, fmt.Errorf("job %s: allocation %s failed: %s", jobID, failed[:8], a.allocEvents(failed))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("job %s: %d of %d allocations running after %s (err %v)", jobID, len(running), want, timeout, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// allocEvents is the last task event of a failed allocation, for reasons.
func (a *Agent) allocEvents(id string) string {
	al, _, err := a.Nomad().Allocations().Info(id, nil)
	if err != nil {
		return err.Error()
	}
	var msgs []string
	for task, st := range al.TaskStates {
		if n := len(st.Events); n > 0 {
			e := st.Events[n-1]
			msgs = append(msgs, fmt.Sprintf("%s: %s %s", task, e.Type, e.DisplayMessage))
		}
	}
	sort.Strings(msgs)
	return strings.Join(msgs, "; ")
}

// StopJob stops and purges a job and waits until its namespaces are gone.
func (a *Agent) StopJob(ctx context.Context, jobID string, allocs []*nomadapi.AllocationListStub) error {
	if _, err := a.CLI(ctx, "job", "stop", "-purge", jobID); err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, al := range allocs {
		for {
			if _, err := os.Stat(filepath.Join(NetnsDir, al.ID)); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("job %s: namespace of allocation %s still present after 90s", jobID, al.ID[:8])
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// Stop purges every job, stops the agent and removes its bridge.
func (a *Agent) Stop() {
	ctx := context.Background()
	if jobs, _, err := a.Nomad().Jobs().List(nil); err == nil {
		for _, j := range jobs {
			allocs, _, _ := a.Nomad().Jobs().Allocations(j.ID, false, nil)
			_ = a.StopJob(ctx, j.ID, allocs)
		}
	}
	if a.cmd.Process != nil {
		_ = a.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-a.done:
		case <-time.After(20 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.done
		}
	}
	a.Nomad().Close()
	_ = exec.Command("ip", "link", "del", a.Bridge).Run()
	_ = cni.RemoveBridgeNAT(a.Bridge) // kept by design; this run's are ours
	a.log.Close()
	_ = os.RemoveAll(a.DataDir)
}

// AllocIP is the IPv4 address of eth0 inside an allocation's namespace.
func AllocIP(ctx context.Context, allocID string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", allocID, "-o", "-4", "addr", "show", "dev", "eth0").Output()
	if err != nil {
		return "", fmt.Errorf("failed to read address of allocation %s: %w", allocID[:8], err)
	}
	for _, f := range strings.Fields(string(out)) {
		if ip, _, err := net.ParseCIDR(f); err == nil {
			return ip.String(), nil
		}
	}
	return "", fmt.Errorf("failed to read address of allocation %s: no IPv4 on eth0", allocID[:8])
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("failed to find a free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
