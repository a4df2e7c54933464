package command

import (
	"os"
	"testing"
)

// runCLIEnv makes the test binary run the CLI instead of the tests, for
// tests that need the CLI in a process of its own (a sidecar that drops
// privileges, re-executes itself and finally executes Envoy).
const runCLIEnv = "MESHLET_TEST_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(runCLIEnv) == "1" {
		os.Exit(Run(os.Args[1:]))
	}
	os.Exit(m.Run())
}
