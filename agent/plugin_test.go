package agent

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// TestExternalDriverPlugin builds the driver package's example plugin
// (raw_exec served as "echo") into plugin_dir and runs a job through it.
func TestExternalDriverPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a plugin binary; skipped with -short")
	}
	pluginDir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "echodriver"), "../driver/plugin/testdata/echodriver")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	t.Setenv("ECHO_STATE_DIR", t.TempDir())
	cfg := DevConfig()
	cfg.DataDir, cfg.Ports, cfg.NodeName, cfg.PluginDir = t.TempDir(), Ports{}, "test-node", pluginDir
	a, err := New(cfg, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	cleanupJob(t, &a, "plugged")
	if d := a.Client().Node().Drivers["echo"]; d == nil || !d.Healthy {
		t.Fatalf("echo driver not fingerprinted: %+v", a.Client().Node().Drivers)
	}
	job := parseJob(t, `
job "plugged" {
  group "g" {
    task "t" {
      driver = "echo"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo via-plugin $NOMAD_TASK_NAME; exec sleep 300"]
      }
    }
  }
}`)
	if _, err := a.Backend().RegisterJob(context.Background(), job, api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocStatus(t, a.Backend(), "plugged", structs.AllocClientStatusRunning)
	testutil.WaitFor(t, hang, "plugin task output", func() bool {
		return strings.Contains(readLogs(t, a.Backend(), alloc.ID, "stdout"), "via-plugin t")
	})
	stopJob(t, a.Backend(), "plugged", false)
	waitAllocStatus(t, a.Backend(), "plugged", structs.AllocClientStatusComplete)
}
