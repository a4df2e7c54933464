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
		})
	}
}
