package connectproxy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
)

// validConfig is the injected sidecar's config as the client interpolates
// it for an allocation under /d/alloc/a1.
func validConfig() map[string]any {
	return map[string]any{
		"proxy_id":       "_nomad-task-a1-group-web-web-http-sidecar-proxy",
		"service":        "web",
		"grpc_addr":      "unix:///d/alloc/a1/alloc/run/meshlet_grpc.sock",
		"admin_bind":     "127.0.0.2:19001",
		"mode":           "auto",
		"envoy_binary":   "/usr/bin/envoy",
		"bootstrap_path": "/d/alloc/a1/connect-proxy-web/secrets/envoy_bootstrap.json",
	}
}

func with(kv ...any) map[string]any {
	m := validConfig()
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(m, kv[i].(string))
		} else {
			m[kv[i].(string)] = kv[i+1]
		}
	}
	return m
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name   string
		config map[string]any
		want   string
	}{
		{"unknown key", with("command", "/bin/sh"), `unknown key "command" (the connect_proxy driver takes admin_bind, bootstrap_path, envoy_args, envoy_binary, grpc_addr, mode, network_mode, proxy_id, service, token_file)`},
		{"wrong type", with("service", 3.0), "service must be a string, not a number"},
		{"list for a string", with("mode", []any{"envoy"}), "mode must be a string, not a list"},
		{"missing proxy_id", with("proxy_id", nil), "proxy_id is required"},
		{"empty service", with("service", ""), "service is required"},
		{"missing grpc_addr", with("grpc_addr", nil), "grpc_addr is required"},
		{"nil config", nil, "proxy_id is required"},
		{"bad mode", with("mode", "docker"), `mode "docker" is not auto, envoy or builtin`},
		{"bad admin_bind", with("admin_bind", "19001"), `admin_bind "19001" is not host:port`},
		{"envoy_args not a list", with("envoy_args", "-l debug"), "envoy_args: must be a list of strings, not a string"},
		{"envoy_args element", with("envoy_args", []any{"-l", map[string]any{}}), "envoy_args: element 1 must be a string, not a map"},
		{"bad network_mode", with("network_mode", "bridge"), `network_mode "bridge" is not "host" (or unset)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(tc.config)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line wrapping ErrInvalidConfig with %q", err, tc.want)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	tc, err := ParseConfig(with("envoy_args", []any{"--log-level", "debug", "--concurrency", 2.0, "--x", true}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"connect", "sidecar", "-proxy-id", "_nomad-task-a1-group-web-web-http-sidecar-proxy", "-service", "web",
		"-grpc-addr", "unix:///d/alloc/a1/alloc/run/meshlet_grpc.sock", "-admin-bind", "127.0.0.2:19001", "-mode", "auto",
		"-envoy-binary", "/usr/bin/envoy", "-bootstrap-path", "/d/alloc/a1/connect-proxy-web/secrets/envoy_bootstrap.json",
		"--", "--log-level", "debug", "--concurrency", "2", "--x", "true"}
	if got := tc.Args(); !slices.Equal(got, want) {
		t.Fatalf("args\n%q\nwant\n%q", got, want)
	}
	// Unset keys are left to the command's defaults; a value that looks
	// like a flag stays the value of its own flag.
	tc, err = ParseConfig(map[string]any{"proxy_id": "-mode", "service": "web", "grpc_addr": "unix:///s", "envoy_args": []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tc.Args(), []string{"connect", "sidecar", "-proxy-id", "-mode", "-service", "web", "-grpc-addr", "unix:///s"}; !slices.Equal(got, want) {
		t.Fatalf("args %q, want %q", got, want)
	}
}

func testTask(config map[string]any) *driver.TaskConfig {
	return &driver.TaskConfig{ID: "a1/connect-proxy-web/1", AllocID: "a1", Name: "connect-proxy-web", Config: config,
		TaskDir: "/d/alloc/a1/connect-proxy-web", AllocDir: "/d/alloc/a1/alloc", NetNSPath: "/var/run/netns/a1",
		Env: map[string]string{"NOMAD_ALLOC_ID": "a1", "LD_PRELOAD": "/alloc/tmp/x.so", "LD_LIBRARY_PATH": "/tmp", "GCONV_PATH": "/tmp",
			"TMPDIR": "/tmp", "PATH": "/usr/bin:/bin", "LDAP_URI": "ldap://x"}}
}

// TestLaunch: the command is the agent's meshlet binary with the config's
// flags; the config may name only its allocation's socket, a bootstrap in
// its secrets dir and the node's envoy binary; the task needs a network
// namespace; loader variables never reach the process started as root.
func TestLaunch(t *testing.T) {
	var logs strings.Builder
	d := New(Config{Binary: "/usr/local/bin/meshlet", EnvoyBinary: "/usr/bin/envoy", StateDir: t.TempDir()},
		hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn}))
	l, err := d.launch(testTask(with("bootstrap_path", "secrets/envoy_bootstrap.json", "token_file", "secrets/si_token")))
	if err != nil {
		t.Fatal(err)
	}
	if l.Command != "/usr/local/bin/meshlet" || !slices.Contains(l.Args, "/d/alloc/a1/connect-proxy-web/secrets/envoy_bootstrap.json") ||
		!slices.Contains(l.Args, "-token-file") || !slices.Contains(l.Args, "/d/alloc/a1/connect-proxy-web/secrets/si_token") {
		t.Errorf("launch %s %q", l.Command, l.Args)
	}
	wantEnv := map[string]string{"NOMAD_ALLOC_ID": "a1", "PATH": "/usr/bin:/bin", "LDAP_URI": "ldap://x"}
	if len(l.Env) != len(wantEnv) || l.Env["NOMAD_ALLOC_ID"] != "a1" || l.Env["LDAP_URI"] != "ldap://x" {
		t.Errorf("env %v, want %v", l.Env, wantEnv)
	}
	if !strings.Contains(logs.String(), `vars="GCONV_PATH,LD_LIBRARY_PATH,LD_PRELOAD,TMPDIR"`) || !strings.Contains(logs.String(), "alloc_id=a1") {
		t.Errorf("dropped variables not warned about:\n%s", logs.String())
	}
	if l, err := d.launch(testTask(with("envoy_binary", "", "mode", nil, "admin_bind", nil, "bootstrap_path", nil))); err != nil ||
		slices.Contains(l.Args, "-envoy-binary") || slices.Contains(l.Args, "-mode") {
		t.Errorf("unset keys: %v, %v", l, err)
	}

	tests := []struct {
		name   string
		config map[string]any
		task   func(*driver.TaskConfig)
		want   error
		msg    string
	}{
		{"another allocation's socket", with("grpc_addr", "unix:///d/alloc/a2/alloc/run/meshlet_grpc.sock"), nil, ErrInvalidConfig,
			`grpc_addr "unix:///d/alloc/a2/alloc/run/meshlet_grpc.sock" is not the allocation's control plane socket unix:///d/alloc/a1/alloc/run/meshlet_grpc.sock`},
		{"a tcp address", with("grpc_addr", "127.0.0.1:8502"), nil, ErrInvalidConfig, "is not the allocation's control plane socket"},
		{"a socket in alloc/tmp", with("grpc_addr", "unix:///d/alloc/a1/alloc/run/../tmp/meshlet_grpc.sock"), nil, ErrInvalidConfig, "is not the allocation's control plane socket"},
		{"bootstrap outside secrets", with("bootstrap_path", "/etc/shadow"), nil, ErrInvalidConfig,
			`bootstrap_path "/etc/shadow" is not in the task's secrets dir /d/alloc/a1/connect-proxy-web/secrets`},
		{"token file outside secrets", with("token_file", "/etc/shadow"), nil, ErrInvalidConfig,
			`token_file "/etc/shadow" is not in the task's secrets dir /d/alloc/a1/connect-proxy-web/secrets`},
		{"bootstrap escaping secrets", with("bootstrap_path", "/d/alloc/a1/connect-proxy-web/secrets/../local/x"), nil, ErrInvalidConfig, "is not in the task's secrets dir"},
		{"another envoy", with("envoy_binary", "/bin/sh"), nil, ErrInvalidConfig, `envoy_binary "/bin/sh" is not this node's envoy binary /usr/bin/envoy`},
		{"no network namespace", validConfig(), func(c *driver.TaskConfig) { c.NetNSPath = "" }, ErrNoNetworkNamespace,
			`connect_proxy tasks run in their allocation's network namespace; its group needs network mode "bridge" or "cni/<name>"`},
		{"config errors first", with("x", 1.0), func(c *driver.TaskConfig) { c.NetNSPath = "" }, ErrInvalidConfig, `unknown key "x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testTask(tc.config)
			if tc.task != nil {
				tc.task(cfg)
			}
			_, err := d.launch(cfg)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want %v with %q", err, tc.want, tc.msg)
			}
		})
	}
	host := testTask(with("network_mode", "host"))
	host.NetNSPath = ""
	if l, err := d.launch(host); err != nil || slices.Contains(l.Args, "network_mode") {
		t.Fatalf("a host-mode gateway without a namespace: %v %v", l, err)
	}
	noEnvoy := New(Config{Binary: "/usr/local/bin/meshlet", StateDir: t.TempDir()}, nil)
	if _, err := noEnvoy.launch(testTask(validConfig())); err == nil || !strings.Contains(err.Error(), "this node has no envoy binary") {
		t.Fatalf("envoy_binary on a node without envoy: %v", err)
	}
}

func TestFingerprint(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "meshlet")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		binary, wantHealth string
		healthy            bool
	}{
		{exe, "healthy", true},
		{filepath.Join(dir, "gone"), "meshlet binary unavailable: stat " + filepath.Join(dir, "gone") + ": no such file or directory", false},
		{filepath.Join(dir, "plain"), "meshlet binary " + filepath.Join(dir, "plain") + " is not an executable file", false},
		{dir, "is not an executable file", false},
	}
	for _, tc := range tests {
		d := New(Config{Binary: tc.binary, StateDir: t.TempDir()}, nil)
		fp, err := d.Fingerprint(context.Background())
		if err != nil || !fp.Detected || fp.Healthy != tc.healthy || !strings.Contains(fp.HealthDescription, tc.wantHealth) ||
			fp.Attributes["driver.connect_proxy"] != "1" || d.Name() != Name {
			t.Errorf("%s: fingerprint %+v, %v", tc.binary, fp, err)
		}
	}
}
