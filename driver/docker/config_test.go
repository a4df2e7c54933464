package docker_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/docker"
)

// Task configs refused before the daemon is asked: no daemon needed.
func TestTaskConfigRefused(t *testing.T) {
	base := func() map[string]any {
		return map[string]any{"image": "busybox", "command": "true"}
	}
	cases := []struct {
		name   string
		cfg    docker.Config
		edit   func(map[string]any, *driver.TaskConfig)
		is     error
		substr string
	}{
		{"unknown key", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["imagee"] = "x" }, docker.ErrBadConfig, "unknown key(s) imagee"},
		{"missing image", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { delete(m, "image") }, docker.ErrBadConfig, "image is required"},
		{"privileged", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["privileged"] = true }, docker.ErrNotAllowed, "allow_privileged"},
		{"host volume", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["volumes"] = []any{"/etc:/host-etc"} }, docker.ErrNotAllowed, "volumes { enabled = true }"},
		{"bind mount", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) {
			m["mount"] = []any{map[string]any{"type": "bind", "source": "/etc", "target": "/e"}}
		}, docker.ErrNotAllowed, "bind mount"},
		{"escaping relative volume", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["volumes"] = []any{"../../x:/x"} }, docker.ErrNotAllowed, "outside the task directory"},
		{"cap outside allow_caps", docker.Config{AllowCaps: []string{"chown"}}, func(m map[string]any, _ *driver.TaskConfig) { m["cap_add"] = []any{"kill"} }, docker.ErrNotAllowed, "kill"},
		{"unknown cap", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["cap_drop"] = []any{"cap_nope"} }, docker.ErrBadConfig, "nope"},
		{"bridge network_mode", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["network_mode"] = "bridge" }, docker.ErrBadConfig, `network_mode "bridge"`},
		{"syslog logging", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) {
			m["logging"] = []any{map[string]any{"type": "syslog"}}
		}, docker.ErrBadConfig, "json-file"},
		{"unknown logging key", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) {
			m["logging"] = []any{map[string]any{"typ": "json-file"}}
		}, docker.ErrBadConfig, "logging: unknown key(s) typ"},
		{"bad pull timeout", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["image_pull_timeout"] = "soon" }, docker.ErrBadConfig, "image_pull_timeout"},
		{"bad mount type", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) {
			m["mount"] = []any{map[string]any{"type": "npipe", "target": "/x"}}
		}, docker.ErrBadConfig, "type must be"},
		{"host network in an allocation namespace", docker.Config{}, func(m map[string]any, tc *driver.TaskConfig) {
			tc.NetNSPath = "/var/run/netns/x"
			m["network_mode"] = "host"
		}, docker.ErrBadConfig, "would leave the allocation's network namespace"},
		{"ipc_mode without a gate", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["ipc_mode"] = "host" }, docker.ErrNotAllowed, `allowed_modes { ipc = ["host"] }`},
		{"pid_mode outside allowed_modes", docker.Config{AllowedModes: map[string][]string{"pid": {"container:*"}}}, func(m map[string]any, _ *driver.TaskConfig) { m["pid_mode"] = "host" }, docker.ErrNotAllowed, "pid_mode"},
		{"runtime outside allow_runtimes", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["runtime"] = "crun" }, docker.ErrNotAllowed, "allow_runtimes"},
		{"hostname in an allocation namespace", docker.Config{}, func(m map[string]any, tc *driver.TaskConfig) {
			tc.NetNSPath = "/var/run/netns/x"
			m["hostname"] = "web"
		}, docker.ErrBadConfig, "hostname cannot be set"},
		{"uts_mode without allow_privileged", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["uts_mode"] = "host" }, docker.ErrNotAllowed, `uts_mode "host" is not allowed by the client's docker plugin config: set allow_privileged = true`},
		{"userns_mode without allow_privileged", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["userns_mode"] = "host" }, docker.ErrNotAllowed, "userns_mode"},
		{"bad uts_mode", docker.Config{AllowPrivileged: true}, func(m map[string]any, _ *driver.TaskConfig) { m["uts_mode"] = "private" }, docker.ErrBadConfig, `uts_mode must be "host" or unset`},
		{"negative pids_limit", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["pids_limit"] = -1 }, docker.ErrBadConfig, "pids_limit must not be negative"},
		{"init not a bool", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["init"] = "yes" }, docker.ErrBadConfig, "init must be a bool"},
		{"bad extra host", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["extra_hosts"] = []any{"db=10.0.0.1"} }, docker.ErrBadConfig, `"hostname:IP"`},
		{"bad ulimit", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["ulimit"] = []any{map[string]any{"nofile": "lots"}} }, docker.ErrBadConfig, "ulimit nofile"},
		{"ulimit soft above hard", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["ulimit"] = map[string]any{"nofile": "20:10"} }, docker.ErrBadConfig, "above the hard limit"},
		{"device without host_path", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) {
			m["devices"] = []any{map[string]any{"container_path": "/dev/x"}}
		}, docker.ErrBadConfig, "host_path is required"},
		{"bad device permissions", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) {
			m["devices"] = []any{map[string]any{"host_path": "/dev/null", "cgroup_permissions": "rx"}}
		}, docker.ErrBadConfig, "cgroup_permissions"},
		{"unknown healthchecks key", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) {
			m["healthchecks"] = []any{map[string]any{"disabled": true}}
		}, docker.ErrBadConfig, "healthchecks: unknown key(s) disabled"},
		{"negative shm_size", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["shm_size"] = -1 }, docker.ErrBadConfig, "shm_size"},
		{"tty not a bool", docker.Config{}, func(m map[string]any, _ *driver.TaskConfig) { m["tty"] = "yes" }, docker.ErrBadConfig, "tty must be a bool"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Endpoint = "unix://" + filepath.Join(t.TempDir(), "none.sock")
			d := docker.New(c.cfg, hclog.NewNullLogger())
			defer d.Close()
			tc := &driver.TaskConfig{ID: "a/t/1", AllocID: "a", Name: "t", Config: base()}
			c.edit(tc.Config, tc)
			_, err := d.StartTask(tc)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.substr) {
				t.Errorf("StartTask = %v, want %v containing %q", err, c.is, c.substr)
			}
			if !errors.Is(err, driver.ErrUnrecoverable) {
				t.Errorf("StartTask = %v, want it unrecoverable: restarts cannot fix a config", err)
			}
		})
	}
}
