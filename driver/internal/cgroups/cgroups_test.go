package cgroups

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/driver/internal/cgroups/cgroupstest"
	"github.com/meshlet/meshlet/internal/testutil"
)

func TestLimitFiles(t *testing.T) {
	tests := []struct {
		name string
		mode Mode
		l    Limits
		want map[string]string
	}{
		{"v1 empty", ModeV1, Limits{}, map[string]string{}},
		{"v1 hard only", ModeV1, Limits{CPUShares: 500, MemoryMB: 64}, map[string]string{
			"cpu.shares": "500", "memory.limit_in_bytes": "67108864"}},
		{"v1 soft and hard", ModeV1, Limits{CPUShares: 1, MemoryMB: 64, MemoryMaxMB: 128}, map[string]string{
			"cpu.shares": "2", "memory.limit_in_bytes": "134217728", "memory.soft_limit_in_bytes": "67108864"}},
		{"v2 weight bounds", ModeV2, Limits{CPUShares: 1 << 30}, map[string]string{"cpu.weight": "10000"}},
		{"v2 memory", ModeV2, Limits{CPUShares: 1024, MemoryMB: 32, MemoryMaxMB: 64}, map[string]string{
			"cpu.weight": "39", "memory.max": "67108864", "memory.low": "33554432"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := limitFiles(tc.mode, tc.l); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseMountinfo(t *testing.T) {
	mnt, fs, opts, ok := parseMountinfo("32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct")
	if !ok || mnt != "/sys/fs/cgroup/cpu" || fs != "cgroup" || opts != "rw,cpu,cpuacct" {
		t.Fatalf("got %q %q %q %v", mnt, fs, opts, ok)
	}
	if _, _, _, ok := parseMountinfo("garbage"); ok {
		t.Fatal("garbage parsed")
	}
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestGroupLifecycle creates a real group, starts a child inside it via
// Enter, and removes it again.
func TestGroupLifecycle(t *testing.T) {
	testutil.RequireRoot(t)
	h, err := Detect()
	if err != nil && cgroupstest.Mounted() {
		t.Fatalf("cpu and memory cgroups are mounted at %s, yet Detect = %v", cgroupstest.Root, err)
	}
	if err != nil {
		t.Skipf("no usable cgroups on this host: %v", err)
	}
	parent := "meshlet-test-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		os.Remove(filepath.Join(h.CPURoot, parent))
		os.Remove(filepath.Join(h.MemoryRoot, parent))
	})
	if _, err := h.Create(parent, "../x", Limits{}); err == nil {
		t.Fatal("invalid name accepted")
	}
	g, err := h.Create(parent, "task", Limits{CPUShares: 300, MemoryMB: 48})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Destroy() })
	if h.Mode == ModeV1 {
		if got := readTrim(t, filepath.Join(g.CPU, "cpu.shares")); got != "300" {
			t.Errorf("cpu.shares = %s", got)
		}
		if got := readTrim(t, filepath.Join(g.Memory, "memory.limit_in_bytes")); got != strconv.Itoa(48<<20) {
			t.Errorf("memory.limit_in_bytes = %s", got)
		}
	}
	restore, err := g.Enter()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	startErr := cmd.Start()
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if startErr != nil {
		t.Fatal(startErr)
	}
	defer cmd.Wait()
	pids, err := g.PIDs()
	if err != nil || !slices.Equal(pids, []int{cmd.Process.Pid}) {
		t.Fatalf("group holds %v (%v), want only the child %d", pids, err, cmd.Process.Pid)
	}
	if usage, err := g.MemoryUsage(); err != nil || usage == 0 {
		t.Errorf("memory usage %d, %v", usage, err)
	}
	if g.OOMKilled() {
		t.Error("OOMKilled without an OOM")
	}
	// Destroy kills the remaining child and removes the directories.
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range g.dirs() {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s still exists: %v", dir, err)
		}
	}
	if err := g.Destroy(); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
}

// A mount table that cannot be read makes Detect's error wrap both
// ErrUnavailable and the cause.
func TestDetectKeepsCause(t *testing.T) {
	_, err := detect(filepath.Join(t.TempDir(), "mountinfo"))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("detect(missing file) = %v; want ErrUnavailable wrapping fs.ErrNotExist", err)
	}
}
