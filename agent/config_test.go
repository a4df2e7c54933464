package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		wantErr string
		check   func(t *testing.T, c *Config)
	}{
		{name: "defaults", src: `data_dir = "/var/lib/meshlet"`, check: func(t *testing.T, c *Config) {
			if c.BindAddr != "127.0.0.1" || c.Ports.HTTP != 4646 || c.Ports.ConnectHTTP != 8500 || c.Ports.GRPC != 8502 ||
				c.Datacenter != "dc1" || c.Region != "global" || c.Sidecar != "auto" || c.Client.MinDynamicPort != 20000 ||
				c.Client.MaxDynamicPort != 32000 || c.Client.BridgeNetworkSubnet != "172.26.64.0/20" || c.DataDir != "/var/lib/meshlet" {
				t.Errorf("defaults = %+v", c)
			}
		}},
		{name: "everything", src: `
data_dir   = "/srv/m"
bind_addr  = "127.0.0.2"
datacenter = "eu1"
region     = "eu"
node_name  = "box"
plugin_dir = "/srv/plugins"
log_level  = "warn"
sidecar    = "builtin"
envoy_binary = "/usr/bin/envoy"
ports {
  http = 0
  grpc = 9502
}
client {
  cni_path = "/opt/cni/bin"
  cni_config_dir = "/etc/cni"
  bridge_network_subnet = "10.10.0.0/16"
  bridge_network_name = "mesh0"
  min_dynamic_port = 30000
  max_dynamic_port = 30100
  options = { "driver.exec.enable" = "false" }
  meta = { rack = "r1" }
}`, check: func(t *testing.T, c *Config) {
			if c.Ports.HTTP != 0 || c.Ports.GRPC != 9502 || c.Ports.ConnectHTTP != 8500 || c.BindAddr != "127.0.0.2" ||
				c.Datacenter != "eu1" || c.NodeName != "box" || c.Sidecar != "builtin" || c.Client.CNIPath != "/opt/cni/bin" ||
				c.Client.MinDynamicPort != 30000 || c.Client.Options["driver.exec.enable"] != "false" || c.Client.Meta["rack"] != "r1" ||
				c.PluginDir != "/srv/plugins" || c.EnvoyBinary != "/usr/bin/envoy" || c.Client.BridgeNetworkName != "mesh0" {
				t.Errorf("config = %+v", c)
			}
		}},
		{name: "unknown key has a position", src: "data_dir = \"/x\"\nbogus = 1\n",
			wantErr: "agent.hcl:2:1: Unsupported argument"},
		{name: "unknown block key", src: "data_dir = \"/x\"\nclient {\n  cni_pth = \"/x\"\n}\n",
			wantErr: "agent.hcl:3:3: Unsupported argument"},
		{name: "syntax error", src: "ports {\n", wantErr: "agent.hcl:1:"},
		{name: "wrong type", src: "data_dir = \"/x\"\nports { http = \"abc\" }\n", wantErr: "agent.hcl:2:17: Unsuitable value type"},
		{name: "bad range", src: "data_dir = \"/x\"\nclient {\n min_dynamic_port = 40000\n max_dynamic_port = 30000\n}\n",
			wantErr: "dynamic port range 40000-30000 is invalid"},
		{name: "bad sidecar", src: "data_dir = \"/x\"\nsidecar = \"nginx\"\n", wantErr: `sidecar "nginx" must be auto, envoy or builtin`},
		{name: "data dir required", src: "region = \"x\"\n", wantErr: "data_dir is required outside dev mode"},
		{name: "reserved ports and http_api", src: `
data_dir = "/x"
client {
  reserved {
    reserved_ports = "22,80,8000-8100"
  }
}
http_api {
  allowed_hosts   = ["meshlet.internal"]
  allowed_origins = ["https://ui.example:8443"]
}`, check: func(t *testing.T, c *Config) {
			if c.Client.ReservedPorts != "22,80,8000-8100" || len(c.HTTPAPI.AllowedHosts) != 1 ||
				c.HTTPAPI.AllowedHosts[0] != "meshlet.internal" || c.HTTPAPI.AllowedOrigins[0] != "https://ui.example:8443" {
				t.Errorf("config = %+v", c)
			}
		}},
		{name: "bad reserved ports", src: "data_dir = \"/x\"\nclient {\n reserved { reserved_ports = \"22,abc\" }\n}\n",
			wantErr: `client.reserved.reserved_ports: invalid port list: "abc" is not a port`},
		// As in Nomad, reserved ports may lie in the dynamic range: the
		// scheduler skips them when it picks a dynamic port.
		{name: "reserved ports in dynamic range", src: "data_dir = \"/x\"\nclient {\n reserved { reserved_ports = \"25000\" }\n}\nports { http = 20001 }\n",
			check: func(t *testing.T, c *Config) {
				if c.Client.ReservedPorts != "25000" || c.Ports.HTTP != 20001 {
					t.Errorf("config = %+v", c)
				}
			}},
		{name: "client gc", src: "data_dir = \"/x\"\nclient {\n gc_interval = \"30s\"\n gc_max_allocs = 7\n gc_alloc_ttl = \"10m\"\n gc_disk_usage_threshold = 70\n}\n",
			check: func(t *testing.T, c *Config) {
				if c.Client.GCInterval != 30*time.Second || c.Client.GCMaxAllocs != 7 || c.Client.GCAllocTTL != 10*time.Minute || c.Client.GCDiskUsageThreshold != 70 {
					t.Errorf("client gc = %v %d %v", c.Client.GCInterval, c.Client.GCMaxAllocs, c.Client.GCAllocTTL)
				}
			}},
		{name: "max kill timeout", src: "data_dir = \"/x\"\nclient {\n max_kill_timeout = \"10s\"\n}\n",
			check: func(t *testing.T, c *Config) {
				if c.Client.MaxKillTimeout != 10*time.Second {
					t.Errorf("client max_kill_timeout = %v, want 10s", c.Client.MaxKillTimeout)
				}
			}},
		{name: "negative max kill timeout", src: "data_dir = \"/x\"\nclient {\n max_kill_timeout = \"-1s\"\n}\n",
			wantErr: "max_kill_timeout and gc_max_allocs must not be negative"},
		{name: "bad gc interval", src: "data_dir = \"/x\"\nclient {\n gc_interval = \"5 minutes\"\n}\n",
			wantErr: `agent.hcl:3:16: Invalid duration; client.gc_interval: time: unknown unit " minutes" in duration "5 minutes"`},
		{name: "duration not a string", src: "data_dir = \"/x\"\nclient {\n gc_alloc_ttl = [1]\n}\n",
			wantErr: `agent.hcl:3:17: Unsuitable value type`},
		{name: "bad connect duration", src: "data_dir = \"/x\"\nconnect {\n leaf_ttl = \"72\"\n}\n",
			wantErr: `agent.hcl:3:13: Invalid duration; connect.leaf_ttl: time: missing unit in duration "72"`},
		{name: "bad heartbeat duration", src: "data_dir = \"/x\"\nserver {\n heartbeat_grace = \"10x\"\n}\n",
			wantErr: `agent.hcl:3:20: Invalid duration; server.heartbeat_grace: time: unknown unit "x" in duration "10x"`},
		{name: "null duration is unset", src: "data_dir = \"/x\"\nclient {\n gc_interval = null\n}\n",
			check: func(t *testing.T, c *Config) {
				if c.Client.GCInterval != DefaultConfig().Client.GCInterval {
					t.Errorf("gc_interval = %v", c.Client.GCInterval)
				}
			}},
		{name: "negative gc", src: "data_dir = \"/x\"\nclient {\n gc_max_allocs = -1\n}\n",
			wantErr: "gc_max_allocs must not be negative"},
		{name: "gc disk threshold not a percentage", src: "data_dir = \"/x\"\nclient {\n gc_disk_usage_threshold = 120\n}\n",
			wantErr: "gc_disk_usage_threshold 120 must be a percentage"},
		{name: "server bounds", src: "data_dir = \"/x\"\nserver {\n job_tracked_versions = 3\n job_max_count = 500\n job_max_size = 65536\n eval_gc_threshold = \"2h\"\n alloc_gc_threshold = \"30m\"\n gc_interval = \"1m\"\n}\n",
			check: func(t *testing.T, c *Config) {
				s := c.Server
				if s.JobTrackedVersions != 3 || s.JobMaxCount != 500 || s.JobMaxSize != 65536 || s.EvalGCThreshold != 2*time.Hour ||
					s.AllocGCThreshold != 30*time.Minute || s.GCInterval != time.Minute {
					t.Errorf("server = %+v", s)
				}
			}},
		{name: "bad server duration", src: "data_dir = \"/x\"\nserver {\n eval_gc_threshold = \"soon\"\n}\n",
			wantErr: `agent.hcl:3:22: Invalid duration; server.eval_gc_threshold: time: invalid duration "soon"`},
		{name: "negative versions", src: "data_dir = \"/x\"\nserver {\n job_tracked_versions = -2\n}\n",
			wantErr: "server.job_tracked_versions must not be negative"},
		{name: "connect leaf bounds", src: "data_dir = \"/x\"\nconnect {\n max_api_leaves = 16\n leaf_idle_ttl = \"2h\"\n}\n",
			check: func(t *testing.T, c *Config) {
				if c.Connect.MaxAPILeaves != 16 || c.Connect.LeafIdleTTL != 2*time.Hour {
					t.Errorf("connect = %+v", c.Connect)
				}
			}},
		{name: "docker sidecars", src: "data_dir = \"/x\"\nconnect {\n sidecar_driver = \"docker\"\n sidecar_image = \"local/envoy:test\"\n}\n",
			check: func(t *testing.T, c *Config) {
				if o := c.Connect.injectOptions(); o.SidecarDriver != "docker" || o.SidecarImage != "local/envoy:test" {
					t.Errorf("connect = %+v", c.Connect)
				}
			}},
		{name: "bad sidecar driver", src: "data_dir = \"/x\"\nconnect {\n sidecar_driver = \"podman\"\n}\n",
			wantErr: `connect.sidecar_driver "podman" must be connect_proxy or docker`},
		{name: "negative api leaves", src: "data_dir = \"/x\"\nconnect {\n max_api_leaves = -1\n}\n",
			wantErr: "max_api_leaves must not be negative"},
		{name: "bad origin", src: "data_dir = \"/x\"\nhttp_api { allowed_origins = [\"ui.example\"] }\n",
			wantErr: `http_api.allowed_origins "ui.example" must be scheme://host[:port]`},
		{name: "dev needs no data dir", src: "dev = true\n", check: func(t *testing.T, c *Config) {
			if !c.Dev || c.DataDir != "" {
				t.Errorf("config = %+v", c)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("agent.hcl", []byte(tc.src))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error is not one line: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestLoadConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.hcl")
	if err := os.WriteFile(path, []byte("data_dir = \"rel\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfigFile(path)
	if err != nil || !filepath.IsAbs(c.DataDir) {
		t.Fatalf("config %+v, %v", c, err)
	}
	if _, err := LoadConfigFile(filepath.Join(t.TempDir(), "missing.hcl")); err == nil {
		t.Fatal("missing file accepted")
	}
	if _, err := New(&Config{BindAddr: "nope"}, nil); err == nil || !strings.Contains(err.Error(), `bind_addr "nope"`) {
		t.Fatalf("New accepted a bad config: %v", err)
	}
}
