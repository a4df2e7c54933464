package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/connectproxy"
	"github.com/meshlet/meshlet/driver/rawexec"
	"github.com/meshlet/meshlet/structs"
)

const rawExecBlock = `plugin "raw_exec" {
  config {
    enabled = true
  }
}
`

// TestRawExecEnabledSources: raw_exec is off by default, on with the
// plugin block, the legacy client option or dev mode; the block wins.
func TestRawExecEnabledSources(t *testing.T) {
	tests := []struct {
		name string
		src  string
		dev  bool
		want bool
	}{
		{"default off", ``, false, false},
		{"plugin block on", rawExecBlock, false, true},
		{"plugin block off", "plugin \"raw_exec\" {\n  config {\n    enabled = false\n  }\n}\n", false, false},
		{"plugin block without config", `plugin "raw_exec" {}`, false, false},
		{"legacy option on", `client { options = { "driver.raw_exec.enable" = "true" } }`, false, true},
		{"legacy option off in dev", `client { options = { "driver.raw_exec.enable" = "0" } }`, true, false},
		{"dev on", ``, true, true},
		{"plugin block beats dev", "plugin \"raw_exec\" {\n  config {\n    enabled = false\n  }\n}\n", true, false},
		{"plugin block beats option", "client { options = { \"driver.raw_exec.enable\" = \"false\" } }\n" + rawExecBlock, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig("agent.hcl", []byte("data_dir = \"/x\"\n"+tt.src))
			if err != nil {
				t.Fatal(err)
			}
			c.Dev = tt.dev // as the -dev flag over a config file
			a := &Agent{cfg: c, logger: testLogger()}
			if got := a.rawExecEnabled(); got != tt.want {
				t.Fatalf("rawExecEnabled = %v, want %v", got, tt.want)
			}
		})
	}
	if a := (&Agent{cfg: DevConfig(), logger: testLogger()}); !a.rawExecEnabled() {
		t.Fatal("DevConfig does not enable raw_exec")
	}
	if a := (&Agent{cfg: DefaultConfig(), logger: testLogger()}); a.rawExecEnabled() {
		t.Fatal("DefaultConfig enables raw_exec")
	}
}

func TestParsePluginBlockErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"unknown raw_exec key", "plugin \"raw_exec\" {\n  config {\n    enabled = true\n    no_cgroups = true\n  }\n}\n",
			`agent.hcl:5:5: Unsupported argument; An argument named "no_cgroups"`},
		{"not a bool", "plugin \"raw_exec\" {\n  config {\n    enabled = \"yes please\"\n  }\n}\n", "agent.hcl:4:16: Unsuitable value type"},
		{"unknown exec key", "plugin \"exec\" {\n  config {\n    allow_caps = [\"kill\"]\n    no_cgroups = true\n  }\n}\n", "agent.hcl:5:5: Unsupported argument"},
		{"unknown connect_proxy key", "plugin \"connect_proxy\" {\n  config {\n    enabled = false\n  }\n}\n",
			`agent.hcl:4:5: Unsupported argument; An argument named "enabled"`},
		{"missing label", "plugin {\n}\n", "agent.hcl:2:8: Missing name for plugin"},
		{"unknown plugin key", "plugin \"raw_exec\" {\n  enabled = true\n}\n", "agent.hcl:3:3: Unsupported argument"},
		{"twice", "plugin \"raw_exec\" {}\nplugin \"raw_exec\" {}\n", `agent.hcl: invalid agent configuration: plugin "raw_exec" is configured more than once`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("agent.hcl", []byte("data_dir = \"/x\"\n"+tt.src))
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error = %v, want one line containing %q", err, tt.want)
			}
		})
	}
	// External plugins' blocks are kept (warned about at start if unused).
	c, err := ParseConfig("agent.hcl", []byte("data_dir = \"/x\"\nplugin \"podman\" {\n  args = [\"-v\"]\n  config {\n    volumes { enabled = true }\n  }\n}\n"))
	if err != nil || len(c.Plugins["podman"].Args) != 1 {
		t.Fatalf("podman plugin block: %+v, %v", c, err)
	}
}

// TestDisabledDriverRefusesTasks: the disabled driver is undetected and
// starts nothing even if asked directly.
func TestDisabledDriverRefusesTasks(t *testing.T) {
	d := disabledDriver{Driver: rawexec.New(rawexec.Config{StateDir: t.TempDir()}, testLogger()), hint: "the hint"}
	fp, err := d.Fingerprint(context.Background())
	if err != nil || fp.Detected || fp.Healthy || fp.HealthDescription != "disabled; enable it with the hint" {
		t.Fatalf("fingerprint = %+v, %v", fp, err)
	}
	_, err = d.StartTask(&driver.TaskConfig{ID: "x", Name: "t"})
	if !errors.Is(err, ErrDriverDisabled) {
		t.Fatalf("StartTask error = %v", err)
	}
}

// TestRawExecDisabledRefusesPlacement: an agent outside dev mode without
// the plugin block places no raw_exec job and says why; with the block the
// same job runs.
func TestRawExecDisabledRefusesPlacement(t *testing.T) {
	a := startAgentWith(t, t.TempDir(), func(c *Config) { c.Dev = false })
	t.Cleanup(func() { _ = a.Shutdown() })
	node := a.Client().Node()
	if d := node.Drivers[rawexec.Name]; d == nil || d.Detected || !strings.HasPrefix(d.HealthDescription, "disabled") {
		t.Fatalf("raw_exec on the node = %+v", d)
	}
	if _, ok := node.Attributes["driver.raw_exec"]; ok {
		t.Fatal("node has attribute driver.raw_exec")
	}
	// Connect sidecars need no raw_exec: their driver is always there.
	if d := node.Drivers[connectproxy.Name]; d == nil || !d.Detected || !d.Healthy || node.Attributes["driver.connect_proxy"] != "1" {
		t.Fatalf("connect_proxy on the node = %+v", d)
	}
	b := a.Backend()
	ctx := context.Background()
	res, err := b.RegisterJob(ctx, parseJob(t, shJob("raw", "echo hi", "")), api.RegisterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := b.(api.EvaluationBackend).GetEvaluation(ctx, res.EvalID)
	if err != nil {
		t.Fatal(err)
	}
	want := `driver raw_exec not available on node test-node: disabled; enable it with plugin "raw_exec" { config { enabled = true } } in the agent config`
	if m := ev.FailedTGAllocs["g"]; m == nil || m.ConstraintFiltered[want] != 1 {
		t.Fatalf("evaluation = %+v, failed = %+v", ev, ev.FailedTGAllocs["g"])
	}
	if allocs, _ := b.JobAllocations(ctx, "raw"); len(allocs) != 0 {
		t.Fatalf("%d allocations placed", len(allocs))
	}
	_ = a.Shutdown()

	// The same kind of agent with the plugin block runs the job.
	dir := t.TempDir()
	cfg, err := ParseConfig("agent.hcl", []byte(fmt.Sprintf("data_dir = %q\n%s", dir, rawExecBlock)))
	if err != nil {
		t.Fatal(err)
	}
	a2 := startAgentWith(t, dir, func(c *Config) { c.Plugins = cfg.Plugins; c.Dev = false })
	cleanupJob(t, &a2, "raw2")
	if _, err := a2.Backend().RegisterJob(ctx, parseJob(t, shJob("raw2", loopScript, "")), api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAllocStatus(t, a2.Backend(), "raw2", structs.AllocClientStatusRunning)
	if !a2.Client().Node().Drivers[rawexec.Name].Detected {
		t.Fatal("raw_exec not detected with the plugin block")
	}
}

// TestWarnUnusedPlugins: blocks naming no loaded driver, and args or config
// for external plugins, are warned about, not silently dropped.
func TestWarnUnusedPlugins(t *testing.T) {
	c, err := ParseConfig("agent.hcl", []byte("data_dir = \"/x\"\nplugin \"podman\" {}\nplugin \"echo\" {\n  config {\n    x = 1\n  }\n}\n"+
		"plugin \"connect_proxy\" {\n  config {}\n}\n"+rawExecBlock))
	if err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	a := &Agent{cfg: c, logger: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Warn})}
	raw := rawexec.New(rawexec.Config{StateDir: t.TempDir()}, testLogger())
	cp := connectproxy.New(connectproxy.Config{StateDir: t.TempDir()}, testLogger())
	a.warnUnusedPlugins([]driver.Driver{raw, cp, namedDriver{Driver: raw, name: "echo"}})
	out := buf.String()
	if !strings.Contains(out, "plugin block names no loaded driver; ignoring it: plugin=podman") ||
		!strings.Contains(out, "external plugins get no args or config; ignoring them: plugin=echo") || strings.Contains(out, "raw_exec") ||
		strings.Contains(out, "connect_proxy") {
		t.Fatalf("warnings:\n%s", out)
	}
}

type namedDriver struct {
	driver.Driver
	name string
}

func (d namedDriver) Name() string { return d.name }
