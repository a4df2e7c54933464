package rawexec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
	"github.com/meshlet/meshlet/internal/testutil"
)

// The driver logs under the name its caller gave the logger, as the agent
// names it (agent.driver.raw_exec), without adding its own name again.
func TestLoggerName(t *testing.T) {
	out := &testutil.SyncBuffer{}
	agent := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Info, Output: out, JSONFormat: true})
	d := New(Config{StateDir: t.TempDir()}, agent.Named("driver").Named(Name))
	cfg := dt.TaskConfig(t, "web", "true")
	dt.Start(t, d, cfg)
	dt.Wait(t, d, cfg.ID)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("starting a task logged nothing")
	}
	for _, line := range lines {
		var entry struct {
			Module  string `json:"@module"`
			Message string `json:"@message"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("bad log line %q: %v", line, err)
		}
		if entry.Module != "agent.driver.raw_exec" {
			t.Fatalf("%q logged under %q; want agent.driver.raw_exec", entry.Message, entry.Module)
		}
	}
}
