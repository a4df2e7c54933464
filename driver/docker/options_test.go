package docker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/internal/drivertest"
)

// inspectTask inspects the container of a task.
func inspectTask(t *testing.T, taskID string) container.InspectResponse {
	t.Helper()
	c := daemon.Client(t)
	list, err := c.ContainerList(context.Background(), containerByTask(taskID))
	if err != nil || len(list) != 1 {
		t.Fatalf("container of task %s: %v, %v", taskID, list, err)
	}
	info, err := c.ContainerInspect(context.Background(), list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// runScript runs script in a task with extra config and returns its
// stdout once it exited successfully.
func runScript(t *testing.T, d *docker.Driver, cfg *driver.TaskConfig) string {
	t.Helper()
	drivertest.Start(t, d, cfg)
	if res := drivertest.Wait(t, d, cfg.ID); !res.Successful() {
		t.Fatalf("exit = %+v, stdout %q, stderr %q", res, drivertest.Log(t, cfg, "stdout"), drivertest.Log(t, cfg, "stderr"))
	}
	return drivertest.Log(t, cfg, "stdout")
}

// Nomad's container options, in a container with a namespace of its own:
// each reaches Docker's config and shows inside the container.
func TestContainerOptions(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "opts", "sh", "-c", strings.Join([]string{
		"cat /proc/sys/kernel/hostname", "cat /etc/resolv.conf", "grep db.internal /etc/hosts",
		"cat /proc/sys/net/core/somaxconn", "ulimit -n", "test -c /dev/mynull && echo device-ok",
		"grep -o 'shm /dev/shm tmpfs [a-z,]*size=[0-9]*k' /proc/mounts",
		"(echo x > /rootfile) 2>/dev/null || echo rootfs-ro", "grep NoNewPrivs /proc/self/status",
	}, "; "))
	for k, v := range map[string]any{
		"hostname":           "web-1",
		"dns_servers":        []any{"dns.example", "192.0.2.53"},
		"dns_search_domains": []any{"svc.example"},
		"dns_options":        []any{"ndots:2"},
		"extra_hosts":        []any{"db.internal:192.0.2.10"},
		"sysctl":             []any{map[string]any{"net.core.somaxconn": "512"}},
		"ulimit":             []any{map[string]any{"nofile": "1024:2048"}},
		"devices":            []any{map[string]any{"host_path": "/dev/null", "container_path": "/dev/mynull", "cgroup_permissions": "rw"}},
		"shm_size":           16 << 20,
		"readonly_rootfs":    true,
		"security_opt":       []any{"no-new-privileges"},
		"runtime":            "runc",
		"healthchecks":       []any{map[string]any{"disable": true}},
	} {
		cfg.Config[k] = v
	}
	out := runScript(t, d, cfg)
	for _, want := range []string{
		"web-1\n", "nameserver 192.0.2.53\n", "search svc.example\n", "options ndots:2\n",
		"192.0.2.10\tdb.internal\n", "\n512\n", "\n1024\n", "device-ok\n",
		"shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=16384k", "rootfs-ro\n", "NoNewPrivs:\t1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	info := inspectTask(t, cfg.ID)
	hc := info.HostConfig
	if hc.Runtime != "runc" || !hc.ReadonlyRootfs || hc.ShmSize != 16<<20 || len(hc.Devices) != 1 || hc.Sysctls["net.core.somaxconn"] != "512" {
		t.Errorf("host config: runtime %q readonly %v shm %d devices %v sysctls %v", hc.Runtime, hc.ReadonlyRootfs, hc.ShmSize, hc.Devices, hc.Sysctls)
	}
	if len(hc.DNS) != 1 || hc.DNS[0] != "192.0.2.53" || strings.Contains(out, "dns.example") {
		t.Errorf("dns %v, want the invalid dns_servers entry dropped (as Nomad does)", hc.DNS)
	}
	if hc := info.Config.Healthcheck; hc == nil || len(hc.Test) != 1 || hc.Test[0] != "NONE" {
		t.Errorf("healthcheck = %+v, want disabled (NONE)", hc)
	}
}

// In the allocation's namespace Docker refuses DNS settings and extra
// hosts, so they come as resolv.conf and hosts files of the task; the
// group network's hostname is the pause container's, so the task's.
func TestContainerDNSInAllocNamespace(t *testing.T) {
	d := newDriver(t, docker.Config{})
	name, path := newNetNS(t, "mlt0")
	addNSAddr(t, name, "mlt0", "192.0.2.33/24")
	cfg := taskConfig(t, "dns", "sh", "-c", "cat /proc/sys/kernel/hostname /etc/resolv.conf /etc/hosts")
	delete(cfg.Config, "network_mode")
	cfg.AllocID, cfg.NetNSPath, cfg.NetworkHostname = "alloc-dns", path, "group-host"
	cfg.Config["dns_servers"] = []any{"192.0.2.53", "not-an-ip", "192.0.2.54"}
	cfg.Config["dns_options"] = []any{"ndots:1"}
	cfg.Config["extra_hosts"] = []any{"db.internal:192.0.2.10", "v6.internal:2001:db8::1"}
	out := runScript(t, d, cfg)
	for _, want := range []string{"group-host\n", "nameserver 192.0.2.53\nnameserver 192.0.2.54\n", "options ndots:1\n",
		"127.0.0.1 localhost\n", "ff02::2 ip6-allrouters\n", "\n192.0.2.33 group-host\n",
		"192.0.2.10 db.internal\n", "2001:db8::1 v6.internal\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	hc := inspectTask(t, cfg.ID).HostConfig
	if len(hc.DNS) != 0 || len(hc.ExtraHosts) != 0 || !strings.HasPrefix(string(hc.NetworkMode), "container:") {
		t.Errorf("host config: dns %v extra hosts %v network %s; want files in the pause container's network", hc.DNS, hc.ExtraHosts, hc.NetworkMode)
	}
}

// Without extra_hosts or a group hostname a task in the allocation's
// namespace still gets Nomad's /etc/hosts: the allocation's address with
// the pause container's (Docker-made) hostname, which is the task's.
func TestAllocHostsLine(t *testing.T) {
	d := newDriver(t, docker.Config{})
	name, path := newNetNS(t, "mlt1")
	addNSAddr(t, name, "mlt1", "192.0.2.34/24")
	cfg := taskConfig(t, "hosts", "sh", "-c", "cat /proc/sys/kernel/hostname; cat /etc/hosts")
	delete(cfg.Config, "network_mode")
	cfg.AllocID, cfg.NetNSPath = "alloc-hosts", path
	out := runScript(t, d, cfg)
	host, _, _ := strings.Cut(out, "\n")
	if host == "" || !strings.Contains(out, "\n192.0.2.34 "+host+"\n") || !strings.Contains(out, "127.0.0.1 localhost\n") {
		t.Errorf("hosts file lacks the allocation's line (192.0.2.34 %s):\n%s", host, out)
	}
	if hc := inspectTask(t, cfg.ID).HostConfig; !slices.ContainsFunc(hc.Binds, func(b string) bool { return strings.HasSuffix(b, ":/etc/hosts:ro") }) {
		t.Errorf("binds %v lack the hosts file", hc.Binds)
	}
}

// tty gives the container a terminal; its output still reaches the
// task's stdout log. interactive keeps stdin open.
func TestContainerTTY(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "tty", "sh", "-c", "test -t 1 && echo is-a-tty; echo second")
	cfg.Config["tty"] = true
	cfg.Config["interactive"] = true
	out := runScript(t, d, cfg)
	if !strings.Contains(out, "is-a-tty") || !strings.Contains(out, "second") {
		t.Errorf("stdout = %q, want the terminal's output", out)
	}
	if c := inspectTask(t, cfg.ID).Config; !c.Tty || !c.OpenStdin {
		t.Errorf("config tty %v open stdin %v", c.Tty, c.OpenStdin)
	}
}

// ipc_mode and pid_mode "host" are allowed by allowed_modes (globs)
// without allow_privileged, and put the container in the host's
// namespaces.
func TestIPCAndPIDModes(t *testing.T) {
	d := newDriver(t, docker.Config{AllowedModes: map[string][]string{"ipc": {"host"}, "pid": {"ho*"}}})
	cfg := taskConfig(t, "modes", "sh", "-c", "ls -l /proc/self/ns/ipc /proc/self/ns/pid")
	cfg.Config["ipc_mode"] = "host"
	cfg.Config["pid_mode"] = "host"
	out := runScript(t, d, cfg)
	for _, ns := range []string{"ipc", "pid"} {
		host, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "-> "+host) {
			t.Errorf("container's %s namespace is not the host's %s:\n%s", ns, host, out)
		}
	}
	if hc := inspectTask(t, cfg.ID).HostConfig; hc.IpcMode != "host" || hc.PidMode != "host" {
		t.Errorf("ipc mode %q pid mode %q", hc.IpcMode, hc.PidMode)
	}
}

// A group's dns block is the container's resolv.conf, in place of the
// task's dns options (as in Nomad), in any network mode.
func TestContainerGroupDNS(t *testing.T) {
	d := newDriver(t, docker.Config{})
	cfg := taskConfig(t, "groupdns", "cat", "/etc/resolv.conf")
	cfg.Config["dns_servers"] = []any{"192.0.2.53"}
	cfg.NetworkDNS = &driver.DNSConfig{Servers: []string{"192.0.2.77"}, Searches: []string{"grp.example"}}
	out := runScript(t, d, cfg)
	if !strings.Contains(out, "nameserver 192.0.2.77\n") || !strings.Contains(out, "search grp.example\n") || strings.Contains(out, "192.0.2.53") {
		t.Errorf("resolv.conf = %q, want the group's dns only", out)
	}
	if hc := inspectTask(t, cfg.ID).HostConfig; len(hc.DNS) != 0 {
		t.Errorf("host config dns %v, want the group's file instead", hc.DNS)
	}
}

// A security_opt seccomp profile is read from the client's disk and
// enforced in the container; a malformed option fails the task before a
// container is made.
func TestSeccompProfile(t *testing.T) {
	d := newDriver(t, docker.Config{})
	profile := filepath.Join(t.TempDir(), "deny-mkdir.json")
	if err := os.WriteFile(profile, []byte(`{
	  "defaultAction": "SCMP_ACT_ALLOW",
	  "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]
	}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := taskConfig(t, "seccomp", "sh", "-c", "mkdir /tmp/x 2>/dev/null && echo mkdir-allowed || echo mkdir-denied")
	cfg.Config["security_opt"] = []any{"seccomp=" + profile}
	if out := runScript(t, d, cfg); out != "mkdir-denied\n" {
		t.Errorf("stdout = %q, want mkdir denied by the profile", out)
	}
	bad := taskConfig(t, "badopt", "true")
	bad.Config["security_opt"] = []any{"apparmor"}
	if _, err := d.StartTask(bad); !errors.Is(err, docker.ErrBadConfig) || !strings.Contains(err.Error(), `security_opt "apparmor"`) {
		t.Errorf("StartTask = %v, want a bad security_opt", err)
	}
	if list, _ := daemon.Client(t).ContainerList(context.Background(), containerByTask(bad.ID)); len(list) != 0 {
		t.Errorf("containers left by the refused task: %d", len(list))
	}
}
