package docker_test

import (
	"fmt"
	"testing"

	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/internal/drivertest"
)

// The last output of a container that exits at once reaches the task's
// log even without its newline: dockerd writes such a line as the
// output closes, which can be after the followed log stream ended, so
// the copier reads once more from its cursor.
func TestLastLineWithoutNewline(t *testing.T) {
	d := newDriver(t, docker.Config{})
	lost := 0
	for i := range 15 {
		cfg := taskConfig(t, fmt.Sprintf("quick%d", i), "sh", "-c", "echo first; echo -n last-without-newline")
		drivertest.Start(t, d, cfg)
		drivertest.Wait(t, d, cfg.ID)
		if got := drivertest.Log(t, cfg, "stdout"); got != "first\nlast-without-newline" {
			lost++
			t.Logf("run %d: stdout %q", i, got)
		}
	}
	if lost > 0 {
		t.Errorf("%d of 15 tasks lost output", lost)
	}
}
