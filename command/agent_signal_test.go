package command

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
)

// agentProcess is `meshlet agent` run by the test binary in a process of
// its own, so that the test can send it real signals.
type agentProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *testutil.SyncBuffer
	done           chan error
	httpAddr       string // host:port
}

// startAgentProcess starts an agent on loopback with free ports, the
// configuration file path holding extra, and waits for its banner.
func startAgentProcess(t *testing.T, extra string) (*agentProcess, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.hcl")
	writeAgentConfig(t, cfg, filepath.Join(dir, "data"), extra)
	p := spawnAgent(t, "-config", cfg)
	addrRE := regexp.MustCompile(`HTTP API\s+= http://(127\.0\.0\.1:\d+)`)
	testutil.WaitFor(t, hangGuard, "the agent banner", func() bool {
		if p.exited() {
			t.Fatalf("agent exited early:\n%s%s", p.stdout, p.stderr)
		}
		return addrRE.MatchString(p.stdout.String())
	})
	p.httpAddr = addrRE.FindStringSubmatch(p.stdout.String())[1]
	return p, cfg
}

// spawnAgent runs `meshlet agent args...` in a process of its own.
func spawnAgent(t *testing.T, args ...string) *agentProcess {
	t.Helper()
	p := &agentProcess{stdout: &testutil.SyncBuffer{}, stderr: &testutil.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(os.Args[0], append([]string{"agent"}, args...)...)
	p.cmd.Env = append(os.Environ(), runCLIEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("failed to start the agent: %v", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func writeAgentConfig(t *testing.T, path, dataDir, extra string) {
	t.Helper()
	text := fmt.Sprintf(`
data_dir  = %q
bind_addr = "127.0.0.1"
ports {
  http         = 0
  connect_http = 0
  grpc         = 0
  rpc          = 0
}
%s
`, dataDir, extra)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatalf("failed to write %s: %v", path, err)
	}
}

// exited reports whether the process ended, putting the result back.
func (p *agentProcess) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

func (p *agentProcess) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("failed to send %v: %v", sig, err)
	}
}

// wait returns the process's exit code, failing the test after limit.
func (p *agentProcess) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee) && ee.Exited():
			return ee.ExitCode()
		}
		t.Fatalf("agent did not exit normally: %v\n%s%s", err, p.stdout, p.stderr)
	case <-time.After(limit):
		t.Fatalf("agent still running %s later:\n%s%s", limit, p.stdout, p.stderr)
	}
	return -1
}

var reloadedRE = regexp.MustCompile(`\[INFO\]  meshlet: reloaded the agent configuration.*: log_level=debug`)

// SIGHUP neither kills the agent (Go's default) nor stops it: as Nomad's,
// the agent re-reads its configuration and applies the log level.
func TestAgentSIGHUPReloadsLogLevel(t *testing.T) {
	p, cfg := startAgentProcess(t, `log_level = "info"`)
	writeAgentConfig(t, cfg, filepath.Join(filepath.Dir(cfg), "data"), `log_level = "debug"`)
	p.signal(t, syscall.SIGHUP)
	testutil.WaitFor(t, hangGuard, "the reload", func() bool {
		if p.exited() {
			t.Fatalf("the agent exited on SIGHUP:\n%s%s", p.stdout, p.stderr)
		}
		return reloadedRE.MatchString(p.stderr.String())
	})
	// A file that no longer parses keeps the running configuration.
	if err := os.WriteFile(cfg, []byte("log_level = \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.signal(t, syscall.SIGHUP)
	testutil.WaitFor(t, hangGuard, "the failed reload", func() bool {
		return strings.Contains(p.stderr.String(), "failed to reload the agent configuration; keeping the running one")
	})
	if p.exited() {
		t.Fatalf("the agent exited on a failed reload:\n%s%s", p.stdout, p.stderr)
	}
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 30*time.Second); code != 0 || !strings.Contains(p.stdout.String(), "==> Agent stopped") {
		t.Fatalf("agent exit %d after SIGINT:\n%s%s", code, p.stdout, p.stderr)
	}
}

// A second SIGINT or SIGTERM during a graceful shutdown exits at once, as
// Nomad's agent does, instead of waiting for the shutdown to finish.
func TestAgentSecondSignalForcesExit(t *testing.T) {
	p, _ := startAgentProcess(t, `log_level = "info"`)
	// A request whose body never completes holds the HTTP server's
	// graceful stop for its whole grace period.
	conn, err := net.Dial("tcp", p.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /v1/jobs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"Job\":", p.httpAddr)
	time.Sleep(200 * time.Millisecond) // the server reads the headers
	p.signal(t, syscall.SIGINT)
	testutil.WaitFor(t, hangGuard, "the shutdown", func() bool {
		return strings.Contains(p.stdout.String(), "Caught signal, shutting down")
	})
	time.Sleep(500 * time.Millisecond) // the shutdown now waits for the request
	if p.exited() {
		t.Fatalf("the agent did not wait for the request in flight:\n%s%s", p.stdout, p.stderr)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 3*time.Second); code != 1 || !strings.Contains(p.stderr.String(), "second signal") {
		t.Fatalf("agent exit %d after a second signal:\n%s%s", code, p.stdout, p.stderr)
	}
}

// A signal while the agent starts (a client agent waiting for servers that
// do not answer) is not lost: the agent says it stops once started, and a
// second signal exits at once.
func TestAgentSignalDuringStartUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing answers there
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.hcl")
	writeAgentConfig(t, cfg, filepath.Join(dir, "data"), `log_level = "info"`)
	p := spawnAgent(t, "-config", cfg, "-client", "-servers", down)
	testutil.WaitFor(t, hangGuard, "the agent waiting for its servers", func() bool {
		return strings.Contains(p.stderr.String(), "waiting for the cluster's CA roots")
	})
	p.signal(t, syscall.SIGINT)
	testutil.WaitFor(t, hangGuard, "the start-up signal noted", func() bool {
		if p.exited() {
			t.Fatalf("agent exited on the first signal during start-up:\n%s%s", p.stdout, p.stderr)
		}
		return strings.Contains(p.stdout.String(), "Caught signal during start-up")
	})
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 3*time.Second); code != 1 || !strings.Contains(p.stderr.String(), "second signal") {
		t.Fatalf("agent exit %d after a second signal during start-up:\n%s%s", code, p.stdout, p.stderr)
	}
}
