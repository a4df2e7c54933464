package cluster

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

const (
	httpPort = 4646
	rpcPort  = 4647
)

// agent is one meshlet agent: a process group started in its host's
// namespace through `ip netns exec`, logging to LogPath.
type agent struct {
	t       *testing.T
	Name    string
	IP      string
	NS      string
	Server  bool
	DataDir string
	// ConfigPath is the HCL config; Start reuses it after Kill.
	ConfigPath string
	LogPath    string
	argv       []string
	// token is the cluster's management token (the API client, and the
	// calls made inside the agent's namespace, send it).
	token string

	apiOnce sync.Once
	api     *nomadapi.Client

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// HTTPAddr is the agent's HTTP API as the root namespace reaches it.
func (a *agent) HTTPAddr() string { return fmt.Sprintf("http://%s:%d", a.IP, httpPort) }

// RPCAddr is the agent's RPC address (what /v1/status/leader returns).
func (a *agent) RPCAddr() string { return fmt.Sprintf("%s:%d", a.IP, rpcPort) }

// Start starts the agent (again, after Kill: same config and data dir)
// without waiting for it to be ready.
func (a *agent) Start() {
	a.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done != nil {
		select {
		case <-a.done:
		default:
			a.t.Fatalf("agent %s started twice", a.Name)
		}
	}
	logf, err := os.OpenFile(a.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		a.t.Fatal(err)
	}
	fmt.Fprintf(logf, "==== %s start at %s ====\n", a.Name, time.Now().Format(time.RFC3339Nano))
	args := append([]string{"netns", "exec", a.NS}, a.argv...)
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: Kill takes the agent and whatever it started
	// without leaving the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		a.t.Fatalf("failed to start agent %s: %v", a.Name, err)
	}
	done := make(chan struct{})
	a.cmd, a.done = cmd, done
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
}

// Kill SIGKILLs the agent's process group (a crash) and waits for the
// agent to exit. It is a no-op for an agent that is not running.
func (a *agent) Kill() {
	a.t.Helper()
	a.mu.Lock()
	cmd, done := a.cmd, a.done
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		a.t.Errorf("agent %s (pid %d) still running 10s after SIGKILL", a.Name, cmd.Process.Pid)
	}
}

// Exited reports whether the agent was started and has exited, and how.
func (a *agent) Exited() (bool, string) {
	a.mu.Lock()
	cmd, done := a.cmd, a.done
	a.mu.Unlock()
	if done == nil {
		return false, ""
	}
	select {
	case <-done:
		return true, cmd.ProcessState.String()
	default:
		return false, ""
	}
}

// checkAlive fails t at once when the agent has exited: waiting on it
// further would only time out.
func (a *agent) checkAlive() {
	a.t.Helper()
	if gone, how := a.Exited(); gone {
		a.t.Fatalf("agent %s exited (%s): its log is printed below", a.Name, how)
	}
}

// Tail returns the last n lines of the agent's log.
func (a *agent) Tail(n int) string {
	b, err := os.ReadFile(a.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// API is the official Nomad client of the agent's HTTP API, with a
// timeout on every request (a host that stops answering must not hang a
// poll).
func (a *agent) API() *nomadapi.Client {
	a.t.Helper()
	a.apiOnce.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		var err error
		a.api, err = nomadapi.NewClient(&nomadapi.Config{
			Address:    a.HTTPAddr(),
			SecretID:   a.token,
			HttpClient: &http.Client{Timeout: 10 * time.Second, Transport: tr},
		})
		if err != nil {
			a.t.Fatalf("nomad api client for %s: %v", a.Name, err)
		}
	})
	return a.api
}

// Leader is the RPC address the agent reports as the cluster's leader.
func (a *agent) Leader() (string, error) {
	return a.API().Status().Leader()
}

// taskPIDs are the live /bin/sleep processes of allocation allocID, found
// by the NOMAD_ALLOC_ID in their environment.
func taskPIDs(allocID string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte("NOMAD_ALLOC_ID=" + allocID + "\x00")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		dir := "/proc/" + e.Name()
		env, err := os.ReadFile(dir + "/environ")
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		stat, _ := os.ReadFile(dir + "/stat")
		argv0, _, _ := strings.Cut(string(cmdline), "\x00")
		if filepath.Base(argv0) == "sleep" && !zombie(string(stat)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// zombie reads the state field of /proc/PID/stat ("pid (comm) S ...").
func zombie(stat string) bool {
	i := strings.LastIndex(stat, ")")
	return i < 0 || !strings.HasPrefix(stat[i+1:], " ") || strings.HasPrefix(stat[i+1:], " Z") || strings.HasPrefix(stat[i+1:], " X")
}
