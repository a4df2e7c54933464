package agent

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/driver/docker"
)

// TestParseDockerPlugin: plugin "docker" options are decoded into the
// driver's config, and every refusal names the file, line and column.
func TestParseDockerPlugin(t *testing.T) {
	const head = "data_dir = \"/x\"\nplugin \"docker\" {\n  config {\n"
	tests := []struct {
		name, body string
		wantErr    string
		check      func(t *testing.T, c docker.Config)
	}{
		{name: "options", body: "    endpoint = \"unix:///run/d.sock\"\n    allow_privileged = true\n    allow_caps = [\"chown\", \"net_raw\"]\n" +
			"    volumes {\n      enabled = true\n    }\n    gc {\n      container = false\n      image = true\n    }\n",
			check: func(t *testing.T, c docker.Config) {
				if c.Endpoint != "unix:///run/d.sock" || !c.AllowPrivileged || !slices.Equal(c.AllowCaps, []string{"chown", "net_raw"}) ||
					!c.VolumesEnabled || c.GCContainer == nil || *c.GCContainer || c.StateDir != "/state" {
					t.Errorf("docker = %+v", c)
				}
			}},
		{name: "defaults", body: "", check: func(t *testing.T, c docker.Config) {
			if c.Endpoint != "" || c.AllowPrivileged || c.AllowCaps != nil || c.VolumesEnabled || c.GCContainer != nil {
				t.Errorf("docker = %+v", c)
			}
		}},
		{name: "empty allow_caps allows nothing", body: "    allow_caps = []\n", check: func(t *testing.T, c docker.Config) {
			if c.AllowCaps == nil || len(c.AllowCaps) != 0 {
				t.Errorf("allow_caps = %#v", c.AllowCaps)
			}
		}},
		{name: "runtimes and modes", body: "    allow_runtimes = [\"runc\", \"crun\"]\n    allowed_modes {\n      pid = [\"host\"]\n      ipc = [\"container:*\", \"shareable\"]\n    }\n",
			check: func(t *testing.T, c docker.Config) {
				if !slices.Equal(c.AllowRuntimes, []string{"runc", "crun"}) || !slices.Equal(c.AllowedModes["pid"], []string{"host"}) ||
					!slices.Equal(c.AllowedModes["ipc"], []string{"container:*", "shareable"}) {
					t.Errorf("docker = %+v", c)
				}
			}},
		{name: "bad allowed mode", body: "    allowed_modes {\n      pid = [\"private\"]\n    }\n", wantErr: `agent.hcl:5:13: Invalid allowed_modes; "private" is not a valid pid_mode`},
		{name: "unknown allowed_modes kind", body: "    allowed_modes {\n      uts = [\"host\"]\n    }\n", wantErr: `agent.hcl:5:7: Unsupported argument`},
		{name: "gc", body: "    gc {\n      image = false\n      image_delay = \"10m\"\n      dangling_containers {\n        enabled = true\n        period = \"1m\"\n        creation_grace = \"2m\"\n        dry_run = true\n      }\n    }\n",
			check: func(t *testing.T, c docker.Config) {
				d := c.Dangling
				if c.GCImage == nil || *c.GCImage || c.GCImageDelay != 10*time.Minute || d.Enabled == nil || !*d.Enabled ||
					d.Period != time.Minute || d.CreationGrace != 2*time.Minute || !d.DryRun {
					t.Errorf("docker = %+v", c)
				}
			}},
		{name: "bad image_delay", body: "    gc {\n      image_delay = \"soon\"\n    }\n", wantErr: `agent.hcl:5:21: Invalid image_delay`},
		{name: "bad dangling period", body: "    gc {\n      dangling_containers {\n        period = \"-1m\"\n      }\n    }\n", wantErr: `agent.hcl:6:18: Invalid period`},
		{name: "unknown key", body: "    infra_image = \"pause:3\"\n", wantErr: `agent.hcl:4:5: Unsupported argument; An argument named "infra_image"`},
		{name: "unknown block", body: "    tls {\n    }\n", wantErr: `agent.hcl:4:5: Unsupported block type`},
		{name: "unknown volumes key", body: "    volumes {\n      selinuxlabel = \"z\"\n    }\n", wantErr: `agent.hcl:5:7: Unsupported argument`},
		{name: "unknown capability", body: "    allow_caps = [\"teleport\"]\n", wantErr: "agent.hcl:4:18: Invalid allow_caps"},
		{name: "bad endpoint", body: "    endpoint = \"/var/run/docker.sock\"\n", wantErr: "agent.hcl:4:16: Invalid endpoint"},
		{name: "not a bool", body: "    allow_privileged = \"yes\"\n", wantErr: "agent.hcl:4:25: Unsuitable value type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("agent.hcl", []byte(head+tc.body+"  }\n}\n"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err = %v, want one line containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c.dockerDriverConfig("/state"))
		})
	}
}
