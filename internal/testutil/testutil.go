// Package testutil holds helpers shared by meshlet's tests: tier gates for
// privileged tests and small polling helpers. It is imported by tests only.
package testutil

import (
	"os"
	"testing"
	"time"
)

// RequireRoot skips a privileged test (network namespaces, CNI, iptables)
// with a clear message unless it runs as root. MESHLET_SKIP_PRIVILEGED=1
// skips it even as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Getenv("MESHLET_SKIP_PRIVILEGED") == "1" {
		t.Skip("privileged test skipped: MESHLET_SKIP_PRIVILEGED=1")
	}
	if os.Geteuid() != 0 {
		t.Skip("privileged test skipped: needs root (network namespaces, CNI, iptables); run `sudo make test`")
	}
}

// WaitFor polls cond every 20ms until it returns true or timeout passes,
// then fails the test with msg. It is a correctness wait, not a timing
// assertion: timeouts are generous.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
