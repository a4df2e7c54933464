package exec

import (
	"bytes"
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/internal/cgroups"
	"github.com/meshlet/meshlet/driver/internal/cgroups/cgroupstest"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

func TestMain(m *testing.M) {
	dt.DispatchExecutor()
	os.Exit(m.Run())
}

// newDriver returns an exec driver whose cgroups live under a parent unique
// to this test process, removed at cleanup.
func newDriver(t *testing.T) *Driver {
	t.Helper()
	return newDriverIn(t, t.TempDir())
}

// newDriverIn is newDriver with a given state dir (a restarted agent's
// driver shares its predecessor's).
func newDriverIn(t *testing.T, stateDir string) *Driver {
	t.Helper()
	return newDriverWith(t, Config{StateDir: stateDir})
}

// newDriverWith is newDriver with cfg's options (a temporary state dir
// unless cfg sets one).
func newDriverWith(t *testing.T, cfg Config) *Driver {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	parent := fmt.Sprintf("meshlet-test-%d", os.Getpid())
	t.Cleanup(func() {
		if h, err := cgroups.Detect(); err == nil {
			os.Remove(filepath.Join(h.CPURoot, parent))
			os.Remove(filepath.Join(h.MemoryRoot, parent))
		}
	})
	cfg.CgroupParent = parent
	return New(cfg, hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr}))
}

func requireCgroups(t *testing.T) *cgroups.Hierarchy {
	t.Helper()
	testutil.RequireRoot(t)
	h, err := cgroups.Detect()
	if err != nil && cgroupstest.Mounted() {
		t.Fatalf("cpu and memory cgroups are mounted at %s, yet Detect = %v", cgroupstest.Root, err)
	}
	if err != nil {
		t.Skipf("exec tests need cgroups: %v", err)
	}
	return h
}

func TestFingerprint(t *testing.T) {
	d := newDriver(t)
	fp, err := d.Fingerprint(context.Background())
	if err != nil || !fp.Detected {
		t.Fatalf("fingerprint %+v, %v", fp, err)
	}
	want := os.Geteuid() == 0 && cgroupstest.Mounted()
	if fp.Healthy != want {
		t.Fatalf("healthy = %v, want %v (%s)", fp.Healthy, want, fp.HealthDescription)
	}
	if !fp.Healthy && fp.Attributes["driver.exec.warning"] == "" {
		t.Fatalf("unhealthy without a warning: %+v", fp)
	}
	if d.Name() != "exec" {
		t.Fatalf("name %q", d.Name())
	}
}

// ownCgroup returns the directory of pid's cgroup for a v1 controller or
// the v2 hierarchy.
func ownCgroup(t *testing.T, h *cgroups.Hierarchy, pid int, controller string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if h.Mode == cgroups.ModeV2 && parts[0] == "0" {
			return filepath.Join(h.CPURoot, parts[2])
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				root := h.CPURoot
				if controller == "memory" {
					root = h.MemoryRoot
				}
				return filepath.Join(root, parts[2])
			}
		}
	}
	t.Fatalf("pid %d has no %s cgroup", pid, controller)
	return ""
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestCgroupLimits(t *testing.T) {
	h := requireCgroups(t)
	d := newDriver(t)
	cfg := dt.TaskConfig(t, "limited", "sleep", "60")
	cfg.Resources = &driver.Resources{CPUShares: 250, MemoryMB: 64, MemoryMaxMB: 96}
	dt.Start(t, d, cfg)
	st, err := d.InspectTask(cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	cpuDir, memDir := ownCgroup(t, h, st.PID, "cpu"), ownCgroup(t, h, st.PID, "memory")
	if !strings.Contains(memDir, "meshlet-test-") || !strings.Contains(cpuDir, "meshlet-test-") {
		t.Fatalf("task is in %s / %s, not in its own cgroup", cpuDir, memDir)
	}
	if h.Mode == cgroups.ModeV1 {
		checks := map[string]string{
			filepath.Join(cpuDir, "cpu.shares"):                 "250",
			filepath.Join(memDir, "memory.limit_in_bytes"):      strconv.Itoa(96 << 20),
			filepath.Join(memDir, "memory.soft_limit_in_bytes"): strconv.Itoa(64 << 20),
		}
		for file, want := range checks {
			if got := readTrim(t, file); got != want {
				t.Errorf("%s = %s, want %s", file, got, want)
			}
		}
	} else if got := readTrim(t, filepath.Join(memDir, "memory.max")); got != strconv.Itoa(96<<20) {
		t.Errorf("memory.max = %s", got)
	}
	u, err := d.TaskStats(context.Background(), cfg.ID)
	if err != nil || len(u.PIDs) != 1 || u.PIDs[0] != st.PID || u.MemoryUsage == 0 {
		t.Fatalf("stats %+v, %v", u, err)
	}
	if err := d.DestroyTask(cfg.ID, true); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{cpuDir, memDir} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left behind: %v", dir, err)
		}
	}
}

func TestOOMKilled(t *testing.T) {
	requireCgroups(t)
	if b, _ := os.ReadFile("/proc/swaps"); strings.Count(string(b), "\n") > 1 {
		t.Skip("swap is on: a memory limit swaps instead of OOM-killing")
	}
	d := newDriver(t)
	// The shell keeps 64 MiB in a variable under a 16 MiB limit.
	cfg := dt.TaskConfig(t, "hog", "sh", "-c", `x=$(head -c 67108864 /dev/zero | tr '\0' a); echo survived`)
	cfg.Resources = &driver.Resources{MemoryMB: 16}
	dt.Start(t, d, cfg)
	res := dt.Wait(t, d, cfg.ID)
	if !res.OOMKilled || res.Successful() {
		t.Fatalf("exit %+v, want OOMKilled", res)
	}
}

var nsSeq atomic.Int64

// newNetNS creates a throwaway named network namespace, deleted at cleanup.
func newNetNS(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("meshlet-drv-%d-%d", os.Getpid(), nsSeq.Add(1))
	if out, err := osexec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = osexec.Command("ip", "netns", "delete", name).Run() })
	return "/var/run/netns/" + name
}

// onlyLoopback reports whether `ip -o link` output lists just lo.
func onlyLoopback(out string) bool {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return len(lines) == 1 && strings.HasPrefix(lines[0], "1: lo:")
}

func TestNetworkNamespace(t *testing.T) {
	requireCgroups(t)
	host, err := osexec.Command("ip", "-o", "link").Output()
	if err != nil {
		t.Fatal(err)
	}
	if onlyLoopback(string(host)) {
		t.Skip("the host namespace has only lo too: isolation is not observable")
	}
	d := newDriver(t)
	cfg := dt.TaskConfig(t, "isolated", "sh", "-c", "ip -o link; echo listed; sleep 60")
	cfg.NetNSPath = newNetNS(t)
	dt.Start(t, d, cfg)
	dt.WaitLog(t, cfg, "listed")
	if got := dt.Log(t, cfg, "stdout"); !onlyLoopback(strings.TrimSuffix(got, "listed\n")) {
		t.Fatalf("task sees links:\n%s", got)
	}
	res, err := d.ExecTask(cfg.ID, []string{"ip", "-o", "link"}, dt.Timeout)
	if err != nil || res.ExitCode != 0 || !onlyLoopback(string(res.Stdout)) {
		t.Fatalf("ExecTask: %+v, %v", res, err)
	}
	var out bytes.Buffer
	code, err := d.ExecTaskStreaming(context.Background(), cfg.ID, &driver.ExecOptions{
		Command: []string{"sh", "-c", "read x; echo got-$x; ip -o link"},
		Stdin:   strings.NewReader("ping\n"),
		Stdout:  &out,
	})
	if err != nil || code != 0 || !strings.HasPrefix(out.String(), "got-ping\n") || !onlyLoopback(strings.TrimPrefix(out.String(), "got-ping\n")) {
		t.Fatalf("ExecTaskStreaming: code %d, %v:\n%s", code, err, out.String())
	}
	// The agent itself stayed in the host namespace (other tests may add
	// links there meanwhile, so only check it still sees more than lo).
	if after, err := osexec.Command("ip", "-o", "link").Output(); err != nil || onlyLoopback(string(after)) {
		t.Fatalf("agent namespace changed: %v\n%s", err, after)
	}
}

func TestBadNetNS(t *testing.T) {
	requireCgroups(t)
	d := newDriver(t)
	cfg := dt.TaskConfig(t, "lost", "true")
	cfg.NetNSPath = "/var/run/netns/meshlet-does-not-exist"
	_, err := d.StartTask(cfg)
	if err == nil || !strings.Contains(err.Error(), "failed to enter network namespace") {
		t.Fatalf("StartTask: %v", err)
	}
}

// An exec session runs in the task's cgroups, and what it leaves running
// ends with the task even when the task shares the host's PID namespace
// (as Nomad's, charged to the task and killed with it).
func TestExecInTaskCgroup(t *testing.T) {
	h := requireCgroups(t)
	d := newDriver(t)
	cfg, _ := startWith(t, d, "", map[string]any{"pid_mode": "host"}, "sleep 60")
	st, err := d.InspectTask(cfg.ID)
	if err != nil {
		t.Fatal(err)
	}
	pid := dt.ExecBackground(t, d, cfg.ID)
	for _, c := range []string{"cpu", "memory"} {
		if got, want := ownCgroup(t, h, pid, c), ownCgroup(t, h, st.PID, c); got != want {
			t.Errorf("exec'd process in %s cgroup %s, the task in %s", c, got, want)
		}
	}
	if err := d.StopTask(cfg.ID, 10*time.Second, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	dt.Wait(t, d, cfg.ID)
	testutil.WaitFor(t, dt.Timeout, "the exec'd process to end with the task", func() bool { return !testutil.Running(pid) })
}
