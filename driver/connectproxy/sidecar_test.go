package connectproxy_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/command"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/connectproxy"
	"github.com/meshlet/meshlet/driver/docker/dockertest"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/envoy"
	"github.com/meshlet/meshlet/internal/testutil"
)

// TestMain makes this test binary the executor and the meshlet binary the
// driver runs (`connect sidecar`, which may execute itself again).
// A private dockerd (dockertest) runs for the container runtime's tests.
func TestMain(m *testing.M) {
	dt.DispatchExecutor()
	if len(os.Args) > 2 && os.Args[1] == "connect" && os.Args[2] == "sidecar" {
		os.Exit(command.Run(os.Args[1:]))
	}
	os.Exit(dockertest.Main(m, &daemon))
}

var nsSeq atomic.Int64

// newNetNS creates a throwaway named network namespace, deleted at cleanup.
func newNetNS(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("meshlet-cp-%d-%d", os.Getpid(), nsSeq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	return "/var/run/netns/" + name
}

// nsLink is how /proc/<pid>/ns/net reads for the namespace at path.
func nsLink(t *testing.T, path string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

// sidecarTask is the injected sidecar's task as the client gives it to
// the driver: its allocation's dirs (alloc/run for the socket, secrets/
// with the bootstrap, root's 0600), a network namespace and the config.
func sidecarTask(t *testing.T, envoyBin, mode string) *driver.TaskConfig {
	t.Helper()
	cfg := dt.TaskConfig(t, "connect-proxy-web", "unused")
	secrets := filepath.Join(cfg.TaskDir, "secrets")
	run := filepath.Join(cfg.AllocDir, "run")
	for _, dir := range []string{secrets, run} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(run, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := connect.SocketPath(cfg.AllocDir)
	proxyID := "_nomad-task-" + cfg.AllocID + "-group-web-web-http-sidecar-proxy"
	js, err := envoy.JSON(envoy.BootstrapConfig{ProxyID: proxyID, Cluster: "web", GRPCAddr: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	bootstrap := filepath.Join(secrets, "envoy_bootstrap.json")
	if err := os.WriteFile(bootstrap, js, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.NetNSPath = newNetNS(t)
	cfg.Env["LD_PRELOAD"] = filepath.Join(cfg.AllocDir, "tmp", "evil.so")
	cfg.Env["SIDECAR_VAR"] = "kept"
	cfg.Config = map[string]any{
		"proxy_id": proxyID, "service": "web", "grpc_addr": "unix://" + sock, "admin_bind": "127.0.0.2:19001",
		"mode": mode, "envoy_binary": envoyBin, "bootstrap_path": bootstrap, "envoy_args": []any{"--log-level", "debug"},
	}
	return cfg
}

// fakeEnvoy writes, where any user may run it, a stand-in envoy that
// reports who it runs as, its privileges, namespace, working directory,
// arguments, two env vars and the bootstrap it was handed, then exits.
func fakeEnvoy(t *testing.T) string {
	t.Helper()
	script := `#!/bin/sh
echo "uid=$(id -u) gid=$(id -g)"
grep -E '^(CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/$$/status
echo "netns=$(readlink /proc/$$/ns/net)"
echo "cwd=$(pwd)"
echo "args=$*"
echo "env=${LD_PRELOAD:-unset},${SIDECAR_VAR:-unset}"
echo "--- bootstrap"
cat "$2"
`
	return testutil.WriteScript(t, "envoy", script)
}

func newDriver(t *testing.T, envoyBin string) *connectproxy.Driver {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return connectproxy.New(connectproxy.Config{Binary: self, EnvoyBinary: envoyBin, StateDir: t.TempDir()},
		hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
}

func proxyUser(t *testing.T) *user.User {
	t.Helper()
	u, err := user.Lookup(connect.ProxyUser)
	if err != nil {
		t.Skipf("no %s user on this host: %v", connect.ProxyUser, err)
	}
	return u
}

// TestEnvoySidecar: the driver starts `connect sidecar` in the task's
// network namespace; it runs Envoy as the proxy user without capabilities,
// with no_new_privs, the bootstrap in memory (its socket relative to the
// working directory), envoy_args after Envoy's own, and no loader
// variables.
func TestEnvoySidecar(t *testing.T) {
	testutil.RequireRoot(t)
	u := proxyUser(t)
	bin := fakeEnvoy(t)
	d := newDriver(t, bin)
	cfg := sidecarTask(t, bin, connect.SidecarEnvoy)
	dt.Start(t, d, cfg)
	if res := dt.Wait(t, d, cfg.ID); !res.Successful() {
		t.Fatalf("exit %+v; stderr:\n%s", res, dt.Log(t, cfg, "stderr"))
	}
	report, js, ok := strings.Cut(dt.Log(t, cfg, "stdout"), "--- bootstrap\n")
	if !ok {
		t.Fatalf("fake envoy did not run to the end:\n%s\nstderr:\n%s", report, dt.Log(t, cfg, "stderr"))
	}
	t.Logf("fake envoy's report:\n%s", report)
	for _, want := range []string{
		fmt.Sprintf("\nuid=%s gid=%s\n", u.Uid, u.Gid), "\nCapPrm:\t0000000000000000\n", "\nCapEff:\t0000000000000000\n",
		"\nCapAmb:\t0000000000000000\n", "\nNoNewPrivs:\t1\n", "\nnetns=" + nsLink(t, cfg.NetNSPath) + "\n",
		"\ncwd=" + filepath.Join(cfg.AllocDir, "run") + "\n", "\nargs=-c /dev/fd/", " --disable-hot-restart --log-level debug\n",
		"\nenv=unset,kept\n",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("fake envoy's report lacks %q", want)
		}
	}
	if !strings.Contains(js, `"path": "`+connect.SocketName+`"`) || !strings.Contains(js, `"id": "_nomad-task-`) {
		t.Errorf("handed bootstrap:\n%s", js)
	}
}

// TestBuiltinSidecar: the built-in proxy runs in the task's network
// namespace as the proxy user without capabilities, until stopped.
func TestBuiltinSidecar(t *testing.T) {
	testutil.RequireRoot(t)
	u := proxyUser(t)
	d := newDriver(t, "")
	cfg := sidecarTask(t, "", connect.SidecarBuiltin)
	delete(cfg.Config, "envoy_args")
	dt.Start(t, d, cfg)
	dt.WaitLog(t, cfg, "==> meshlet built-in proxy for web")
	st, err := d.InspectTask(cfg.ID)
	if err != nil || st.State != driver.TaskStateRunning {
		t.Fatalf("inspect %+v, %v", st, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.PID))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("\nUid:\t%[1]s\t%[1]s\t%[1]s\t%[1]s\n", u.Uid), "\nCapEff:\t0000000000000000\n", "\nNoNewPrivs:\t1\n"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("sidecar's status lacks %q:\n%s", want, status)
		}
	}
	if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", st.PID)); err != nil || ns != nsLink(t, cfg.NetNSPath) {
		t.Errorf("sidecar's network namespace %q (%v), want the task's %s", ns, err, nsLink(t, cfg.NetNSPath))
	}
	if err := d.StopTask(cfg.ID, 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if res := dt.Wait(t, d, cfg.ID); res.Signal == int(syscall.SIGKILL) {
		t.Fatalf("the proxy ignored SIGTERM: %+v", res)
	}
}

// TestStartRejectsConfig: a config error fails StartTask with one line
// naming the key, and leaves nothing behind.
func TestStartRejectsConfig(t *testing.T) {
	testutil.RequireRoot(t)
	stateDir := t.TempDir()
	self, _ := os.Executable()
	d := connectproxy.New(connectproxy.Config{Binary: self, StateDir: stateDir}, hclog.NewNullLogger())
	tests := []struct {
		name string
		edit func(*driver.TaskConfig)
		want string
	}{
		{"unknown key", func(c *driver.TaskConfig) { c.Config["command"] = "/bin/sh" }, `unknown key "command"`},
		{"wrong type", func(c *driver.TaskConfig) { c.Config["proxy_id"] = true }, "proxy_id must be a string, not a bool"},
		{"foreign envoy", func(c *driver.TaskConfig) { c.Config["envoy_binary"] = "/bin/sh" }, "this node has no envoy binary"},
		{"host network", func(c *driver.TaskConfig) { c.NetNSPath = "" }, "network namespace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sidecarTask(t, "", connect.SidecarBuiltin)
			tc.edit(cfg)
			_, err := d.StartTask(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("StartTask: %v, want one line with %q", err, tc.want)
			}
			if !errors.Is(err, driver.ErrUnrecoverable) {
				t.Fatalf("StartTask: %v, want it unrecoverable", err)
			}
			if _, err := d.InspectTask(cfg.ID); !errors.Is(err, driver.ErrTaskNotFound) {
				t.Fatalf("failed task is known: %v", err)
			}
			if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
				t.Fatalf("state left behind: %v", entries)
			}
		})
	}
}
