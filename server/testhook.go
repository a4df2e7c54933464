package server

import (
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// PlanPauseEnv names a test hook of the end-to-end tests that race plans
// between servers: when the variable names a file and that file exists,
// holding a Go duration, a server pauses that long between computing a
// plan and committing it. Unset (production) it costs one Getenv per plan.
const PlanPauseEnv = "MESHLET_TEST_PLAN_PAUSE_FILE"

func testPauseBeforeCommit(logger hclog.Logger) {
	path := os.Getenv(PlanPauseEnv)
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil || d <= 0 {
		return
	}
	logger.Warn("test hook: pausing before a plan commit", "pause", d.String(), "hook", PlanPauseEnv)
	time.Sleep(d)
}
