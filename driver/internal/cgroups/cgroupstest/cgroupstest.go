// Package cgroupstest tells the tests that need cgroups whether the host
// has them, without asking the code under test: a test skips only where
// no cpu and memory cgroups are mounted at /sys/fs/cgroup, so a Detect
// that fails on a host that has them fails the test instead of skipping it.
package cgroupstest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is where systemd and Debian mount the cgroup hierarchies.
const Root = "/sys/fs/cgroup"

// Mounted reports whether cpu and memory cgroups are mounted at Root:
// a v2 hierarchy whose cgroup.controllers lists both, or v1 cpu and memory
// hierarchies at Root/cpu (or cpu,cpuacct) and Root/memory.
func Mounted() bool {
	if b, err := os.ReadFile(filepath.Join(Root, "cgroup.controllers")); err == nil {
		have := strings.Fields(string(b))
		if slices.Contains(have, "cpu") && slices.Contains(have, "memory") {
			return true
		}
	}
	return (isCgroupV1(filepath.Join(Root, "cpu")) || isCgroupV1(filepath.Join(Root, "cpu,cpuacct"))) &&
		isCgroupV1(filepath.Join(Root, "memory"))
}

// isCgroupV1 reports whether dir is the root of a v1 cgroup mount.
func isCgroupV1(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC
}
