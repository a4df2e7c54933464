package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/driver/exec"
)

// TestParseExecPlugin: plugin "exec" options are decoded, and every
// refusal names the file, line and column of the value.
func TestParseExecPlugin(t *testing.T) {
	const head = "data_dir = \"/x\"\nplugin \"exec\" {\n  config {\n"
	tests := []struct {
		name, body string
		wantErr    string
		check      func(t *testing.T, p *ExecPluginConfig)
	}{
		{name: "options", body: "    allow_caps = [\"CAP_NET_RAW\", \"chown\"]\n    default_pid_mode = \"host\"\n    default_ipc_mode = \"private\"\n    no_pivot_root = false\n",
			check: func(t *testing.T, p *ExecPluginConfig) {
				if !slices.Equal(p.AllowCaps, []string{"CAP_NET_RAW", "chown"}) || p.DefaultPIDMode != "host" || p.DefaultIPCMode != "private" {
					t.Errorf("exec = %+v", p)
				}
			}},
		{name: "empty allow_caps allows nothing", body: "    allow_caps = []\n", check: func(t *testing.T, p *ExecPluginConfig) {
			if p.AllowCaps == nil || len(p.AllowCaps) != 0 {
				t.Errorf("allow_caps = %#v", p.AllowCaps)
			}
		}},
		{name: "empty config keeps the defaults", body: "", check: func(t *testing.T, p *ExecPluginConfig) {
			if p.AllowCaps != nil || p.DefaultPIDMode != "" {
				t.Errorf("exec = %+v", p)
			}
		}},
		{name: "unknown capability", body: "    allow_caps = [\"kill\", \"teleport\"]\n",
			wantErr: "agent.hcl:4:18: Invalid allow_caps; allow_caps configured with capabilities not supported by system: teleport."},
		{name: "allow_caps not a list", body: "    allow_caps = \"kill\"\n", wantErr: "agent.hcl:4:19: Unsuitable value type"},
		{name: "bad pid mode", body: "    default_pid_mode = \"shared\"\n",
			wantErr: `agent.hcl:4:24: Invalid default_pid_mode; default_pid_mode must be "private" or "host", got "shared".`},
		{name: "bad ipc mode", body: "    default_ipc_mode = \"none\"\n", wantErr: `agent.hcl:4:24: Invalid default_ipc_mode`},
		{name: "no_pivot_root", body: "    no_pivot_root = true\n", wantErr: "agent.hcl:4:21: Unsupported no_pivot_root; meshlet's exec driver always uses pivot_root"},
		{name: "denied host uids", body: "    denied_host_uids = \"0-999\"\n", wantErr: "agent.hcl:4:24: Unsupported exec plugin option; denied_host_uids is not supported"},
		{name: "unknown key", body: "    no_cgroups = true\n", wantErr: `agent.hcl:4:5: Unsupported argument; An argument named "no_cgroups"`},
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
			tc.check(t, c.Plugins[exec.Name].Exec)
		})
	}
}

// TestParseChrootEnv: client.chroot_env is a map attribute; paths are
// checked with the attribute's position; an empty map is the default.
func TestParseChrootEnv(t *testing.T) {
	tests := []struct {
		name, client string
		want         map[string]string
		wantErr      string
	}{
		{name: "map", client: "  chroot_env = {\n    \"/bin\" = \"/bin\"\n    \"/opt/tools\" = \"/usr/local/tools\"\n  }\n",
			want: map[string]string{"/bin": "/bin", "/opt/tools": "/usr/local/tools"}},
		{name: "empty is the default", client: "  chroot_env = {}\n"},
		{name: "relative", client: "  chroot_env = { \"bin\" = \"/bin\" }\n",
			wantErr: `agent.hcl:3:16: Invalid chroot_env; invalid chroot_env: "bin" = "/bin": both paths must be absolute.`},
		{name: "over a driver mount", client: "  chroot_env = { \"/srv\" = \"/secrets/srv\" }\n",
			wantErr: `agent.hcl:3:16: Invalid chroot_env; invalid chroot_env: "/srv" = "/secrets/srv": the driver mounts /secrets itself.`},
		{name: "not a map", client: "  chroot_env = [\"/bin\"]\n", wantErr: "agent.hcl:3:16: Unsuitable value type"},
		{name: "HCL1 block form", client: "  chroot_env {\n    \"/bin\" = \"/bin\"\n  }\n",
			wantErr: "agent.hcl:4:5: Invalid argument name; Argument names must not be quoted."},
		{name: "holds the data dir", client: "  chroot_env = { \"/srv\" = \"/srv\" }\n",
			wantErr: `client.chroot_env "/srv" overlaps data_dir /srv/meshlet`},
		{name: "inside the data dir", client: "  chroot_env = { \"/srv/meshlet/alloc\" = \"/a\" }\n",
			wantErr: `client.chroot_env "/srv/meshlet/alloc" overlaps data_dir /srv/meshlet`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("agent.hcl", []byte("data_dir = \"/srv/meshlet\"\nclient {\n"+tc.client+"}\n"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err = %v, want one line containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.want) != len(c.Client.ChrootEnv) {
				t.Fatalf("chroot_env = %v, want %v", c.Client.ChrootEnv, tc.want)
			}
			for k, v := range tc.want {
				if c.Client.ChrootEnv[k] != v {
					t.Fatalf("chroot_env = %v, want %v", c.Client.ChrootEnv, tc.want)
				}
			}
		})
	}
}

// TestExecDriverConfig: the plugin block and chroot_env reach the exec
// driver's Config; a config built in code is validated too; a dev
// agent's data dir (known only at start) is checked against chroot_env.
func TestExecDriverConfig(t *testing.T) {
	c, err := ParseConfig("agent.hcl", []byte(`data_dir = "/srv/meshlet"
plugin "exec" {
  config {
    allow_caps       = ["net_raw"]
    default_ipc_mode = "host"
  }
}
client {
  chroot_env = { "/opt/tools" = "/tools" }
}
`))
	if err != nil {
		t.Fatal(err)
	}
	ec := c.execDriverConfig("/state")
	if ec.StateDir != "/state" || !slices.Equal(ec.AllowCaps, []string{"net_raw"}) || ec.DefaultIPCMode != "host" ||
		ec.DefaultPIDMode != "" || ec.ChrootEnv["/opt/tools"] != "/tools" {
		t.Fatalf("exec config = %+v", ec)
	}
	if d := DefaultConfig().execDriverConfig("/s"); d.AllowCaps != nil || d.ChrootEnv != nil {
		t.Fatalf("default exec config = %+v", d)
	}

	bad := DevConfig()
	bad.Plugins = map[string]PluginConfig{exec.Name: {Exec: &ExecPluginConfig{AllowCaps: []string{"teleport"}}}}
	bad.Client.ChrootEnv = map[string]string{"/srv": "srv"}
	err = bad.Validate()
	for _, want := range []string{"capabilities not supported by system: teleport", `"/srv" = "srv": both paths must be absolute`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %q", err, want)
		}
	}

	tmp := t.TempDir()
	dev := DevConfig()
	dev.DataDir = filepath.Join(tmp, "data")
	if err := os.Mkdir(dev.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	dev.Client.ChrootEnv = map[string]string{tmp: "/host-tmp"}
	if _, err := (&Agent{cfg: dev, logger: testLogger()}).newExecDriverConfig("/s"); err == nil || !strings.Contains(err.Error(), "overlaps data_dir") {
		t.Fatalf("chroot_env over the dev data dir: %v", err)
	}
	dev.Client.ChrootEnv = map[string]string{"/usr": "/usr"}
	if ec, err := (&Agent{cfg: dev, logger: testLogger()}).newExecDriverConfig("/s"); err != nil || ec.ChrootEnv["/usr"] != "/usr" {
		t.Fatalf("exec config: %+v, %v", ec, err)
	}
}
