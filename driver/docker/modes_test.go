package docker_test

import (
	"os"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/driver/docker"
)

// uts_mode and userns_mode "host" (allowed by allow_privileged) put the
// container in the host's UTS and user namespaces; init runs Docker's
// init as PID 1; pids_limit is the container's pids cgroup limit;
// cpuset_cpus is accepted and ignored, as in Nomad.
func TestNamespaceModesInitPidsLimit(t *testing.T) {
	d := newDriver(t, docker.Config{AllowPrivileged: true})
	cfg := taskConfig(t, "modes2", "sh", "-c", strings.Join([]string{
		"ls -l /proc/self/ns/uts /proc/self/ns/user", "cat /proc/sys/kernel/hostname",
		"echo pid1=$(tr '\\0' ' ' < /proc/1/cmdline)",
		"echo pids.max=$(cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max 2>/dev/null)",
	}, "; "))
	cfg.Config["uts_mode"] = "host"
	cfg.Config["userns_mode"] = "host"
	cfg.Config["init"] = true
	cfg.Config["pids_limit"] = 42
	cfg.Config["cpuset_cpus"] = "0"
	out := runScript(t, d, cfg)
	for _, ns := range []string{"uts", "user"} {
		host, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "-> "+host) {
			t.Errorf("container's %s namespace is not the host's %s:\n%s", ns, host, out)
		}
	}
	if host, _ := os.Hostname(); !strings.Contains(out, "\n"+host+"\n") {
		t.Errorf("hostname is not the host's %q:\n%s", host, out)
	}
	if !strings.Contains(out, "pid1=/sbin/docker-init -- sh -c") {
		t.Errorf("PID 1 is not Docker's init running the command:\n%s", out)
	}
	if !strings.Contains(out, "pids.max=42\n") {
		t.Errorf("pids cgroup limit is not 42:\n%s", out)
	}
	hc := inspectTask(t, cfg.ID).HostConfig
	if hc.UTSMode != "host" || hc.UsernsMode != "host" || hc.Init == nil || !*hc.Init || hc.PidsLimit == nil || *hc.PidsLimit != 42 || hc.CpusetCpus != "" {
		t.Errorf("host config: uts %q userns %q init %v pids limit %v cpuset %q", hc.UTSMode, hc.UsernsMode, hc.Init, hc.PidsLimit, hc.CpusetCpus)
	}
}

// Without the options the container has namespaces of its own, the
// command as PID 1 and no pids limit.
func TestNamespaceModesDefault(t *testing.T) {
	d := newDriver(t, docker.Config{AllowPrivileged: true})
	cfg := taskConfig(t, "modes3", "sh", "-c", "ls -l /proc/self/ns/uts; echo pid1=$(tr '\\0' ' ' < /proc/1/cmdline)")
	out := runScript(t, d, cfg)
	host, err := os.Readlink("/proc/self/ns/uts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "-> "+host) || !strings.Contains(out, "pid1=sh -c") {
		t.Errorf("want a UTS namespace of its own and the command as PID 1:\n%s", out)
	}
	if hc := inspectTask(t, cfg.ID).HostConfig; hc.UTSMode != "" || (hc.Init != nil && *hc.Init) || (hc.PidsLimit != nil && *hc.PidsLimit > 0) {
		t.Errorf("host config: uts %q init %v pids limit %v", hc.UTSMode, hc.Init, hc.PidsLimit)
	}
}
