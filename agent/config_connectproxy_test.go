package agent

import (
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/driver/connectproxy"
)

// TestParseConnectProxyPlugin: plugin "connect_proxy" options are decoded
// into the driver's config (unset: the driver's defaults), and every
// refusal names the file, line and column.
func TestParseConnectProxyPlugin(t *testing.T) {
	const head = "data_dir = \"/x\"\nplugin \"connect_proxy\" {\n  config {\n"
	tests := []struct {
		name, body string
		wantErr    string
		check      func(t *testing.T, c connectproxy.Config)
	}{
		{name: "options", body: "    runtimes = [\"envoy\", \"builtin\"]\n    envoy_image = \"local/envoy:1\"\n    envoy_image_pull = true\n",
			check: func(t *testing.T, c connectproxy.Config) {
				if !slices.Equal(c.Runtimes, []string{"envoy", "builtin"}) || c.EnvoyImage != "local/envoy:1" || !c.EnvoyImagePull {
					t.Errorf("connect_proxy = %+v", c)
				}
			}},
		{name: "defaults", body: "", check: func(t *testing.T, c connectproxy.Config) {
			if c.Runtimes != nil || c.EnvoyImage != "" || c.EnvoyImagePull {
				t.Errorf("connect_proxy = %+v", c)
			}
		}},
		{name: "a configured image may be pulled", body: "    envoy_image = \"local/envoy:1\"\n", check: func(t *testing.T, c connectproxy.Config) {
			if c.EnvoyImage != "local/envoy:1" || !c.EnvoyImagePull {
				t.Errorf("connect_proxy = %+v", c)
			}
		}},
		{name: "pull off", body: "    envoy_image = \"local/envoy:1\"\n    envoy_image_pull = false\n", check: func(t *testing.T, c connectproxy.Config) {
			if c.EnvoyImage != "local/envoy:1" || c.EnvoyImagePull {
				t.Errorf("connect_proxy = %+v", c)
			}
		}},
		{name: "unknown runtime", body: "    runtimes = [\"docker\", \"podman\"]\n", wantErr: `agent.hcl:4:16: Invalid runtimes; invalid connect_proxy runtimes: unknown runtime "podman"`},
		{name: "runtime twice", body: "    runtimes = [\"builtin\", \"builtin\"]\n", wantErr: `agent.hcl:4:16: Invalid runtimes; invalid connect_proxy runtimes: runtime "builtin" is listed twice`},
		{name: "no runtime", body: "    runtimes = []\n", wantErr: `agent.hcl:4:16: Invalid runtimes; invalid connect_proxy runtimes: the list is empty`},
		{name: "empty image", body: "    envoy_image = \"\"\n", wantErr: "agent.hcl:4:19: Invalid envoy_image"},
		{name: "not a list", body: "    runtimes = \"docker\"\n", wantErr: "agent.hcl:4:17: Unsuitable value type"},
		{name: "unknown key", body: "    sidecar_image = \"x\"\n", wantErr: `agent.hcl:4:5: Unsupported argument; An argument named "sidecar_image"`},
	}
	// The servers' connect { sidecar_image } is the default image, and
	// pullable.
	c, err := ParseConfig("agent.hcl", []byte("data_dir = \"/x\"\nconnect {\n  sidecar_image = \"mirror/envoy:2\"\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cc := (&Agent{cfg: c, logger: testLogger()}).connectProxyDriverConfig("/state", nil); cc.EnvoyImage != "mirror/envoy:2" || !cc.EnvoyImagePull {
		t.Errorf("with connect.sidecar_image: %+v", cc)
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
			a := &Agent{cfg: c, logger: testLogger()}
			tc.check(t, a.connectProxyDriverConfig("/state", nil))
		})
	}
}
