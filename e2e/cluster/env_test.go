package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
)

// figPrefix marks the figures these tests print, one "CLUSTERFIG <key>
// <value>" line each (the shape of e2e/faults' FAULTFIG lines), so a bench
// can collect them from a verbose run. Durations are in seconds.
const figPrefix = "CLUSTERFIG"

// figure logs one timing for people and for the bench.
func figure(t *testing.T, key string, d time.Duration) {
	t.Helper()
	t.Logf("%s: %s", key, d.Round(time.Millisecond))
	t.Logf("%s %s %g", figPrefix, key, d.Seconds())
}

// binaries returns the meshlet binary and the CNI plugin dir, or skips t:
// these tests run the binaries `make test` built (MESHLET_BIN and
// MESHLET_CNI_PATH) and need root for namespaces, veths and bridges.
func binaries(t *testing.T) (bin, cniPath string) {
	t.Helper()
	testutil.RequireRoot(t)
	bin = os.Getenv("MESHLET_BIN")
	if bin == "" {
		t.Skip("cluster e2e test skipped: MESHLET_BIN is unset (run `make test`, or set MESHLET_BIN and MESHLET_CNI_PATH to bin/meshlet and bin/cni)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("MESHLET_BIN: %v", err)
	}
	cniPath = os.Getenv("MESHLET_CNI_PATH")
	if cniPath == "" {
		cniPath = filepath.Join(filepath.Dir(bin), "cni")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("cluster e2e test skipped: iproute2's ip command is not installed")
	}
	return bin, cniPath
}

// requireHA skips the three-server test until the lead enables it.
func requireHA(t *testing.T) {
	t.Helper()
	if os.Getenv("MESHLET_E2E_SKIP_HA") != "" {
		t.Skip("three-server test skipped: MESHLET_E2E_SKIP_HA is set")
	}
}

// poll calls cond every interval until it returns true or timeout passes.
// It returns how long that took, or fails t with what and cond's last
// explanation.
func poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
